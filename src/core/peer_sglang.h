// Our re-implementation of SGLang's published cache-aware routing policy (sgl-router), for
// side-by-side comparison in the simulator (issue 7). Not SGLang's code: a re-implementation from
// the notes in docs/research/peers.md section 1, which paraphrase
//   sgl-project/sglang sgl-router/src/policies/cache_aware.rs @ 026f853b (classic decision rule),
//   sgl-router/src/policies/tree.rs @ 4d40eec0 (approximate radix tree),
//   sgl-model-gateway/src/policies/cache_aware.rs @ 053b63ff (the min-load miss rule, PR #14650),
//   and the defaults of the Python RouterArgs / launch_router CLI (2025).
//
// SglangRadixTree: SGLang's "approximate" radix tree over the characters (Unicode scalar values)
// of request texts. Each node holds an edge, children keyed by the first character of their
// edge, and for every tenant (instance) that was sent text through the node, the time it last
// did. Per tenant the tree counts the characters of the nodes listing it (its "tree size").
// Times are arguments (the policy passes a logical clock: one tick per request), never read here.
//
// Tie-breaks. SGLang takes the tenant of a matched node and the smallest tenant as the first key
// a hash map yields: an arbitrary order, fixed per map and different between maps (every Rust
// DashMap is seeded on its own). We keep that shape deterministically: each map orders its
// tenants by a 64-bit mix of the tenant and a salt of the map (a node's creation number; the
// tree-wide counts have the tree's own), the smallest first.
//
// Text is UTF-8. SGLang only ever sees valid UTF-8 (Rust strings); the policy replaces every
// byte that is not part of a valid sequence with U+FFFD before the tree sees it (SanitiseUtf8).
//
// Thread-safety: SglangRadixTree is not thread-safe; SglangCacheAwarePolicy guards its trees with
// a mutex (its Pick inserts, as SGLang's select_worker does).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/policy.h"

namespace prefix_router {

// `text` if it is valid UTF-8; otherwise a copy in `*buffer` with every byte that does not
// belong to a valid sequence replaced by U+FFFD, and a view of that copy.
std::string_view SanitiseUtf8(std::string_view text, std::string* buffer);

class SglangRadixTree {
 public:
  using Tenant = uint64_t;  // an instance's placement seed

  SglangRadixTree();
  ~SglangRadixTree();
  SglangRadixTree(const SglangRadixTree&) = delete;
  SglangRadixTree& operator=(const SglangRadixTree&) = delete;

  struct Match {
    size_t chars = 0;              // matched characters (a partly matched edge counts its shared part)
    size_t bytes = 0;              // the same in bytes
    std::optional<Tenant> tenant;  // a tenant of the node the walk ended in; none = "empty"
  };

  // REQUIRES: text is valid UTF-8 (all of these).
  // Adds `text` for `tenant`; the empty text registers the tenant with size 0.
  void Insert(std::string_view text, Tenant tenant, uint64_t now);
  // The longest prefix of `text` in the tree and one tenant of the node it ends in; that tenant's
  // times on the node and its ancestors are set to `now` (SGLang touches even if unused).
  Match PrefixMatch(std::string_view text, uint64_t now);
  // The tenant with the fewest characters (ties in the tree-wide map's order); none if no tenant.
  std::optional<Tenant> SmallestTenant() const;
  // Strips `tenant` from every node, drops nodes left empty, forgets its count.
  void RemoveTenant(Tenant tenant);
  // SGLang's evict_tenant_by_size: while a tenant holds more than `max_chars` characters, removes
  // it from its least recently used leaf (a node no child of which lists it), oldest first over
  // all tenants. Returns the number of (node, tenant) entries removed.
  uint64_t EvictBySize(uint64_t max_chars);

  uint64_t TenantChars(Tenant tenant) const;  // 0 for an unknown tenant
  bool HasTenant(Tenant tenant) const { return chars_.count(tenant) != 0; }
  std::vector<Tenant> Tenants() const;  // in no particular order
  size_t node_count() const { return nodes_; }

 private:
  struct Node;
  Node* NewNode(std::string edge, Node* parent);
  void Touch(Node* n, Tenant t, uint64_t now, bool count_if_new);
  void Unlink(Node* n);

  std::unique_ptr<Node> root_;
  std::unordered_map<Tenant, uint64_t> chars_;  // tenant_char_count
  uint64_t next_node_id_ = 0;
  uint64_t salt_;
  size_t nodes_ = 0;
};

// What SGLang does on a cache miss (match rate at or below cache_threshold).
enum class SglangMissRule {
  kSmallestTree,  // classic (up to Dec 2025): the tenant with the smallest tree
  kMinLoad,       // PR #14650 (merged 2025-12-08): the least loaded healthy worker
};

// Defaults: the Python RouterArgs / CLI column of peers.md section 1 (what launch_router uses).
struct SglangCacheAwareOptions {
  double cache_threshold = 0.3;
  uint32_t balance_abs_threshold = 64;
  float balance_rel_threshold = 1.5f;
  // SGLang evicts every eviction_interval_secs (120) on a background thread. The core has no
  // clock, so eviction runs every `eviction_interval_requests` picks instead (0 = never): 2400
  // is 120 s at the 20 requests/s `simulate` offers `long-context` at 70% load on 7 instances
  // (18,097 requests in its 900 measured seconds); about 96 s at `agentic`'s 25 requests/s.
  uint32_t eviction_interval_requests = 2400;
  uint64_t max_tree_size = uint64_t{1} << 26;  // characters per tenant
  SglangMissRule miss = SglangMissRule::kSmallestTree;
  // The classic code divides character counts; the sgl-model-gateway snapshot with the min-load
  // rule (@ 053b63ff) divides byte lengths (the same for ASCII text).
  bool match_rate_in_bytes = false;
};

// SGLang's select_worker over the gateway's in-flight counts (InstanceState::in_flight is SGLang's
// load()). Per served name one tree ("" and "unknown" share "default", as SGLang's model ids do).
// Healthy = routable and not excluded by a retry; the imbalance test, like SGLang's, takes its
// loads over every instance that serves the name, healthy or not.
//   imbalanced (max - min > abs and max > min x rel): the least loaded healthy instance (lowest
//     index on ties), text inserted for it. Kind: overflow.
//   else match rate = matched characters / text characters (0 for an empty text):
//     above cache_threshold: the matched node's tenant (affinity);
//     otherwise the smallest tree (classic) or the least loaded healthy instance (min-load)
//     (least-outstanding).
//   The chosen instance gets the text inserted; if it is not a healthy candidate the first
//   healthy candidate takes the request without an insert (overflow), and a tenant no longer in
//   the fleet is removed from the tree.
// Instances new to a tree are registered with the empty text (SGLang's add_worker).
class SglangCacheAwarePolicy final : public Policy {
 public:
  explicit SglangCacheAwarePolicy(SglangCacheAwareOptions options, std::string name);
  Result<Decision> Pick(const RouteRequest& request, const FleetSnapshot& fleet, Rng& rng) const override;
  std::string_view name() const override { return name_; }

  // For tests and figures: the characters `tenant` holds in the tree of `served_name`.
  uint64_t TenantChars(std::string_view served_name, uint64_t tenant) const;
  uint64_t evictions() const;

 private:
  const SglangCacheAwareOptions options_;
  const std::string name_;
  mutable std::mutex mu_;  // guards everything below
  mutable std::map<std::string, SglangRadixTree, std::less<>> trees_;
  mutable uint64_t clock_ = 0;      // logical time: one tick per pick
  mutable uint64_t evictions_ = 0;  // (node, tenant) entries evicted
};

}  // namespace prefix_router
