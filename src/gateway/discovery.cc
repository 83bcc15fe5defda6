#include "gateway/discovery.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api/error.h"
#include "base/json_text.h"
#include "gateway/config.h"

namespace prefix_router::gateway {
namespace {

namespace net = http::net;
using http::tcp;

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool IsAddress(std::string_view s) {
  boost::system::error_code ec;
  net::ip::make_address(std::string(s), ec);
  return !ec;
}

class SystemResolver final : public Resolver {
 public:
  net::awaitable<Result<std::vector<ResolvedAddress>>> Resolve(std::string host, uint16_t port) override {
    tcp::resolver resolver(co_await net::this_coro::executor);
    auto [ec, results] = co_await resolver.async_resolve(host, std::to_string(port), http::kTuple);
    if (ec) co_return Status::Unavailable("resolving '" + host + "' failed: " + ec.message());
    std::vector<ResolvedAddress> out;
    for (const auto& entry : results) {
      out.push_back({entry.endpoint().address().to_string(), entry.endpoint().port()});
    }
    co_return out;
  }
};

class HostsFileResolver final : public Resolver {
 public:
  explicit HostsFileResolver(std::string path) : path_(std::move(path)) {}

  net::awaitable<Result<std::vector<ResolvedAddress>>> Resolve(std::string host, uint16_t port) override {
    // A hosts file is small and local; reading it here is quicker than handing it to a thread.
    constexpr size_t kMaxHostsBytes = 1u << 20;
    std::FILE* f = std::fopen(path_.c_str(), "rb");
    if (f == nullptr) {
      co_return Status::Unavailable("hosts file '" + path_ + "': " + std::strerror(errno));
    }
    std::string text;
    char buf[8192];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < kMaxHostsBytes) text.append(buf, n);
    std::fclose(f);
    std::vector<ResolvedAddress> out;
    for (auto& a : AddressesInHosts(text, host)) out.push_back({std::move(a), port});
    co_return out;
  }

 private:
  std::string path_;
};

}  // namespace

std::string FormatAddress(const ResolvedAddress& a) {
  const bool ipv6 = a.address.find(':') != std::string::npos;
  return (ipv6 ? "[" + a.address + "]" : a.address) + ":" + std::to_string(a.port);
}

std::shared_ptr<Resolver> MakeSystemResolver() { return std::make_shared<SystemResolver>(); }

std::shared_ptr<Resolver> MakeHostsFileResolver(std::string path) {
  return std::make_shared<HostsFileResolver>(std::move(path));
}

std::vector<std::string> AddressesInHosts(std::string_view text, std::string_view host) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    line = line.substr(0, line.find('#'));
    std::vector<std::string_view> words;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      const size_t start = i;
      while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      if (i > start) words.push_back(line.substr(start, i - start));
    }
    if (words.size() < 2 || !IsAddress(words[0])) continue;
    const bool named =
        std::any_of(words.begin() + 1, words.end(), [host](std::string_view w) { return EqualsNoCase(w, host); });
    if (named && std::find(out.begin(), out.end(), words[0]) == out.end()) out.emplace_back(words[0]);
  }
  return out;
}

void FixedResolver::Set(const std::string& host, std::vector<ResolvedAddress> addresses) {
  std::lock_guard lock(mu_);
  answers_.insert_or_assign(host, Result<std::vector<ResolvedAddress>>(std::move(addresses)));
}

void FixedResolver::Fail(const std::string& host, std::string message) {
  std::lock_guard lock(mu_);
  answers_.insert_or_assign(host, Result<std::vector<ResolvedAddress>>(Status::Unavailable(std::move(message))));
}

int FixedResolver::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

net::awaitable<Result<std::vector<ResolvedAddress>>> FixedResolver::Resolve(std::string host, uint16_t) {
  std::lock_guard lock(mu_);
  ++calls_;
  auto it = answers_.find(host);
  if (it == answers_.end()) co_return Status::NotFound("no answer for '" + host + "'");
  co_return it->second;
}

Result<ModelList> ParseModelList(std::string_view body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body.data(), body.size()).get(doc)) {
    return Status::InvalidArgument("the /v1/models answer is not JSON");
  }
  simdjson::dom::array data;
  if (doc["data"].get(data)) {
    return Status::InvalidArgument("the /v1/models answer has no `data` list");
  }
  auto entries = std::make_shared<ModelEntries>();
  ModelList out;
  for (simdjson::dom::element entry : data) {
    std::string_view id;
    simdjson::dom::object fields;
    if (entry.get(fields) || fields["id"].get(id) || !CheckServedName(id).ok()) {
      ++out.invalid;
      continue;
    }
    if (entries->contains(id)) continue;
    if (entries->size() == kMaxServedNames) {
      out.truncated = true;
      continue;
    }
    // Rebuilt member by member (each value minified as sent) to leave out `instances`, which
    // the gateway's /v1/models sets itself: a duplicate key would be ambiguous to clients.
    std::string json = "{";
    for (auto field : fields) {
      if (field.key == "instances") continue;
      if (json.size() > 1) json += ',';
      json += '"';
      base::AppendJsonEscaped(json, field.key);
      json += "\":";
      json += simdjson::minify(field.value);
    }
    json += '}';
    entries->emplace(std::string(id), std::move(json));
  }
  for (const auto& [id, json] : *entries) out.names.push_back(id);
  out.entries = std::move(entries);
  return out;
}

}  // namespace prefix_router::gateway
