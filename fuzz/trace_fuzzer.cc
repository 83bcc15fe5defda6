// libFuzzer target: a JSONL trace (docs/trace-format.md) -> requests (workload::ParseTrace).
//
// The input is the trace text. Beyond "no crash, no sanitizer report", each input is checked
// against the format's contract:
//   - reading is deterministic;
//   - an accepted trace has what docs/trace-format.md promises: one request per request line,
//     max_tokens in range, arrival times on every line or none, finite, >= 0, non-decreasing,
//     routing groups usable on the request's API;
//   - a native `body` object is replayed byte for byte: its text (cut out of the line by a
//     hand-written scanner) is the same JSON value as the line's `body` member;
//   - every request renders (RenderBody) to a body that the router's own request parser
//     accepts, with the model and routing group the trace gave.
// A violation aborts with a message, which libFuzzer reports as a crash.
#include <boost/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "api/native_request.h"
#include "api/openai_request.h"
#include "workload/generators.h"
#include "workload/workload.h"

namespace {

using namespace prefix_router;
using namespace prefix_router::workload;
namespace json = boost::json;

[[noreturn]] void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "trace_fuzzer: invariant violated: %s\n%s\n", what, detail.c_str());
  std::abort();
}

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) Fail(#cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

std::string Dump(const Result<std::vector<TraceEntry>>& r) {
  if (!r.ok()) return r.status().ToString();
  std::string out;
  for (const TraceEntry& e : *r) {
    const Request& q = e.request;
    out += std::to_string(static_cast<int>(q.api)) + " '" + q.model + "' '" + q.prompt + "' '" + q.body + "' '" +
           q.routing_group + "' " + std::to_string(q.max_tokens) + " '" + q.label + "' " +
           (e.arrival_s ? std::to_string(*e.arrival_s) : "-");
    for (const Message& m : q.messages) out += " [" + m.role + ": " + m.content + "]";
    out += "\n";
  }
  return out;
}

// The request lines, split as ParseTrace splits them (blank and # lines skipped).
std::vector<std::string> RequestLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t start = line.find_first_not_of(" \t\r\n");
    if (start == std::string::npos || line[start] == '#') continue;
    lines.push_back(line);
  }
  return lines;
}

void CheckRendered(const Request& r, const std::string& where) {
  static api::OpenAiRequestParser parser;
  const std::string body = RenderBody(r, /*stream=*/false, "default-model");
  if (r.api == api::ApiKind::kNative) {
    if (!r.body.empty()) {
      CHECK(body == r.body, where);
      return;
    }
    boost::system::error_code ec;
    (void)json::parse(body, ec);
    CHECK(!ec, where + "\n" + body);
    if (!r.routing_group.empty()) {
      CHECK(api::ValidateRoutingGroupHeader(r.routing_group).ok(), where);
    }
    return;
  }
  auto parsed = parser.Parse(r.api, body, 1024);
  CHECK(parsed.ok(), parsed.status().ToString() + "\n" + where + "\n" + body);
  CHECK(parsed->served_name == (r.model.empty() ? "default-model" : r.model), where);
  CHECK(parsed->routing_group == r.routing_group, where);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::istringstream first_in(text);
  const Result<std::vector<TraceEntry>> first = ParseTrace(first_in, "fuzz.jsonl");
  std::istringstream again_in(text);
  const Result<std::vector<TraceEntry>> again = ParseTrace(again_in, "fuzz.jsonl");
  CHECK(Dump(first) == Dump(again), Dump(first) + "\nthen\n" + Dump(again));
  if (!first.ok()) {
    CHECK(first.status().code() == StatusCode::kInvalidArgument, first.status().ToString());
    return 0;
  }

  const std::vector<TraceEntry>& entries = *first;
  const std::vector<std::string> lines = RequestLines(text);
  CHECK(!entries.empty() && entries.size() == lines.size(), Dump(first));
  const bool timed = entries.front().arrival_s.has_value();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TraceEntry& e = entries[i];
    const Request& r = e.request;
    const std::string where = "request " + std::to_string(i) + ": " + lines[i];
    CHECK(r.max_tokens >= 1 && r.max_tokens <= 1'000'000, where);
    CHECK(e.arrival_s.has_value() == timed, where);
    if (e.arrival_s) {
      CHECK(std::isfinite(*e.arrival_s) && *e.arrival_s >= 0, where);
      if (i > 0) CHECK(*e.arrival_s >= *entries[i - 1].arrival_s, where);
    }
    switch (r.api) {
      case api::ApiKind::kChatCompletions:
        CHECK(!r.messages.empty() && r.prompt.empty() && r.body.empty(), where);
        for (const Message& m : r.messages) CHECK(!m.role.empty(), where);
        break;
      case api::ApiKind::kCompletions: CHECK(r.messages.empty() && r.body.empty(), where); break;
      case api::ApiKind::kNative: break;
      default:  // traces hold none of the other APIs
        CHECK(false, where);
    }
    if (r.api == api::ApiKind::kNative && !r.body.empty()) {
      // A body object is cut out of the line byte for byte: it must be the line's `body`.
      boost::system::error_code ec;
      const json::value line_value = json::parse(lines[i], ec);
      CHECK(!ec, where);
      const json::value& recorded = line_value.as_object().at("body");
      if (recorded.is_object()) {
        const json::value replayed = json::parse(r.body, ec);
        CHECK(!ec, where + "\nbody: " + r.body);
        CHECK(replayed == recorded, where + "\nbody: " + r.body);
      } else {
        CHECK(recorded.is_string() && recorded.as_string() == r.body, where);
      }
    }
    CheckRendered(r, where);
  }
  return 0;
}
