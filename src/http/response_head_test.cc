// AppendResponseHead (the head SendHead and SendHeadFrom write) against the same edits made to a
// copy of the head with Beast's own set and erase, over combinations of what a relayed head can
// carry: hop-by-hop fields, fields its Connection header names, repeated fields, a Server or a
// Content-Length or neither, added fields that replace some of its own (in other letter cases),
// HTTP/1.0 and 1.1, keep-alive or not, a custom reason or none.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/server.h"

namespace prefix_router::http {
namespace {

namespace bhttp = boost::beast::http;

// The relay's rule (gateway/request_path.cc's NotRelayed).
bool HopByHopOrNamed(const bhttp::response_header<>& head, std::string_view name) {
  return IsHopByHopHeader(name) || NamedByConnection(head, name);
}

// What SendHead wrote before AppendResponseHead: Beast edits on a copy, then the copy in wire form.
std::string Reference(const bhttp::response_header<>& head, Exchange::SkipField skip,
                      const std::vector<std::pair<std::string_view, std::string_view>>& extra, std::string_view server,
                      const std::vector<std::pair<std::string, std::string>>& always, unsigned version,
                      bool& keep_alive, bool& chunked) {
  bhttp::response_header<> copy;
  copy.result(head.result_int());
  copy.reason(head.reason());
  for (const auto& f : head) {
    if (skip == nullptr || !skip(head, f.name_string())) copy.insert(f.name_string(), f.value());
  }
  for (const auto& [name, value] : extra) copy.set(name, value);
  if (!copy.count(bhttp::field::server)) copy.set(bhttp::field::server, server);
  for (const auto& [name, value] : always) copy.set(name, value);
  chunked = false;
  if (!copy.count(bhttp::field::content_length)) {
    if (version >= 11) {
      copy.set(bhttp::field::transfer_encoding, "chunked");
      chunked = true;
    } else {
      keep_alive = false;
    }
  }
  copy.erase(bhttp::field::connection);
  if (version >= 11 && !keep_alive) copy.set(bhttp::field::connection, "close");
  if (version < 11 && keep_alive) copy.set(bhttp::field::connection, "keep-alive");
  std::string out = version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(copy.result_int()) + " ";
  out += copy.reason().empty() ? std::string(bhttp::obsolete_reason(copy.result())) : std::string(copy.reason());
  out += "\r\n";
  for (const auto& f : copy) out += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
  return out + "\r\n";
}

TEST(AppendResponseHeadTest, WritesWhatBeastsEditsOfACopyWould) {
  const std::vector<std::pair<std::string, std::string>> field_sets[] = {
      {},
      {{"Content-Type", "application/json"}, {"Content-Length", "11"}},
      {{"Server", "nginx"}, {"Date", "today"}, {"Content-Type", "text/event-stream"}},
      {{"Connection", "keep-alive, X-Secret"}, {"X-Secret", "1"}, {"Keep-Alive", "timeout=5"},
       {"Transfer-Encoding", "chunked"}, {"Set-Cookie", "a=1"}, {"set-cookie", "b=2"}},
      {{"x-request-id", "upstream"}, {"X-Prefix-Router-Rank", "9"}, {"content-length", "0"}, {"TE", "trailers"}},
  };
  const std::vector<std::pair<std::string_view, std::string_view>> extras[] = {
      {},
      {{"x-prefix-router-instance", "a"}, {"x-prefix-router-decision", "affinity"}, {"x-prefix-router-rank", "0"}},
  };
  const std::vector<std::pair<std::string, std::string>> always_sets[] = {
      {},
      {{"x-request-id", "r1"}},
      {{"X-Request-Id", "r1"}, {"x-trace", "t"}, {"x-request-id", "r2"}},
  };
  int cases = 0;
  for (const auto& fields : field_sets) {
    for (const std::string_view reason : {"", "Fine"}) {
      bhttp::response_header<> head;
      head.result(fields.empty() ? 204 : 200);
      head.reason(reason);
      for (const auto& [name, value] : fields) head.insert(name, value);
      for (Exchange::SkipField skip : {static_cast<Exchange::SkipField>(nullptr), &HopByHopOrNamed}) {
        for (const auto& extra : extras) {
          for (const auto& always : always_sets) {
            for (const unsigned version : {10u, 11u}) {
              for (const bool keep : {false, true}) {
                bool ref_keep = keep, ref_chunked = false, got_keep = keep;
                const std::string want = Reference(head, skip, extra, "prefix-router", always, version, ref_keep,
                                                   ref_chunked);
                std::string got = "left alone:";
                const bool chunked = AppendResponseHead(got, head, skip, extra, "prefix-router", always, version,
                                                        got_keep);
                ASSERT_EQ(got, "left alone:" + want) << "case " << cases;
                EXPECT_EQ(chunked, ref_chunked) << "case " << cases;
                EXPECT_EQ(got_keep, ref_keep) << "case " << cases;
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 5 * 2 * 2 * 2 * 3 * 2 * 2);
}

}  // namespace
}  // namespace prefix_router::http
