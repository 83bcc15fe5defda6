#include "core/peer_sglang.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>

#include "base/utf8.h"
#include "core/rng.h"

namespace prefix_router {
namespace {

// The position in a hash map's iteration order we give `tenant` in the map salted `salt`.
uint64_t MapOrder(uint64_t salt, uint64_t tenant) { return Mix64(salt ^ Mix64(tenant)); }

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Characters in valid UTF-8: the bytes that start one.
size_t CountChars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += !IsContinuation(c);
  return n;
}

// The first character of valid UTF-8 `s` (non-empty) as a code point.
uint32_t FirstCodePoint(std::string_view s) {
  const auto b = [&](size_t i) { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  const uint32_t c = b(0);
  if (c < 0x80) return c;
  if (c < 0xE0) return ((c & 0x1F) << 6) | (b(1) & 0x3F);
  if (c < 0xF0) return ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// Bytes `a` and `b` share from the start, cut back to a character boundary (in valid UTF-8 a
// boundary of one is a boundary of the other where their bytes agree up to it).
size_t SharedChars(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  if (i < a.size() && i < b.size()) {
    while (i > 0 && IsContinuation(static_cast<unsigned char>(a[i]))) --i;
  }
  return i;
}

}  // namespace

std::string_view SanitiseUtf8(std::string_view text, std::string* buffer) {
  if (base::IsValidUtf8(text)) return text;
  buffer->clear();
  base::AppendValidUtf8(*buffer, text);
  return *buffer;
}

struct SglangRadixTree::Node {
  std::string edge;
  uint64_t chars = 0;
  Node* parent = nullptr;
  uint64_t id = 0;                                               // creation number: the salt of this node's tenant map
  std::unordered_map<uint32_t, std::unique_ptr<Node>> children;  // by first code point
  std::vector<std::pair<Tenant, uint64_t>> tenants;              // tenant -> last access time

  std::pair<Tenant, uint64_t>* Find(Tenant t) {
    for (auto& e : tenants) {
      if (e.first == t) return &e;
    }
    return nullptr;
  }
  bool ChildHas(Tenant t) const {
    for (const auto& [cp, child] : children) {
      for (const auto& e : child->tenants) {
        if (e.first == t) return true;
      }
    }
    return false;
  }
};

SglangRadixTree::SglangRadixTree() : salt_(Mix64(0x5617A45)) {
  root_ = std::make_unique<Node>();
  root_->id = next_node_id_++;
  nodes_ = 1;
}

SglangRadixTree::~SglangRadixTree() {
  // Iterative teardown: a long chain of single-child nodes must not recurse per node.
  std::vector<std::unique_ptr<Node>> pending;
  pending.push_back(std::move(root_));
  while (!pending.empty()) {
    std::unique_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    for (auto& [cp, child] : n->children) pending.push_back(std::move(child));
  }
}

SglangRadixTree::Node* SglangRadixTree::NewNode(std::string edge, Node* parent) {
  auto node = std::make_unique<Node>();
  node->chars = CountChars(edge);
  node->edge = std::move(edge);
  node->parent = parent;
  node->id = next_node_id_++;
  Node* raw = node.get();
  parent->children[FirstCodePoint(raw->edge)] = std::move(node);
  ++nodes_;
  return raw;
}

void SglangRadixTree::Touch(Node* n, Tenant t, uint64_t now, bool count_if_new) {
  if (auto* e = n->Find(t)) {
    e->second = now;
    return;
  }
  n->tenants.emplace_back(t, now);
  if (count_if_new) chars_[t] += n->chars;
}

void SglangRadixTree::Insert(std::string_view text, Tenant tenant, uint64_t now) {
  chars_.try_emplace(tenant, 0);
  Node* cur = root_.get();
  Touch(cur, tenant, now, true);
  while (!text.empty()) {
    auto it = cur->children.find(FirstCodePoint(text));
    if (it == cur->children.end()) {
      Node* leaf = NewNode(std::string(text), cur);
      Touch(leaf, tenant, now, true);
      return;
    }
    Node* child = it->second.get();
    const size_t shared = SharedChars(child->edge, text);
    if (shared < child->edge.size()) {
      // Split: the upper part keeps the child's tenants (so their counts stand), the lower part
      // is the old node with the rest of its edge.
      std::unique_ptr<Node> lower = std::move(it->second);
      cur->children.erase(it);
      Node* upper = NewNode(lower->edge.substr(0, shared), cur);
      upper->tenants = lower->tenants;
      lower->edge.erase(0, shared);
      lower->chars -= upper->chars;
      lower->parent = upper;
      const uint32_t key = FirstCodePoint(lower->edge);
      upper->children[key] = std::move(lower);
      child = upper;
    }
    Touch(child, tenant, now, true);
    cur = child;
    text.remove_prefix(shared);
  }
}

SglangRadixTree::Match SglangRadixTree::PrefixMatch(std::string_view text, uint64_t now) {
  Match m;
  Node* cur = root_.get();
  while (!text.empty()) {
    auto it = cur->children.find(FirstCodePoint(text));
    if (it == cur->children.end()) break;
    Node* child = it->second.get();
    const size_t shared = SharedChars(child->edge, text);
    m.bytes += shared;
    m.chars += CountChars(text.substr(0, shared));
    cur = child;
    if (shared < child->edge.size()) break;
    text.remove_prefix(shared);
  }
  const std::pair<Tenant, uint64_t>* first = nullptr;
  for (const auto& e : cur->tenants) {
    if (first == nullptr || MapOrder(cur->id, e.first) < MapOrder(cur->id, first->first)) first = &e;
  }
  if (first == nullptr) return m;
  m.tenant = first->first;
  for (Node* n = cur; n != nullptr; n = n->parent) {
    if (auto* e = n->Find(*m.tenant)) e->second = now;
  }
  return m;
}

std::optional<SglangRadixTree::Tenant> SglangRadixTree::SmallestTenant() const {
  std::optional<Tenant> best;
  uint64_t best_chars = 0;
  for (const auto& [t, c] : chars_) {
    if (!best || c < best_chars || (c == best_chars && MapOrder(salt_, t) < MapOrder(salt_, *best))) {
      best = t;
      best_chars = c;
    }
  }
  return best;
}

void SglangRadixTree::Unlink(Node* n) {
  Node* parent = n->parent;
  auto it = parent->children.find(FirstCodePoint(n->edge));
  if (it != parent->children.end() && it->second.get() == n) {
    parent->children.erase(it);  // n has no children: one node freed
    --nodes_;
  }
}

void SglangRadixTree::RemoveTenant(Tenant tenant) {
  // Post-order (leaves first), without recursion.
  std::vector<Node*> order;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (auto& [cp, child] : n->children) stack.push_back(child.get());
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    std::erase_if(n->tenants, [&](const auto& e) { return e.first == tenant; });
    if (n != root_.get() && n->tenants.empty() && n->children.empty()) Unlink(n);
  }
  chars_.erase(tenant);
}

uint64_t SglangRadixTree::EvictBySize(uint64_t max_chars) {
  bool over = false;
  for (const auto& [t, c] : chars_) over = over || c > max_chars;
  if (!over) return 0;
  // (time, node id, tenant, node): oldest first, then by creation and tenant (deterministic).
  using Entry = std::tuple<uint64_t, uint64_t, Tenant, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& [t, time] : n->tenants) {
      if (!n->ChildHas(t)) heap.emplace(time, n->id, t, n);
    }
    for (auto& [cp, child] : n->children) stack.push_back(child.get());
  }
  uint64_t removed = 0;
  while (!heap.empty()) {
    auto [time, id, t, n] = heap.top();
    heap.pop();
    auto count = chars_.find(t);
    if (count == chars_.end() || count->second <= max_chars) continue;
    // (an init-capture: clang 14 cannot capture a structured binding)
    std::erase_if(n->tenants, [&tenant = t](const auto& e) { return e.first == tenant; });
    count->second -= std::min(count->second, n->chars);
    ++removed;
    Node* parent = n->parent;
    if (n != root_.get() && n->tenants.empty() && n->children.empty()) Unlink(n);  // frees n
    if (parent != nullptr) {
      if (auto* e = parent->Find(t); e != nullptr && !parent->ChildHas(t)) {
        heap.emplace(e->second, parent->id, t, parent);
      }
    }
  }
  return removed;
}

