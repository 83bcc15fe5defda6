// Discovery: what the gateway learns about its fleet at run time instead of from the
// configuration (docs/discovery.md).
//
// Served names: an instance with discover_models answers GET /v1/models (the OpenAI list shape;
// vLLM lists every base model and every LoRA adapter loaded at run time as one entry each, an
// adapter with `parent` naming its base model), and the ids become the names it serves.
// ParseModelList turns such a body into names, validated like configured ones and bounded, and
// keeps each entry as the engine sent it (the gateway's own /v1/models merges them).
//
// Instances by DNS: an instance with `resolve: all` stands for one instance per address its url's
// host name resolves to. The names come from a Resolver: the system's (getaddrinfo, run by
// asio on its private resolver thread, so an I/O thread never blocks), a hosts(5) file, or a
// test's FixedResolver whose answers the test changes.
//
// The Gateway drives both from one loop on its first I/O thread and applies what changed
// through its run-time change mechanism (gateway.h, operations.cc).
//
// Thread-safety: ParseModelList and AddressesInHosts are pure. A Resolver is called from one
// I/O thread at a time; FixedResolver may be changed from any thread.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gateway/config.h"
#include "http/server.h"

namespace prefix_router::gateway {

// At most this many addresses are taken from one resolution (the rest are ignored, and logged).
inline constexpr size_t kMaxResolvedAddresses = 256;
// A /v1/models answer larger than this is a failed poll.
inline constexpr size_t kMaxModelListBytes = 4u << 20;

// One address of a resolved name, with the port to use there.
struct ResolvedAddress {
  std::string address;  // IPv4 dotted quad or IPv6 (no brackets)
  uint16_t port = 0;
  auto operator<=>(const ResolvedAddress&) const = default;
};

// "10.0.0.5:8000", "[fd00::5]:8000".
std::string FormatAddress(const ResolvedAddress& a);

class Resolver {
 public:
  virtual ~Resolver() = default;
  // The addresses `host` stands for, each with `port` (a test resolver may answer other ports,
  // to put several instances on one loopback address). Runs on an I/O thread: must not block
  // it. An empty list is an answer, not an error; the caller decides what it means.
  virtual http::net::awaitable<Result<std::vector<ResolvedAddress>>> Resolve(std::string host, uint16_t port) = 0;
};

// getaddrinfo through asio's asynchronous resolver (IPv4 and IPv6).
std::shared_ptr<Resolver> MakeSystemResolver();
// Reads `path` (hosts(5): "ADDRESS NAME [ALIASES...]", '#' comments) at every resolution, so
// that edits to the file apply at the next one.
std::shared_ptr<Resolver> MakeHostsFileResolver(std::string path);

// The addresses of `host` in hosts(5) text, in file order, without duplicates. Names compare
// case-insensitively; lines whose address is neither IPv4 nor IPv6 are skipped.
std::vector<std::string> AddressesInHosts(std::string_view text, std::string_view host);

// A resolver whose answers a test sets: per host, a list of addresses (with their own ports) or
// an error. An unknown host is an error (NotFound).
class FixedResolver final : public Resolver {
 public:
  void Set(const std::string& host, std::vector<ResolvedAddress> addresses);
  void Fail(const std::string& host, std::string message);
  int calls() const;
  http::net::awaitable<Result<std::vector<ResolvedAddress>>> Resolve(std::string host, uint16_t port) override;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Result<std::vector<ResolvedAddress>>> answers_;
  int calls_ = 0;
};

// A parsed /v1/models answer.
struct ModelList {
  std::vector<std::string> names;  // sorted, unique, each valid (CheckServedName)
  // One per name (the first entry with that id in the answer); never null.
  std::shared_ptr<const ModelEntries> entries = std::make_shared<const ModelEntries>();
  size_t invalid = 0;      // ids left out: not a string, or not a valid served name
  bool truncated = false;  // more than kMaxServedNames valid ids; the first ones kept
};

// `{"object":"list","data":[{"id":...},...]}` -> the ids and their entries. An error says what
// is wrong with the body (InvalidArgument: not JSON, no `data` list): the instance answered,
// but not with the list.
Result<ModelList> ParseModelList(std::string_view body);

}  // namespace prefix_router::gateway