uint64_t SglangRadixTree::TenantChars(Tenant tenant) const {
  auto it = chars_.find(tenant);
  return it == chars_.end() ? 0 : it->second;
}

std::vector<SglangRadixTree::Tenant> SglangRadixTree::Tenants() const {
  std::vector<Tenant> out;
  out.reserve(chars_.size());
  for (const auto& [t, c] : chars_) out.push_back(t);
  return out;
}

// --- the policy ---

SglangCacheAwarePolicy::SglangCacheAwarePolicy(SglangCacheAwareOptions options, std::string name)
    : options_(options), name_(std::move(name)) {}

Result<Decision> SglangCacheAwarePolicy::Pick(const RouteRequest& r, const FleetSnapshot& f, Rng&) const {
  const std::span<const uint32_t> workers = f.Eligible(r.served_name);
  const std::string what = r.served_name.empty() ? "the default pool" : "'" + std::string(r.served_name) + "'";
  if (workers.empty()) return Status::Unavailable("no instance serves " + what);
  const auto healthy = [&](uint32_t i) {
    return f.state(i).routable() && std::find(r.exclude.begin(), r.exclude.end(), i) == r.exclude.end();
  };
  const auto load = [&](uint32_t i) {
    return static_cast<uint64_t>(std::max(0, f.state(i).in_flight.load(std::memory_order_relaxed)));
  };
  std::optional<uint32_t> first_healthy, least_loaded;
  uint64_t max_load = 0, min_load = UINT64_MAX;
  for (uint32_t i : workers) {
    const uint64_t l = load(i);
    max_load = std::max(max_load, l);
    min_load = std::min(min_load, l);
    if (!healthy(i)) continue;
    if (!first_healthy) first_healthy = i;
    if (!least_loaded || l < load(*least_loaded)) least_loaded = i;
  }
  if (!first_healthy) return Status::Unavailable("no available instance left for " + what);

  std::string sanitised;
  const std::string_view text = SanitiseUtf8(r.text, &sanitised);
  std::lock_guard lock(mu_);
  const uint64_t now = ++clock_;
  std::string_view model = r.served_name;
  if (model.empty() || model == "unknown") model = "default";
  auto tree_it = trees_.find(model);
  if (tree_it == trees_.end()) tree_it = trees_.try_emplace(std::string(model)).first;
  SglangRadixTree& tree = tree_it->second;
  // Membership: new instances join with the empty text (add_worker); instances gone from the
  // fleet leave (remove_worker).
  for (uint32_t i : workers) {
    if (!tree.HasTenant(f.placement_seed(i))) tree.Insert("", f.placement_seed(i), now);
  }
  for (SglangRadixTree::Tenant t : tree.Tenants()) {
    bool present = false;
    for (uint32_t i = 0; i < f.size() && !present; ++i) present = f.placement_seed(i) == t;
    if (!present) tree.RemoveTenant(t);
  }
  if (options_.eviction_interval_requests > 0 && now % options_.eviction_interval_requests == 0) {
    for (auto& [name, t] : trees_) evictions_ += t.EvictBySize(options_.max_tree_size);
  }

  const bool imbalanced = max_load - min_load > options_.balance_abs_threshold &&
                          static_cast<float>(max_load) > static_cast<float>(min_load) * options_.balance_rel_threshold;
  if (imbalanced) {
    tree.Insert(text, f.placement_seed(*least_loaded), now);
    return Decision{*least_loaded, DecisionKind::kOverflow, 0};
  }
  const SglangRadixTree::Match m = tree.PrefixMatch(text, now);
  const size_t text_units = options_.match_rate_in_bytes ? text.size() : CountChars(text);
  const size_t matched = options_.match_rate_in_bytes ? m.bytes : m.chars;
  const double rate = text_units == 0 ? 0.0 : static_cast<double>(matched) / static_cast<double>(text_units);
  std::optional<SglangRadixTree::Tenant> chosen;
  DecisionKind kind = DecisionKind::kLeastOutstanding;
  if (rate > options_.cache_threshold) {
    chosen = m.tenant;
    kind = DecisionKind::kAffinity;
  } else if (options_.miss == SglangMissRule::kSmallestTree) {
    chosen = tree.SmallestTenant();
  } else {
    chosen = f.placement_seed(*least_loaded);
  }
  if (chosen) {
    bool in_fleet = false;
    for (uint32_t i : workers) {
      if (f.placement_seed(i) != *chosen) continue;
      in_fleet = true;
      if (healthy(i)) {
        tree.Insert(text, *chosen, now);
        return Decision{i, kind, 0};
      }
      break;
    }
    if (!in_fleet) tree.RemoveTenant(*chosen);
  }
  return Decision{*first_healthy, DecisionKind::kOverflow, 0};
}

uint64_t SglangCacheAwarePolicy::TenantChars(std::string_view served_name, uint64_t tenant) const {
  std::lock_guard lock(mu_);
  std::string_view model = served_name;
  if (model.empty() || model == "unknown") model = "default";
  auto it = trees_.find(model);
  return it == trees_.end() ? 0 : it->second.TenantChars(tenant);
}

uint64_t SglangCacheAwarePolicy::evictions() const {
  std::lock_guard lock(mu_);
  return evictions_;
}

}  // namespace prefix_router
