#include "core/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/fleet.h"
#include "core/placement.h"
#include "core/prefix_key.h"
#include "core/rng.h"
#include "testing/dispatch_counts.h"

namespace prefix_router {
namespace {

constexpr Strategy kAllStrategies[] = {Strategy::kRandom, Strategy::kLeastOutstanding, Strategy::kRoundRobin,
                                       Strategy::kPrefixAware};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

PrefixKey KeyAt(uint64_t i) { return PrefixKey{SplitMix64(i), SplitMix64(i + 1000000000)}; }

InstanceSpec Spec(std::string name, std::vector<std::string> serves = {}, uint32_t weight = 1) {
  InstanceSpec s;
  s.name = std::move(name);
  s.weight = weight;
  s.serves = std::move(serves);
  return s;
}

std::shared_ptr<const FleetSnapshot> MakeFleet(std::vector<InstanceSpec> specs) {
  auto r = FleetSnapshot::Create(std::move(specs));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

// n wildcard instances "instance-0".., weights as given (all 1 when empty).
std::shared_ptr<const FleetSnapshot> NamedFleet(uint32_t n, std::vector<uint32_t> weights = {}) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < n; ++i) {
    specs.push_back(Spec("instance-" + std::to_string(i), {}, weights.empty() ? 1 : weights[i]));
  }
  return MakeFleet(std::move(specs));
}

std::unique_ptr<Policy> MakeStrategy(Strategy s) {
  RoutingOptions o;
  o.strategy = s;
  return MakePolicy(o);
}

// balance_factor 0: the concurrency threshold alone decides when an instance is full (the
// policy before bounded loads, and the managed service's). Tests about the threshold use it.
constexpr double kThresholdOnly = 0;

std::unique_ptr<Policy> MakePrefixAware(uint32_t threshold, SpillMode spill,
                                        double balance_factor = kDefaultBalanceFactor) {
  RoutingOptions o;
  o.strategy = Strategy::kPrefixAware;
  o.concurrency_threshold = threshold;
  o.spill = spill;
  o.balance_factor = balance_factor;
  EXPECT_TRUE(o.Validate().ok());
  return MakePolicy(o);
}

RouteRequest Request(const PrefixKey& key, std::string_view served_name = "", std::span<const uint32_t> exclude = {}) {
  RouteRequest r;
  r.served_name = served_name;
  r.key = key;
  r.exclude = exclude;
  return r;
}

// The key's preference order over the instances eligible for `served_name`.
std::vector<uint32_t> PreferenceOrder(const FleetSnapshot& f, const PrefixKey& key, std::string_view served_name = "") {
  auto eligible = f.Eligible(served_name);
  std::vector<uint32_t> order(eligible.begin(), eligible.end());
  SortByPreference(key.placement_hash(), f, order);
  return order;
}

void SetLoad(const FleetSnapshot& f, uint32_t i, int32_t in_flight) { f.state(i).in_flight.store(in_flight); }

// Picks and expects success.
Decision MustPick(const Policy& p, const RouteRequest& r, const FleetSnapshot& f, Rng& rng) {
  Result<Decision> d = p.Pick(r, f, rng);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : Decision{UINT32_MAX, DecisionKind::kRandom, 0};
}

void ExpectInvalid(const RoutingOptions& o, std::string_view field, std::string_view range) {
  const Status s = o.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(range), std::string::npos) << s.message();
}

// ---------------------------------------------------------------------------------------------
// Options and names.

// prefix_length must lie in 1024..65536; the message names the field and the range.
TEST(PolicyTest, ValidatePrefixLengthRange) {
  RoutingOptions o;
  EXPECT_TRUE(o.Validate().ok());  // defaults are valid
  o.prefix_length = 1023;
  ExpectInvalid(o, "prefix_length", "1024..65536");
  o.prefix_length = 65537;
  ExpectInvalid(o, "prefix_length", "1024..65536");
  o.prefix_length = 0;
  ExpectInvalid(o, "prefix_length", "1024..65536");
  o.prefix_length = 1024;
  EXPECT_TRUE(o.Validate().ok());
  o.prefix_length = 65536;
  EXPECT_TRUE(o.Validate().ok());
}

// concurrency_threshold must lie in 1..1024; the message names the field and the range.
TEST(PolicyTest, ValidateConcurrencyThresholdRange) {
  RoutingOptions o;
  o.concurrency_threshold = 0;
  ExpectInvalid(o, "concurrency_threshold", "1..1024");
  o.concurrency_threshold = 1025;
  ExpectInvalid(o, "concurrency_threshold", "1..1024");
  o.concurrency_threshold = 1;
  EXPECT_TRUE(o.Validate().ok());
  o.concurrency_threshold = 1024;
  EXPECT_TRUE(o.Validate().ok());
}

// balance_factor is 0 (off) or 1..100; the message names the field and the range.
TEST(PolicyTest, ValidateBalanceFactorRange) {
  RoutingOptions o;
  EXPECT_EQ(o.balance_factor, kDefaultBalanceFactor);
  for (double bad :
       {0.5, 101.0, -1.0, 0.999, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    o.balance_factor = bad;
    ExpectInvalid(o, "balance_factor", "100");
  }
  for (double good : {0.0, 1.0, 1.5, 100.0}) {
    o.balance_factor = good;
    EXPECT_TRUE(o.Validate().ok()) << good;
  }
}

// ParseStrategy accepts exactly the documented names, round-trips with StrategyName, and
// MakePolicy builds the policy of that name.
TEST(PolicyTest, ParseStrategyAcceptsDocumentedNames) {
  const std::pair<std::string_view, Strategy> documented[] = {
      {"random", Strategy::kRandom},
      {"least-outstanding-requests", Strategy::kLeastOutstanding},
      {"round-robin", Strategy::kRoundRobin},
      {"prefix-aware", Strategy::kPrefixAware},
  };
  for (const auto& [name, strategy] : documented) {
    Result<Strategy> parsed = ParseStrategy(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, strategy);
    EXPECT_EQ(StrategyName(strategy), name);
    EXPECT_EQ(MakeStrategy(strategy)->name(), name);
  }
  for (std::string_view bad : {"", "Random", "least-outstanding", "prefix_aware", "roundrobin", "prefix-aware "}) {
    Result<Strategy> parsed = ParseStrategy(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("strategy"), std::string::npos);
  }
}

// The registry is the one list: every row parses to its strategy, names it, and builds a policy
// of that name (through MakePolicy and through its own factory); names and strategies are unique.
TEST(PolicyTest, RegistryRowsBuildTheirPolicies) {
  std::set<std::string_view> names;
  std::set<Strategy> strategies;
  ASSERT_FALSE(StrategyRegistry().empty());
  for (const StrategyInfo& e : StrategyRegistry()) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(names.insert(e.name).second);
    EXPECT_TRUE(strategies.insert(e.strategy).second);
    EXPECT_FALSE(e.description.empty());
    Result<Strategy> parsed = ParseStrategy(e.name);
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, e.strategy);
    EXPECT_EQ(StrategyName(e.strategy), e.name);
    RoutingOptions o;
    o.strategy = e.strategy;
    ASSERT_TRUE(o.Validate().ok());
    std::unique_ptr<Policy> p = MakePolicy(o);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->name(), e.name);
    EXPECT_EQ(e.make(o)->name(), e.name);
  }
  // StrategyNames lists exactly the registry's names, in its order.
  std::string joined;
  for (const StrategyInfo& e : StrategyRegistry()) joined += (joined.empty() ? "" : ",") + std::string(e.name);
  EXPECT_EQ(StrategyNames(","), joined);
}

// An unknown name is refused with a message that names the field and lists every registry name
// (the message the configuration reader shows for routing_strategy).
TEST(PolicyTest, UnknownStrategyListsTheRegistry) {
  Result<Strategy> parsed = ParseStrategy("fastest");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "strategy: 'fastest' is not one of " + StrategyNames(", "));
  for (const StrategyInfo& e : StrategyRegistry()) {
    EXPECT_NE(parsed.status().message().find(e.name), std::string::npos) << e.name;
  }
}

// ParseSpillMode accepts exactly "next-preferred" and "least-loaded".
TEST(PolicyTest, ParseSpillModeAcceptsDocumentedNames) {
  ASSERT_TRUE(ParseSpillMode("next-preferred").ok());
  EXPECT_EQ(*ParseSpillMode("next-preferred"), SpillMode::kNextPreferred);
  ASSERT_TRUE(ParseSpillMode("least-loaded").ok());
  EXPECT_EQ(*ParseSpillMode("least-loaded"), SpillMode::kLeastLoaded);
  EXPECT_EQ(SpillModeName(SpillMode::kNextPreferred), "next-preferred");
  EXPECT_EQ(SpillModeName(SpillMode::kLeastLoaded), "least-loaded");
  for (std::string_view bad : {"", "next_preferred", "Least-Loaded", "least-outstanding"}) {
    Result<SpillMode> parsed = ParseSpillMode(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

// The tokenizer source round-trips its two names, defaults to local and refuses others by name.
TEST(PolicyTest, ParseTokenizerSourceAcceptsDocumentedNames) {
  for (TokenizerSource t : {TokenizerSource::kLocal, TokenizerSource::kEngine}) {
    Result<TokenizerSource> parsed = ParseTokenizerSource(TokenizerSourceName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(TokenizerSourceName(TokenizerSource::kEngine), "engine");
  EXPECT_EQ(RoutingOptions{}.tokenizer, TokenizerSource::kLocal);
  for (std::string_view bad : {"", "vllm", "Engine", "emulator"}) {
    Result<TokenizerSource> parsed = ParseTokenizerSource(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("tokenizer: '"), std::string::npos);
    EXPECT_NE(parsed.status().message().find("local, engine"), std::string::npos);
  }
}

TEST(PolicyTest, ParseLoadMeasureAcceptsDocumentedNames) {
  ASSERT_TRUE(ParseLoadMeasure("requests").ok());
  EXPECT_EQ(*ParseLoadMeasure("requests"), LoadMeasure::kRequests);
  ASSERT_TRUE(ParseLoadMeasure("prompt-tokens").ok());
  EXPECT_EQ(*ParseLoadMeasure("prompt-tokens"), LoadMeasure::kPromptTokens);
  EXPECT_EQ(LoadMeasureName(LoadMeasure::kRequests), "requests");
  EXPECT_EQ(LoadMeasureName(LoadMeasure::kPromptTokens), "prompt-tokens");
  EXPECT_EQ(RoutingOptions{}.load_measure, LoadMeasure::kRequests);  // the default
  for (std::string_view bad : {"", "tokens", "prompt_tokens", "Requests"}) {
    Result<LoadMeasure> parsed = ParseLoadMeasure(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("load_measure"), std::string::npos);
    EXPECT_NE(parsed.status().message().find("requests, prompt-tokens"), std::string::npos);
  }
}

// Decision kinds have stable names (they appear in logs and metrics labels).
TEST(PolicyTest, DecisionKindNames) {
  EXPECT_EQ(DecisionKindName(DecisionKind::kAffinity), "affinity");
  EXPECT_EQ(DecisionKindName(DecisionKind::kOverflow), "overflow");
  EXPECT_EQ(DecisionKindName(DecisionKind::kSaturated), "saturated");
  EXPECT_EQ(DecisionKindName(DecisionKind::kRandom), "random");
  EXPECT_EQ(DecisionKindName(DecisionKind::kLeastOutstanding), "least-outstanding");
  EXPECT_EQ(DecisionKindName(DecisionKind::kRoundRobin), "round-robin");
}

// ---------------------------------------------------------------------------------------------
// Prefix-aware: affinity and spill. Tests where load decides use balance_factor 0, so that the
// concurrency threshold alone makes an instance full; bounded loads have their own section.

// Unloaded, the same key always goes to its most preferred instance (affinity, rank 0), in
// both spill modes and whatever the Rng state.
TEST(PolicyTest, PrefixAwareSameKeySameInstance) {
  auto f = NamedFleet(7);
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    auto p = MakePrefixAware(4, spill);
    Rng rng1(1), rng2(999);
    for (uint32_t k = 0; k < 1000; ++k) {
      const RouteRequest r = Request(KeyAt(k));
      const Decision first = MustPick(*p, r, *f, rng1);
      EXPECT_EQ(first.instance, PreferenceOrder(*f, KeyAt(k))[0]);
      EXPECT_EQ(first.kind, DecisionKind::kAffinity);
      EXPECT_EQ(first.rank, 0u);
      for (int again = 0; again < 3; ++again) {
        const Decision d = MustPick(*p, r, *f, again % 2 ? rng1 : rng2);
        ASSERT_EQ(d.instance, first.instance) << "key " << k;
        ASSERT_EQ(d.kind, DecisionKind::kAffinity);
      }
    }
  }
}

// Different keys spread over the instances (each of 7 gets roughly 1/7 of 7,000 keys).
TEST(PolicyTest, PrefixAwareDifferentKeysSpread) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(5);
  std::vector<int> counts(7, 0);
  for (uint32_t k = 0; k < 7000; ++k) ++counts[MustPick(*p, Request(KeyAt(k)), *f, rng).instance];
  for (int c : counts) {
    EXPECT_GT(c, 800);
    EXPECT_LT(c, 1200);
  }
}

// next-preferred: a full first choice sends the key to its second preference (overflow,
// rank 1), every time; with the second full too, to the third (rank 2). Below the threshold
// the first choice keeps it.
TEST(PolicyTest, PrefixAwareSpillNextPreferred) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(4, SpillMode::kNextPreferred, kThresholdOnly);
  Rng rng(11);
  const PrefixKey key = KeyAt(123);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  const RouteRequest r = Request(key);

  SetLoad(*f, order[0], 3);
  Decision d = MustPick(*p, r, *f, rng);
  EXPECT_EQ(d.instance, order[0]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);

  SetLoad(*f, order[0], 4);
  for (int i = 0; i < 20; ++i) {
    d = MustPick(*p, r, *f, rng);
    ASSERT_EQ(d.instance, order[1]);
    EXPECT_EQ(d.kind, DecisionKind::kOverflow);
    EXPECT_EQ(d.rank, 1u);
  }
  // The second home is not chosen by load: an idle instance further down does not win.
  SetLoad(*f, order[1], 3);
  EXPECT_EQ(MustPick(*p, r, *f, rng).instance, order[1]);

  SetLoad(*f, order[1], 4);
  d = MustPick(*p, r, *f, rng);
  EXPECT_EQ(d.instance, order[2]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  EXPECT_EQ(d.rank, 2u);

  // Load drains: the key returns home.
  SetLoad(*f, order[0], 0);
  d = MustPick(*p, r, *f, rng);
  EXPECT_EQ(d.instance, order[0]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  EXPECT_EQ(d.rank, 0u);
}

// Load counted by InFlightGuards drives the spill, and releasing them restores affinity.
TEST(PolicyTest, PrefixAwareSpillFollowsInFlightGuards) {
  auto f = NamedFleet(5);
  auto p = MakePrefixAware(2, SpillMode::kNextPreferred, kThresholdOnly);
  Rng rng(2);
  const PrefixKey key = KeyAt(77);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  std::vector<InFlightGuard> guards;
  for (int i = 0; i < 2; ++i) {
    const Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]);
    guards.emplace_back(f->shared_state(d.instance));
  }
  EXPECT_EQ(MustPick(*p, Request(key), *f, rng).instance, order[1]);
  guards.pop_back();
  EXPECT_EQ(MustPick(*p, Request(key), *f, rng).instance, order[0]);
}

// least-loaded: a full first choice sends the request to the least loaded instance below the
// threshold (overflow), with rank = its position in the key's preference order.
TEST(PolicyTest, PrefixAwareSpillLeastLoaded) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(8, SpillMode::kLeastLoaded, kThresholdOnly);
  Rng rng(3);
  const PrefixKey key = KeyAt(4242);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  const int32_t loads[7] = {8, 5, 6, 2, 7, 3, 4};  // by rank; rank 3 is the unique minimum
  for (uint32_t rank = 0; rank < 7; ++rank) SetLoad(*f, order[rank], loads[rank]);
  const Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[3]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  EXPECT_EQ(d.rank, 3u);
}

// least-loaded: among equally loaded instances the better-ranked one wins.
TEST(PolicyTest, PrefixAwareSpillLeastLoadedTieGoesToBetterRank) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(8, SpillMode::kLeastLoaded, kThresholdOnly);
  Rng rng(3);
  const PrefixKey key = KeyAt(99);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  for (uint32_t rank = 0; rank < 7; ++rank) SetLoad(*f, order[rank], 3);
  SetLoad(*f, order[0], 8);
  Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[1]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  EXPECT_EQ(d.rank, 1u);

  for (uint32_t rank = 1; rank < 7; ++rank) SetLoad(*f, order[rank], 5);
  SetLoad(*f, order[5], 1);
  SetLoad(*f, order[2], 1);
  d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[2]);
  EXPECT_EQ(d.rank, 2u);
}

// Saturation: when every candidate is at the threshold, the least loaded one takes the
// request (kind saturated), ties to the better rank, in both spill modes.
TEST(PolicyTest, PrefixAwareSaturatedPicksLeastLoaded) {
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    auto f = NamedFleet(5);
    auto p = MakePrefixAware(4, spill, kThresholdOnly);
    Rng rng(4);
    const PrefixKey key = KeyAt(31337);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    const int32_t loads[5] = {6, 9, 5, 4, 7};  // rank 3 is the unique minimum
    for (uint32_t rank = 0; rank < 5; ++rank) SetLoad(*f, order[rank], loads[rank]);
    Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[3]) << SpillModeName(spill);
    EXPECT_EQ(d.kind, DecisionKind::kSaturated);
    EXPECT_EQ(d.rank, 3u);

    for (uint32_t rank = 0; rank < 5; ++rank) SetLoad(*f, order[rank], 4);
    d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]) << SpillModeName(spill);
    EXPECT_EQ(d.kind, DecisionKind::kSaturated);
    EXPECT_EQ(d.rank, 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// Prefix-aware: bounded loads (balance_factor) and sticky moves.

// The cap the header documents, computed here independently of the policy (in the same
// floating-point order): min(threshold, max(4, ceil(F x (in-flight over the candidates + 1) x
// weight / total weight))). Every instance of `f` is a candidate.
int32_t BalanceCap(const FleetSnapshot& f, uint32_t i, double factor, uint32_t threshold) {
  int64_t load = 0, weight = 0;
  for (uint32_t j = 0; j < f.size(); ++j) {
    load += std::max<int32_t>(0, f.state(j).in_flight.load());
    weight += f.spec(j).weight;
  }
  const double per_weight = factor * static_cast<double>(load + 1) / static_cast<double>(weight);
  const auto cap = static_cast<int32_t>(std::ceil(per_weight * f.spec(i).weight));
  return std::min<int32_t>(static_cast<int32_t>(threshold), std::max<int32_t>(4, cap));
}

// What balance_factor 0 must do: the first preferred instance below the threshold; else the
// next preferred one below it (next-preferred) or the least loaded one, ties to the better rank
// (least-loaded); else the least loaded one, saturated. No memory of earlier requests.
Decision ThresholdOnlyPick(const FleetSnapshot& f, const std::vector<uint32_t>& order, int32_t threshold,
                           SpillMode spill) {
  const auto load = [&](uint32_t rank) { return f.state(order[rank]).in_flight.load(); };
  if (load(0) < threshold) return Decision{order[0], DecisionKind::kAffinity, 0};
  if (spill == SpillMode::kNextPreferred) {
    for (uint32_t rank = 1; rank < order.size(); ++rank) {
      if (load(rank) < threshold) return Decision{order[rank], DecisionKind::kOverflow, rank};
    }
  }
  uint32_t best = 0;
  for (uint32_t rank = 1; rank < order.size(); ++rank) {
    if (load(rank) < load(best)) best = rank;
  }
  return Decision{order[best], load(best) < threshold ? DecisionKind::kOverflow : DecisionKind::kSaturated, best};
}

void SetLoadsByRank(const FleetSnapshot& f, const std::vector<uint32_t>& order, std::initializer_list<int32_t> loads) {
  uint32_t rank = 0;
  for (int32_t load : loads) SetLoad(f, order[rank++], load);
}

// balance_factor 0 is the threshold-only policy: over 20,000 random load patterns (repeating
// keys, so that a memory of earlier moves would show), every decision is ThresholdOnlyPick's.
TEST(PolicyTest, PrefixAwareBalanceFactorZeroIsThresholdOnly) {
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    SCOPED_TRACE(SpillModeName(spill));
    auto f = NamedFleet(7);
    auto p = MakePrefixAware(4, spill, kThresholdOnly);
    Rng rng(12), loads(13);
    std::set<DecisionKind> kinds;
    for (uint32_t n = 0; n < 20000; ++n) {
      for (uint32_t i = 0; i < 7; ++i) SetLoad(*f, i, static_cast<int32_t>(loads.Uniform(7)));
      const PrefixKey key = KeyAt(n % 50);
      const Decision expected = ThresholdOnlyPick(*f, PreferenceOrder(*f, key), 4, spill);
      const Decision d = MustPick(*p, Request(key), *f, rng);
      ASSERT_EQ(d.instance, expected.instance) << "pick " << n;
      ASSERT_EQ(d.kind, expected.kind) << "pick " << n;
      ASSERT_EQ(d.rank, expected.rank) << "pick " << n;
      kinds.insert(d.kind);
    }
    EXPECT_EQ(kinds.size(), 3u);  // affinity, overflow and saturated all occurred
  }
  // Far below the threshold nothing is full, however uneven the load (F = 1.5 would cap at 4).
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred, kThresholdOnly);
  Rng rng(14);
  const PrefixKey key = KeyAt(123);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  SetLoadsByRank(*f, order, {40, 0, 0, 0, 0, 0, 0});
  const Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[0]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
}

// The cap's floor is 4: with 3 in flight on the first choice and none elsewhere (F x share
// would give 1) the key stays (affinity); at 4 the first choice is full and the key spills.
TEST(PolicyTest, PrefixAwareBalanceCapIsNeverBelowFour) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);  // the default factor, 1.5
  Rng rng(15);
  const PrefixKey key = KeyAt(123);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  for (int32_t load : {0, 1, 2, 3}) {
    SetLoad(*f, order[0], load);
    const Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]) << load;
    EXPECT_EQ(d.kind, DecisionKind::kAffinity) << load;
    EXPECT_EQ(d.rank, 0u) << load;
  }
  SetLoad(*f, order[0], 4);
  const Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[1]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);

  // The threshold still bounds the cap from above: a threshold of 2 makes 2 in flight full.
  auto low = MakePrefixAware(2, SpillMode::kNextPreferred);
  const PrefixKey other = KeyAt(456);
  const std::vector<uint32_t> other_order = PreferenceOrder(*f, other);
  SetLoadsByRank(*f, other_order, {2, 0, 0, 0, 0, 0, 0});
  const Decision spilled = MustPick(*low, Request(other), *f, rng);
  EXPECT_EQ(spilled.instance, other_order[1]);
  EXPECT_EQ(spilled.kind, DecisionKind::kOverflow);
}

// Loads by rank {4, 2, 1, 0, 0, 0, 0} on 7 instances: 7 in flight, so the cap is its floor, 4,
// and the first choice is full far below the threshold (64). The key spills: rank 1 with
// next-preferred, rank 3 (the best-ranked idle instance) with least-loaded. Returns the pick.
Decision SpillFromFullFirstChoice(const Policy& p, const FleetSnapshot& f, const std::vector<uint32_t>& order,
                                  SpillMode spill, Rng& rng, const PrefixKey& key) {
  SetLoadsByRank(f, order, {4, 2, 1, 0, 0, 0, 0});
  EXPECT_EQ(BalanceCap(f, order[0], kDefaultBalanceFactor, 64), 4);
  const Decision d = MustPick(p, Request(key), f, rng);
  const uint32_t rank = spill == SpillMode::kNextPreferred ? 1 : 3;
  EXPECT_EQ(d.instance, order[rank]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  EXPECT_EQ(d.rank, rank);
  return d;
}

// F = 1.5: an instance whose in-flight count reaches its cap (here the floor, 4) is full; the
// key goes to the next preferred instance or the least loaded one, as an overflow. With F = 0
// the same loads keep it home.
TEST(PolicyTest, PrefixAwareBalanceCapSpillsLikeTheThreshold) {
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    SCOPED_TRACE(SpillModeName(spill));
    auto f = NamedFleet(7);
    auto p = MakePrefixAware(64, spill, 1.5);
    Rng rng(16);
    const PrefixKey key = KeyAt(123);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    SpillFromFullFirstChoice(*p, *f, order, spill, rng, key);

    auto off = MakePrefixAware(64, spill, kThresholdOnly);
    const Decision d = MustPick(*off, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]);
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  }
}

// Moves are sticky: once the key spilled, its later requests go to its new home (affinity, the
// new home's rank) even with the first choice idle again, and even when the new home is not the
// least loaded instance, as long as it has room.
TEST(PolicyTest, PrefixAwareBalancedMoveIsSticky) {
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    SCOPED_TRACE(SpillModeName(spill));
    auto f = NamedFleet(7);
    auto p = MakePrefixAware(64, spill);
    Rng rng(17);
    const PrefixKey key = KeyAt(123);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    const Decision moved = SpillFromFullFirstChoice(*p, *f, order, spill, rng, key);

    SetLoadsByRank(*f, order, {0, 0, 0, 0, 0, 0, 0});
    SetLoad(*f, moved.instance, 3);  // busiest instance, still below its cap of 4
    for (int n = 0; n < 5; ++n) {
      const Decision d = MustPick(*p, Request(key), *f, rng);
      ASSERT_EQ(d.instance, moved.instance) << n;
      EXPECT_EQ(d.kind, DecisionKind::kAffinity);
      EXPECT_EQ(d.rank, moved.rank);
    }
    // Another key with the same first choice is not affected.
    for (uint32_t k = 0;; ++k) {
      const PrefixKey other = KeyAt(1000 + k);
      if (PreferenceOrder(*f, other)[0] != order[0]) continue;
      const Decision d = MustPick(*p, Request(other), *f, rng);
      EXPECT_EQ(d.instance, order[0]);
      EXPECT_EQ(d.rank, 0u);
      break;
    }
  }
}

// When the new home is full in turn and the first choice has room, the key returns to its first
// choice (affinity, rank 0) and stays there once the new home has room again.
TEST(PolicyTest, PrefixAwareBalancedKeyReturnsToFirstChoice) {
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    SCOPED_TRACE(SpillModeName(spill));
    auto f = NamedFleet(7);
    auto p = MakePrefixAware(64, spill);
    Rng rng(18);
    const PrefixKey key = KeyAt(123);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    const Decision moved = SpillFromFullFirstChoice(*p, *f, order, spill, rng, key);

    SetLoadsByRank(*f, order, {0, 0, 0, 0, 0, 0, 0});
    SetLoad(*f, moved.instance, 4);  // 4 in flight in all: the cap is 4, the new home is full
    Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]);
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);
    EXPECT_EQ(d.rank, 0u);

    SetLoad(*f, moved.instance, 0);
    for (int n = 0; n < 5; ++n) {
      d = MustPick(*p, Request(key), *f, rng);
      ASSERT_EQ(d.instance, order[0]) << n;
      EXPECT_EQ(d.kind, DecisionKind::kAffinity);
      EXPECT_EQ(d.rank, 0u);
    }
  }
}

// Weights scale the cap: on weights {2, 1, 1, 1} with 4 in flight on each other instance, a
// weight-1 first choice is full at 6 in flight, a weight-2 first choice only at 20.
TEST(PolicyTest, PrefixAwareBalanceCapScalesWithWeight) {
  auto f = NamedFleet(4, {2, 1, 1, 1});
  Rng rng(19);
  struct Case {
    uint32_t first_choice;
    int32_t last_with_room;  // in flight on the first choice when it still takes the key
  };
  for (const Case c : {Case{0, 19}, Case{1, 5}}) {
    SCOPED_TRACE("first choice weight " + std::to_string(f->spec(c.first_choice).weight));
    PrefixKey key;
    for (uint32_t k = 0;; ++k) {
      key = KeyAt(k);
      if (PreferenceOrder(*f, key)[0] == c.first_choice) break;
    }
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    for (uint32_t i = 0; i < 4; ++i) SetLoad(*f, i, 4);

    auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
    SetLoad(*f, c.first_choice, c.last_with_room);
    EXPECT_EQ(BalanceCap(*f, c.first_choice, kDefaultBalanceFactor, 64), c.last_with_room + 1);
    Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, c.first_choice);
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);

    SetLoad(*f, c.first_choice, c.last_with_room + 1);
    EXPECT_EQ(BalanceCap(*f, c.first_choice, kDefaultBalanceFactor, 64), c.last_with_room + 1);
    d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[1]);
    EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  }
}

// Overload with a balance factor: every candidate is above the threshold (4), which follows the
// pool's mean (32 / 5 = 6.4: full at 7), so the first choice (6) takes the request and the key
// does not move; in both spill modes. (Without a balance factor the least loaded one takes it,
// saturated: PrefixAwareSaturatedPicksLeastLoaded.)
TEST(PolicyTest, PrefixAwareBalancedOverloadKeepsTheKeyHome) {
  for (SpillMode spill : {SpillMode::kNextPreferred, SpillMode::kLeastLoaded}) {
    SCOPED_TRACE(SpillModeName(spill));
    auto f = NamedFleet(5);
    auto p = MakePrefixAware(4, spill);
    Rng rng(20);
    const PrefixKey key = KeyAt(31337);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    SetLoadsByRank(*f, order, {6, 9, 5, 4, 7});
    Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]);
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);
    // Above the pool's mean it is full: the key spills (and moves).
    SetLoadsByRank(*f, order, {8, 9, 5, 4, 7});
    d = MustPick(*p, Request(key), *f, rng);
    EXPECT_NE(d.instance, order[0]);
    EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  }
}

// A retry is not a spill: a request that skips its failed first choice goes to the next
// instance, but the key does not move; its next request goes to its first choice again.
TEST(PolicyTest, PrefixAwareBalancedRetryDoesNotMoveKey) {
  auto f = NamedFleet(5);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(21);
  const PrefixKey key = KeyAt(77);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  const uint32_t tried[] = {order[0]};
  Decision d = MustPick(*p, Request(key, "", tried), *f, rng);
  EXPECT_EQ(d.instance, order[1]);
  EXPECT_EQ(d.rank, 1u);

  d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[0]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  EXPECT_EQ(d.rank, 0u);
}

// 100,000 requests over 1,000 keys of skewed popularity, with in-flight requests simulated
// (each finishes 56 requests after it started, 8 per instance on average): no request goes to
// an instance at its cap, and a key changes instance only when some instance is at its cap.
TEST(PolicyTest, PrefixAwareBalancedMovesOnlyWhenAnInstanceIsFull) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(22), keys(23);
  std::deque<uint32_t> running;                 // instance of each in-flight request, oldest first
  std::unordered_map<uint32_t, uint32_t> last;  // key -> instance of its previous request
  int moves = 0, requests_with_a_full_instance = 0;
  for (int n = 0; n < 100000; ++n) {
    if (running.size() == 56) {
      f->state(running.front()).in_flight.fetch_sub(1);
      running.pop_front();
    }
    const uint32_t k = keys.Uniform(1 + keys.Uniform(1000));  // low indices are hot
    bool any_full = false;
    for (uint32_t i = 0; i < 7; ++i) {
      any_full |= f->state(i).in_flight.load() >= BalanceCap(*f, i, kDefaultBalanceFactor, 64);
    }
    requests_with_a_full_instance += any_full;
    const Decision d = MustPick(*p, Request(KeyAt(k)), *f, rng);
    ASSERT_NE(d.kind, DecisionKind::kSaturated);
    ASSERT_LT(f->state(d.instance).in_flight.load(), BalanceCap(*f, d.instance, kDefaultBalanceFactor, 64))
        << "request " << n << " went to a full instance";
    auto [it, first_request] = last.try_emplace(k, d.instance);
    if (first_request) {
      ASSERT_TRUE(any_full || d.rank == 0) << "request " << n;
    } else if (it->second != d.instance) {
      ++moves;
      ASSERT_TRUE(any_full) << "request " << n << ": key " << k << " moved with no instance full";
      it->second = d.instance;
    }
    f->state(d.instance).in_flight.fetch_add(1);
    running.push_back(d.instance);
  }
  // Both sides were exercised: instances often filled up (and keys moved), and often nothing
  // was full.
  EXPECT_GT(requests_with_a_full_instance, 1000);
  EXPECT_LT(requests_with_a_full_instance, 90000);
  EXPECT_GT(moves, 100);
}

// ---------------------------------------------------------------------------------------------
// Prefix-aware: the share bound (with a balance factor), fed by OnDispatched.

// Tells the policy that counts[i] requests went to instance i, interleaved.
void Dispatch(Policy& p, const FleetSnapshot& f, std::vector<int> counts) {
  testing::CountDispatches(p, f, std::move(counts), Request(KeyAt(0)));
}

// The share bound applies once the pool is busy: one request in flight per instance.
void MakeBusy(const FleetSnapshot& f) {
  for (uint32_t i = 0; i < f.size(); ++i) SetLoad(f, i, 1);
}

// Counts by preference rank for `order`, as counts by instance.
std::vector<int> ByRank(const std::vector<uint32_t>& order, std::vector<int> by_rank) {
  std::vector<int> counts(order.size(), 0);
  for (size_t rank = 0; rank < order.size(); ++rank) counts[order[rank]] = by_rank[rank];
  return counts;
}

// Recent dispatches by rank {100, 40, 12, 12, 8, 12, 12}: the fair share is 196 / 7 = 28. The
// first choice is over its share (by more than 5% + 4 requests) so it is full, and the key moves
// to the instance furthest below its share, rank 4.
TEST(PolicyTest, PrefixAwareShareBoundSpillsToAnInstanceBelowItsShare) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(40);
  const PrefixKey key = KeyAt(77);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  MakeBusy(*f);
  Dispatch(*p, *f, ByRank(order, {100, 40, 12, 12, 8, 12, 12}));
  Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[4]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  EXPECT_EQ(d.rank, 4u);
  // The move is sticky: the key's next request goes to its new home as affinity.
  d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[4]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  // Without a balance factor there is no share bound: the first choice takes it.
  auto off = MakePrefixAware(64, SpillMode::kNextPreferred, kThresholdOnly);
  Dispatch(*off, *f, ByRank(order, {100, 40, 12, 12, 8, 12, 12}));
  d = MustPick(*off, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[0]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
}

// Below one request in flight per instance there is no share bound: the same counts leave the
// key on its first choice.
TEST(PolicyTest, PrefixAwareShareBoundOnlyWhenBusy) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(43);
  const PrefixKey key = KeyAt(77);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  Dispatch(*p, *f, ByRank(order, {100, 40, 12, 12, 8, 12, 12}));
  SetLoadsByRank(*f, order, {1, 1, 1, 1, 1, 1, 0});  // 6 in flight on 7 instances
  Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[0]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  SetLoad(*f, order[6], 1);  // 7 in flight: busy
  d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[4]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
}

// Within the tolerance the first choice keeps its keys: 27 over a fair share of 20 is above
// it (27 > 1.05 x 20 + 4 = 25), 24 is not.
TEST(PolicyTest, PrefixAwareShareBoundToleratesSmallExcess) {
  for (int first : {24, 27}) {
    SCOPED_TRACE(first);
    auto f = NamedFleet(7);
    auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
    Rng rng(41);
    const PrefixKey key = KeyAt(78);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    // The others share 140 - first so that the total is 140 and the fair share 20.
    std::vector<int> by_rank{first};
    int rest = 140 - first;
    for (uint32_t rank = 1; rank < 7; ++rank) {
      const int n = rest / static_cast<int>(7 - rank);
      by_rank.push_back(n);
      rest -= n;
    }
    MakeBusy(*f);
    Dispatch(*p, *f, ByRank(order, by_rank));
    const Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance == order[0], first == 24);
  }
}

// An instance that joins starts at its fair share: adding an eighth instance to a fleet whose
// instances each had 100 recent dispatches leaves every key on its first choice.
TEST(PolicyTest, PrefixAwareShareBoundNewcomerStartsAtFairShare) {
  auto seven = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(42);
  Dispatch(*p, *seven, std::vector<int>(7, 100));
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < 8; ++i) specs.push_back(Spec("instance-" + std::to_string(i)));
  auto created = FleetSnapshot::Create(std::move(specs), seven.get());
  ASSERT_TRUE(created.ok());
  auto eight = std::move(created).value();
  MakeBusy(*eight);
  for (uint64_t k = 0; k < 200; ++k) {
    const PrefixKey key = KeyAt(1000 + k);
    const Decision d = MustPick(*p, Request(key), *eight, rng);
    EXPECT_EQ(d.instance, PreferenceOrder(*eight, key)[0]) << k;
    EXPECT_EQ(d.kind, DecisionKind::kAffinity) << k;
  }
}

// Shares over a long run: 640 keys requested uniformly at random on 7 instances. Keys hash
// unevenly, so without a balance factor shares spread beyond 13.3-15.4%; with the default
// factor every instance's share of the last 4,000 requests is within 13.6-15.0%.
std::vector<double> SharesOfLastRequests(Policy& p, const FleetSnapshot& f, uint32_t total, uint32_t last,
                                         uint64_t seed) {
  Rng rng(seed), keys(seed + 1);
  std::vector<double> counts(f.size(), 0);
  for (uint32_t i = 0; i < f.size(); ++i) SetLoad(f, i, 2);  // busy, far below the load cap
  for (uint32_t n = 0; n < total; ++n) {
    const RouteRequest r = Request(KeyAt(keys.Uniform(640)));
    const Decision d = MustPick(p, r, f, rng);
    p.OnDispatched(r, d, f);
    if (n >= total - last) counts[d.instance] += 1.0 / last;
  }
  return counts;
}

TEST(PolicyTest, PrefixAwareShareBoundEvensOutShares) {
  auto f = NamedFleet(7);
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    auto bounded = MakePrefixAware(64, SpillMode::kNextPreferred);
    const std::vector<double> shares = SharesOfLastRequests(*bounded, *f, 6000, 4000, seed);
    EXPECT_GE(*std::min_element(shares.begin(), shares.end()), 0.136);
    EXPECT_LE(*std::max_element(shares.begin(), shares.end()), 0.150);
    auto unbounded = MakePrefixAware(64, SpillMode::kNextPreferred, kThresholdOnly);
    const std::vector<double> spread = SharesOfLastRequests(*unbounded, *f, 6000, 4000, seed);
    EXPECT_TRUE(*std::min_element(spread.begin(), spread.end()) < 0.133 ||
                *std::max_element(spread.begin(), spread.end()) > 0.154);
  }
}

// Counts `n` dispatches of `key`, spread over the instances in turn (so that no instance is
// over its share: only the key's demand is being set up).
void DispatchKey(Policy& p, const FleetSnapshot& f, const PrefixKey& key, int n) {
  static uint32_t next = 0;
  for (int k = 0; k < n; ++k) {
    p.OnDispatched(Request(key), Decision{next++ % f.size(), DecisionKind::kAffinity, 0}, f);
  }
}

// One key with all the traffic is replicated over every instance: each request goes to the
// least loaded of its homes, as an affinity decision, instead of to its one first choice.
TEST(PolicyTest, PrefixAwareReplicatesAKeyWithAllTheTraffic) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(50);
  const PrefixKey key = KeyAt(90);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  DispatchKey(*p, *f, key, 2000);
  SetLoadsByRank(*f, order, {6, 5, 4, 2, 3, 6, 5});
  Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[3]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  EXPECT_EQ(d.rank, 3u);
  // Without a balance factor (the managed service's exact behaviour) there is no replication.
  auto exact = MakePrefixAware(64, SpillMode::kNextPreferred, kThresholdOnly);
  DispatchKey(*exact, *f, key, 2000);
  d = MustPick(*exact, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[0]);
}

// The number of homes follows the key's share: 25% of the traffic on 7 instances is
// ceil(0.25 x 7 / 1.05) = 2 homes; the third choice, idle, is not one of them.
TEST(PolicyTest, PrefixAwareReplicaCountFollowsTheKeysShare) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(51);
  const PrefixKey hot = KeyAt(91);
  for (int n = 0; n < 3000; ++n) {
    DispatchKey(*p, *f, n % 4 == 0 ? hot : KeyAt(5000 + n), 1);
  }
  const std::vector<uint32_t> order = PreferenceOrder(*f, hot);
  // The homes below their fair share of dispatches (else the key would grow: next test).
  std::vector<int> others(7, 0);
  for (uint32_t rank = 2; rank < 7; ++rank) others[order[rank]] = 30;
  testing::CountDispatches(*p, *f, others, Request(KeyAt(4999)));
  SetLoadsByRank(*f, order, {3, 2, 0, 3, 3, 3, 3});
  Decision d = MustPick(*p, Request(hot), *f, rng);
  EXPECT_EQ(d.instance, order[1]);
  EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  // A cold key keeps its one home (below its cap: 3 with this traffic's reuse of about 25%).
  // It was seen once, so it is not a new key (placed by load: see the next tests).
  const PrefixKey cold = KeyAt(92);
  DispatchKey(*p, *f, cold, 1);
  const std::vector<uint32_t> cold_order = PreferenceOrder(*f, cold);
  SetLoadsByRank(*f, cold_order, {2, 3, 0, 3, 3, 3, 3});
  d = MustPick(*p, Request(cold), *f, rng);
  EXPECT_EQ(d.instance, cold_order[0]);
}

// Homes shared with other hot keys take more than their fair share of the dispatches: the
// replicated key then grows by the next instance of its preference order. Each round of 140
// dispatches sends 35 of the hot key (25%: 2 homes) over every instance and 105 of other keys;
// its homes end at 21 of 140 (just over the fair 20, below the share bound), the third choice
// at 19. When the homes are below their share (18 of 140) the key keeps its two homes.
TEST(PolicyTest, PrefixAwareReplicatedKeyGrowsWhenItsHomesAreOverTheirShare) {
  auto f = NamedFleet(7);
  const PrefixKey hot = KeyAt(96);
  const std::vector<uint32_t> order = PreferenceOrder(*f, hot);
  for (bool homes_over_share : {false, true}) {
    SCOPED_TRACE(homes_over_share);
    auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
    Rng rng(56);
    const std::vector<int> others_by_rank =
        homes_over_share ? std::vector<int>{16, 16, 14, 15, 15, 15, 14} : std::vector<int>{13, 13, 15, 15, 16, 16, 17};
    std::vector<int> others(7);
    for (uint32_t rank = 0; rank < 7; ++rank) others[order[rank]] = others_by_rank[rank];
    for (int round = 0; round < 40; ++round) {
      DispatchKey(*p, *f, hot, 35);
      testing::CountDispatches(*p, *f, others, Request(KeyAt(6000 + round)));
    }
    SetLoadsByRank(*f, order, {3, 3, 2, 3, 3, 3, 3});
    const Decision d = MustPick(*p, Request(hot), *f, rng);
    EXPECT_EQ(d.instance, order[homes_over_share ? 2 : 0]);
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  }
}

// Replication, like the share bound, waits until the pool is busy: below one request in flight
// per instance the hot key stays on its first choice.
TEST(PolicyTest, PrefixAwareReplicatesOnlyWhenBusy) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(52);
  const PrefixKey key = KeyAt(93);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  DispatchKey(*p, *f, key, 2000);
  SetLoadsByRank(*f, order, {1, 0, 0, 0, 0, 0, 0});
  EXPECT_EQ(MustPick(*p, Request(key), *f, rng).instance, order[0]);
}

// The balance factor shrinks towards 1 for traffic whose keys do not repeat: the same loads
// leave a key on its first choice after repeating traffic and spill it after new keys only.
TEST(PolicyTest, PrefixAwareBalanceFactorScalesWithReuse) {
  auto f = NamedFleet(7);
  const PrefixKey key = KeyAt(95);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  for (bool repeating : {true, false}) {
    SCOPED_TRACE(repeating);
    auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
    Rng rng(54);
    for (int n = 0; n < 3000; ++n) DispatchKey(*p, *f, KeyAt(repeating ? 7000 + n % 50 : 9000 + n), 1);
    // Mean (63 + 1) / 7 = 9.1: the cap is 14 with factor 1.5, 10 with factor 1.
    SetLoadsByRank(*f, order, {12, 8, 9, 9, 9, 8, 8});
    const Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance == order[0], repeating);
  }
}

// In overload (the pool's mean in-flight x 1.05 above the threshold) a full first choice spills
// to the least loaded instance, not the next preferred: every instance is near its limit then,
// and a key moved to one just under it would move again, each move a cold prefill. Loads by
// rank {20, 10, 10, 10, 10, 2, 10}: mean 73 / 7 = 10.4, every limit 11 (max(threshold,
// ceil(1.05 x mean))); the first choice is full. Threshold 4: overload; 16: not.
TEST(PolicyTest, PrefixAwareSpillsToTheLeastLoadedInOverload) {
  auto f = NamedFleet(7);
  const PrefixKey key = KeyAt(7000);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  for (int32_t threshold : {4, 16}) {
    SCOPED_TRACE(threshold);
    auto p = MakePrefixAware(threshold, SpillMode::kNextPreferred);
    Rng rng(57);
    for (int n = 0; n < 3000; ++n) DispatchKey(*p, *f, KeyAt(7000 + n % 50), 1);
    SetLoadsByRank(*f, order, {20, 10, 10, 10, 10, 2, 10});
    const Decision d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.kind, DecisionKind::kOverflow);
    if (threshold == 4) {
      EXPECT_EQ(d.instance, order[5]);
    } else {
      EXPECT_TRUE(d.instance == order[1] || d.instance == order[2]) << d.rank;
    }
  }
}

// How many of 100 keys never seen go to the least loaded instance rather than their first
// choice, both below their limits (loads by rank {1, 2, 2, 0, 2, 2, 2}: the cap is 2 with a
// reuse near 0), after 3,000 dispatches of `traffic` keys.
int NewKeysPlacedByLoad(int traffic) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(56);
  for (int n = 0; n < 3000; ++n) DispatchKey(*p, *f, KeyAt(20000 + n % traffic), 1);
  int by_load = 0;
  for (int k = 0; k < 100; ++k) {
    const PrefixKey key = KeyAt(40000 + k);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    SetLoadsByRank(*f, order, {1, 2, 2, 0, 2, 2, 2});
    const Decision d = MustPick(*p, Request(key), *f, rng);
    if (d.instance == order[3]) {
      ++by_load;
      EXPECT_EQ(d.kind, DecisionKind::kLeastOutstanding);
    } else {
      EXPECT_EQ(d.instance, order[0]);
    }
  }
  return by_load;
}

// A key never seen has nothing cached that the policy knows of. After traffic that does not
// repeat (reuse near 0) new keys go to the least loaded instance; after traffic that repeats
// (50 keys: reuse near 1) they keep their first choice, where gateway replicas agree.
TEST(PolicyTest, PrefixAwarePlacesNewKeysByLoadAsReuseFalls) {
  EXPECT_GE(NewKeysPlacedByLoad(3000), 95);
  EXPECT_LE(NewKeysPlacedByLoad(50), 5);
}

// Placement by load records no home: once seen, the key goes to its first choice (the same
// for every gateway replica), and without a balance factor new keys are not placed by load.
TEST(PolicyTest, PrefixAwareNewKeyPlacedByLoadKeepsItsFirstChoice) {
  auto f = NamedFleet(7);
  auto p = MakePrefixAware(64, SpillMode::kNextPreferred);
  Rng rng(57);
  for (int n = 0; n < 3000; ++n) DispatchKey(*p, *f, KeyAt(60000 + n), 1);
  // A key that the reuse of about 1% places by load (its hash decides).
  PrefixKey key;
  std::vector<uint32_t> order;
  for (int k = 0;; ++k) {
    ASSERT_LT(k, 100);
    key = KeyAt(80000 + k);
    order = PreferenceOrder(*f, key);
    SetLoadsByRank(*f, order, {1, 2, 2, 0, 2, 2, 2});
    if (MustPick(*p, Request(key), *f, rng).instance == order[3]) break;
  }
  p->OnDispatched(Request(key), Decision{order[3], DecisionKind::kLeastOutstanding, 3}, *f);
  EXPECT_EQ(MustPick(*p, Request(key), *f, rng).instance, order[0]);

  auto exact = MakePrefixAware(64, SpillMode::kNextPreferred, kThresholdOnly);
  for (int n = 0; n < 3000; ++n) DispatchKey(*exact, *f, KeyAt(60000 + n), 1);
  EXPECT_EQ(MustPick(*exact, Request(KeyAt(90000)), *f, rng).instance, PreferenceOrder(*f, KeyAt(90000))[0]);
}

// ---------------------------------------------------------------------------------------------
// Candidates: eligibility, availability, exclusion.

// Every strategy sends a request only to instances that serve its model or adapter, and
// reaches each of them; a name nobody serves (and no wildcard) is Unavailable.
TEST(PolicyTest, PicksOnlyEligibleInstances) {
  auto f = MakeFleet({Spec("a", {"llama"}), Spec("b", {"llama", "llama-lora-sql"}), Spec("c", {"mistral"}),
                      Spec("d", {"mistral", "llama-lora-sql"}), Spec("e", {"qwen"})});
  for (Strategy s : kAllStrategies) {
    auto p = MakeStrategy(s);
    Rng rng(17);
    for (std::string_view model : {"llama", "mistral", "llama-lora-sql", "qwen"}) {
      const auto eligible = f->Eligible(model);
      std::set<uint32_t> seen;
      for (uint32_t k = 0; k < 2000; ++k) {
        const Decision d = MustPick(*p, Request(KeyAt(k), model), *f, rng);
        ASSERT_NE(std::find(eligible.begin(), eligible.end(), d.instance), eligible.end())
            << StrategyName(s) << " sent " << model << " to " << f->spec(d.instance).name;
        seen.insert(d.instance);
      }
      EXPECT_EQ(seen.size(), eligible.size()) << StrategyName(s) << " " << model;
    }
    Result<Decision> none = p->Pick(Request(KeyAt(1), "gpt-4"), *f, rng);
    ASSERT_FALSE(none.ok()) << StrategyName(s);
    EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  }
}

// Wildcard instances (empty serves) take every model, including names nobody declares; the
// empty name is the whole fleet.
TEST(PolicyTest, WildcardInstancesServeEveryName) {
  auto f = MakeFleet({Spec("a", {"llama"}), Spec("b", {"mistral"}), Spec("w")});
  for (Strategy s : kAllStrategies) {
    Rng rng(8);
    auto unknown = MakeStrategy(s);
    auto llama = MakeStrategy(s);
    auto whole_fleet = MakeStrategy(s);
    std::set<uint32_t> llama_pool, default_pool;
    for (uint32_t k = 0; k < 500; ++k) {
      EXPECT_EQ(MustPick(*unknown, Request(KeyAt(k), "unknown-model"), *f, rng).instance, 2u);
      llama_pool.insert(MustPick(*llama, Request(KeyAt(k), "llama"), *f, rng).instance);
      default_pool.insert(MustPick(*whole_fleet, Request(KeyAt(k), ""), *f, rng).instance);
    }
    EXPECT_EQ(llama_pool, (std::set<uint32_t>{0, 2})) << StrategyName(s);
    EXPECT_EQ(default_pool, (std::set<uint32_t>{0, 1, 2})) << StrategyName(s);
  }
}

// An unavailable instance is never picked; prefix-aware moves its keys to the next available
// instance in their preference order. With nothing available, every strategy is Unavailable.
TEST(PolicyTest, UnavailableInstancesAreNeverPicked) {
  auto f = NamedFleet(5);
  f->state(2).available.store(false);
  for (Strategy s : kAllStrategies) {
    auto p = MakeStrategy(s);
    Rng rng(21);
    for (uint32_t k = 0; k < 2000; ++k) {
      const Decision d = MustPick(*p, Request(KeyAt(k)), *f, rng);
      ASSERT_NE(d.instance, 2u) << StrategyName(s);
      if (s == Strategy::kPrefixAware) {
        std::vector<uint32_t> order = PreferenceOrder(*f, KeyAt(k));
        std::erase(order, 2u);
        ASSERT_EQ(d.instance, order[0]) << "key " << k;
      }
    }
  }
  for (uint32_t i = 0; i < f->size(); ++i) f->state(i).available.store(false);
  for (Strategy s : kAllStrategies) {
    Rng rng(22);
    Result<Decision> d = MakeStrategy(s)->Pick(Request(KeyAt(0)), *f, rng);
    ASSERT_FALSE(d.ok()) << StrategyName(s);
    EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  }
}

// A drained instance takes no new requests even while healthy; undraining gives prefix-aware
// its keys back exactly.
TEST(PolicyTest, DrainedInstancesAreNotPickedUntilUndrained) {
  auto f = NamedFleet(5);
  auto p = MakeStrategy(Strategy::kPrefixAware);
  Rng rng(23);
  std::vector<uint32_t> before;
  for (uint32_t k = 0; k < 2000; ++k) before.push_back(MustPick(*p, Request(KeyAt(k)), *f, rng).instance);
  f->state(1).drained.store(true);
  ASSERT_TRUE(f->state(1).available.load());
  for (Strategy s : kAllStrategies) {
    auto q = MakeStrategy(s);
    for (uint32_t k = 0; k < 2000; ++k) {
      ASSERT_NE(MustPick(*q, Request(KeyAt(k)), *f, rng).instance, 1u) << StrategyName(s);
    }
  }
  f->state(1).drained.store(false);
  for (uint32_t k = 0; k < 2000; ++k) {
    ASSERT_EQ(MustPick(*p, Request(KeyAt(k)), *f, rng).instance, before[k]) << "key " << k;
  }
}

// Retries: prefix-aware skips excluded instances and takes the next in preference order,
// keeping its rank, with or without bounded loads; excluded instances are never picked by any
// strategy; excluding every candidate is Unavailable.
TEST(PolicyTest, ExcludedInstancesAreSkipped) {
  auto f = NamedFleet(5);
  Rng rng(9);
  for (double factor : {kThresholdOnly, kDefaultBalanceFactor}) {
    SCOPED_TRACE("balance_factor " + std::to_string(factor));
    auto p = MakePrefixAware(4, SpillMode::kNextPreferred, factor);
    for (uint32_t k = 0; k < 200; ++k) {
      const PrefixKey key = KeyAt(k);
      const std::vector<uint32_t> order = PreferenceOrder(*f, key);
      const uint32_t first[] = {order[0]};
      Decision d = MustPick(*p, Request(key, "", first), *f, rng);
      ASSERT_EQ(d.instance, order[1]);
      EXPECT_EQ(d.rank, 1u);
      const uint32_t two[] = {order[1], order[0]};
      d = MustPick(*p, Request(key, "", two), *f, rng);
      ASSERT_EQ(d.instance, order[2]);
      EXPECT_EQ(d.rank, 2u);
    }

    // Excluded and full combine: first tried, second full => third, as an overflow.
    const PrefixKey key = KeyAt(5);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    SetLoad(*f, order[1], 4);
    const uint32_t tried[] = {order[0]};
    Decision d = MustPick(*p, Request(key, "", tried), *f, rng);
    EXPECT_EQ(d.instance, order[2]);
    EXPECT_EQ(d.kind, DecisionKind::kOverflow);
    EXPECT_EQ(d.rank, 2u);
    SetLoad(*f, order[1], 0);
  }

  const uint32_t all[] = {0, 1, 2, 3, 4};
  const uint32_t some[] = {1, 3};
  for (Strategy s : kAllStrategies) {
    auto policy = MakeStrategy(s);
    for (uint32_t k = 0; k < 500; ++k) {
      const uint32_t i = MustPick(*policy, Request(KeyAt(k), "", some), *f, rng).instance;
      ASSERT_TRUE(i != 1 && i != 3) << StrategyName(s);
    }
    Result<Decision> none = policy->Pick(Request(KeyAt(1), "", all), *f, rng);
    ASSERT_FALSE(none.ok()) << StrategyName(s);
    EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  }
}

// ---------------------------------------------------------------------------------------------
// Load-blind and load-aware baselines.

// random: 70,000 picks over 7 equal instances land within one point of 1/7 each.
TEST(PolicyTest, RandomIsRoughlyUniform) {
  auto f = NamedFleet(7);
  auto p = MakeStrategy(Strategy::kRandom);
  Rng rng(1234);
  std::vector<int> counts(7, 0);
  constexpr int kPicks = 70000;
  for (int n = 0; n < kPicks; ++n) {
    const Decision d = MustPick(*p, Request(KeyAt(0)), *f, rng);
    ASSERT_EQ(d.kind, DecisionKind::kRandom);
    ++counts[d.instance];
  }
  for (int c : counts) EXPECT_NEAR(static_cast<double>(c) / kPicks, 1.0 / 7, 0.01);
}

// random with weights 1,2,3,4: picks follow w/10 within one point.
TEST(PolicyTest, WeightedRandomFollowsWeights) {
  auto f = NamedFleet(4, {1, 2, 3, 4});
  auto p = MakeStrategy(Strategy::kRandom);
  Rng rng(4321);
  std::vector<int> counts(4, 0);
  constexpr int kPicks = 100000;
  for (int n = 0; n < kPicks; ++n) ++counts[MustPick(*p, Request(KeyAt(0)), *f, rng).instance];
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(static_cast<double>(counts[i]) / kPicks, (i + 1) / 10.0, 0.01) << i;
  }
}

// least-outstanding: the instance with the fewest in-flight requests is picked.
TEST(PolicyTest, LeastOutstandingPicksFewestInFlight) {
  auto f = NamedFleet(5);
  const int32_t loads[5] = {5, 3, 7, 1, 4};
  for (uint32_t i = 0; i < 5; ++i) SetLoad(*f, i, loads[i]);
  auto p = MakeStrategy(Strategy::kLeastOutstanding);
  Rng rng(6);
  for (int n = 0; n < 100; ++n) {
    const Decision d = MustPick(*p, Request(KeyAt(n)), *f, rng);
    ASSERT_EQ(d.instance, 3u);
    EXPECT_EQ(d.kind, DecisionKind::kLeastOutstanding);
  }
}

// least-outstanding compares in-flight per unit of weight: 3 in flight on weight 4 is less
// loaded than 1 in flight on weight 1.
TEST(PolicyTest, LeastOutstandingUsesInFlightPerWeight) {
  auto f = NamedFleet(2, {1, 4});
  SetLoad(*f, 0, 1);
  SetLoad(*f, 1, 3);
  auto p = MakeStrategy(Strategy::kLeastOutstanding);
  Rng rng(6);
  for (int n = 0; n < 50; ++n) ASSERT_EQ(MustPick(*p, Request(KeyAt(n)), *f, rng).instance, 1u);
}

void SetWork(const FleetSnapshot& f, uint32_t i, int32_t in_flight, int64_t tokens) {
  f.state(i).in_flight.store(in_flight);
  f.state(i).outstanding_tokens.store(tokens);
}

std::unique_ptr<Policy> MakeLeastOutstanding(LoadMeasure measure) {
  RoutingOptions o;
  o.strategy = Strategy::kLeastOutstanding;
  o.load_measure = measure;
  return MakePolicy(o);
}

// Work-weighted load: one 32k-token prefill counts for more than two 50-token requests. With
// the request count the instance with one request wins; with prompt tokens the one with two.
TEST(PolicyTest, LeastOutstandingByPromptTokensWeighsWork) {
  auto f = NamedFleet(2);
  SetWork(*f, 0, 1, 32'000);
  SetWork(*f, 1, 2, 100);
  Rng rng(6);
  auto by_requests = MakeLeastOutstanding(LoadMeasure::kRequests);
  auto by_tokens = MakeLeastOutstanding(LoadMeasure::kPromptTokens);
  for (int n = 0; n < 20; ++n) {
    EXPECT_EQ(MustPick(*by_requests, Request(KeyAt(n)), *f, rng).instance, 0u);
    EXPECT_EQ(MustPick(*by_tokens, Request(KeyAt(n)), *f, rng).instance, 1u);
  }
  // Per unit of weight: 32,001 on weight 1 vs 60,002 on weight 4 (15,000.5 per unit).
  auto g = NamedFleet(2, {1, 4});
  SetWork(*g, 0, 1, 32'000);
  SetWork(*g, 1, 2, 60'000);
  EXPECT_EQ(MustPick(*by_tokens, Request(KeyAt(1)), *g, rng).instance, 1u);
  // Each request counts as one token on top of its prompt: empty prompts still spread.
  auto h = NamedFleet(2);
  SetWork(*h, 0, 3, 0);
  SetWork(*h, 1, 1, 0);
  EXPECT_EQ(MustPick(*by_tokens, Request(KeyAt(1)), *h, rng).instance, 1u);
}

// prefix-aware with least-loaded spill and the prompt-tokens measure spills to the instance
// with the least outstanding work below its (request-counted) threshold.
TEST(PolicyTest, PrefixAwareLeastLoadedSpillByPromptTokens) {
  auto f = NamedFleet(4);
  RoutingOptions o;
  o.strategy = Strategy::kPrefixAware;
  o.concurrency_threshold = 4;
  o.spill = SpillMode::kLeastLoaded;
  o.balance_factor = kThresholdOnly;
  o.load_measure = LoadMeasure::kPromptTokens;
  auto p = MakePolicy(o);
  Rng rng(3);
  const PrefixKey key = KeyAt(77);
  const std::vector<uint32_t> order = PreferenceOrder(*f, key);
  SetWork(*f, order[0], 4, 400);     // at the threshold: full
  SetWork(*f, order[1], 1, 30'000);  // one long prefill
  SetWork(*f, order[2], 3, 600);     // three short requests: least work below the threshold
  SetWork(*f, order[3], 4, 10);      // least work, but at the threshold
  Decision d = MustPick(*p, Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[2]);
  EXPECT_EQ(d.kind, DecisionKind::kOverflow);
  // With the request measure the same loads spill to the fewest requests.
  o.load_measure = LoadMeasure::kRequests;
  d = MustPick(*MakePolicy(o), Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[1]);
  // Every instance full: the least work takes it, saturated.
  SetWork(*f, order[1], 4, 30'000);
  SetWork(*f, order[2], 4, 600);
  o.load_measure = LoadMeasure::kPromptTokens;
  d = MustPick(*MakePolicy(o), Request(key), *f, rng);
  EXPECT_EQ(d.instance, order[3]);
  EXPECT_EQ(d.kind, DecisionKind::kSaturated);
}

// least-outstanding breaks ties at random: with equal loads every tied instance is chosen
// (roughly evenly), and untied instances never are.
TEST(PolicyTest, LeastOutstandingBreaksTiesAtRandom) {
  auto f = NamedFleet(7);
  auto p = MakeStrategy(Strategy::kLeastOutstanding);
  Rng rng(10);
  std::vector<int> counts(7, 0);
  for (int n = 0; n < 7000; ++n) ++counts[MustPick(*p, Request(KeyAt(0)), *f, rng).instance];
  for (int c : counts) {
    EXPECT_GT(c, 800);
    EXPECT_LT(c, 1200);
  }

  const int32_t loads[7] = {2, 0, 2, 0, 2, 0, 2};
  for (uint32_t i = 0; i < 7; ++i) SetLoad(*f, i, loads[i]);
  std::vector<int> tied(7, 0);
  for (int n = 0; n < 3000; ++n) ++tied[MustPick(*p, Request(KeyAt(0)), *f, rng).instance];
  for (uint32_t i = 0; i < 7; ++i) {
    if (loads[i] == 0) {
      EXPECT_GT(tied[i], 800) << i;
    } else {
      EXPECT_EQ(tied[i], 0) << i;
    }
  }
}

// round-robin visits the eligible instances in turn: every window of N consecutive picks
// covers all N, and the sequence repeats with period N.
TEST(PolicyTest, RoundRobinCyclesThroughEligibleInstances) {
  auto f = MakeFleet({Spec("a", {"m1"}), Spec("b", {"m2"}), Spec("c", {"m1"}), Spec("d"), Spec("e", {"m1"})});
  auto p = MakeStrategy(Strategy::kRoundRobin);
  Rng rng(0);
  const std::vector<uint32_t> eligible = {0, 2, 3, 4};  // m1 servers and the wildcard
  std::vector<uint32_t> picks;
  for (int n = 0; n < 12; ++n) {
    const Decision d = MustPick(*p, Request(KeyAt(n), "m1"), *f, rng);
    EXPECT_EQ(d.kind, DecisionKind::kRoundRobin);
    picks.push_back(d.instance);
  }
  for (size_t start = 0; start + eligible.size() <= picks.size(); ++start) {
    std::vector<uint32_t> window(picks.begin() + start, picks.begin() + start + eligible.size());
    std::sort(window.begin(), window.end());
    EXPECT_EQ(window, eligible) << "window at " << start;
  }
  for (size_t n = eligible.size(); n < picks.size(); ++n) {
    EXPECT_EQ(picks[n], picks[n - eligible.size()]);
  }

  auto all = NamedFleet(3);
  auto fresh = MakeStrategy(Strategy::kRoundRobin);
  std::vector<int> counts(3, 0);
  for (int n = 0; n < 300; ++n) ++counts[MustPick(*fresh, Request(KeyAt(n)), *all, rng).instance];
  EXPECT_EQ(counts, (std::vector<int>{100, 100, 100}));
}

// Alternating requests for two models still take turns within each model's own instances.
TEST(PolicyTest, RoundRobinTakesTurnsPerServedName) {
  auto f = MakeFleet({Spec("a", {"m1"}), Spec("b", {"m1"}), Spec("c", {"m2"}), Spec("d", {"m2"})});
  auto p = MakeStrategy(Strategy::kRoundRobin);
  Rng rng(0);
  std::vector<int> counts(4, 0);
  for (int n = 0; n < 1000; ++n) {
    ++counts[MustPick(*p, Request(KeyAt(n), n % 2 ? "m2" : "m1"), *f, rng).instance];
  }
  EXPECT_EQ(counts, (std::vector<int>{250, 250, 250, 250}));
}

// The sagemaker preset is the managed service's documented behaviour: a request whose
// prefix-selected instance has reached the threshold goes to the instance with the fewest
// in-flight requests, and the key does not move: its next request, once the preferred instance
// is below the threshold, returns there. Every option the preset fixes is set by it.
TEST(PolicyTest, SageMakerPresetSpillsOneRequestToTheFewestInFlight) {
  RoutingOptions o;
  o.strategy = Strategy::kPrefixAware;
  o.concurrency_threshold = 4;
  ApplyCompatibility(Compatibility::kSageMaker, o);
  EXPECT_EQ(o.spill, SpillMode::kLeastLoaded);
  EXPECT_EQ(o.balance_factor, 0);
  EXPECT_EQ(o.load_measure, LoadMeasure::kRequests);
  ASSERT_TRUE(o.Validate().ok());
  auto p = MakePolicy(o);
  auto f = NamedFleet(5);
  Rng rng(7);
  for (int k = 0; k < 20; ++k) {
    const PrefixKey key = KeyAt(9000 + k);
    const std::vector<uint32_t> order = PreferenceOrder(*f, key);
    // A burst: the preferred instance at the threshold; the fewest in flight is at rank 3,
    // not the next preferred (rank 1, below the threshold too).
    SetLoadsByRank(*f, order, {4, 2, 3, 1, 2});
    Decision d = MustPick(*p, Request(key), *f, rng);
    p->OnDispatched(Request(key), d, *f);
    EXPECT_EQ(d.instance, order[3]) << k;
    EXPECT_EQ(d.kind, DecisionKind::kOverflow);
    // The preferred instance below the threshold again: the key's next request returns to it.
    SetLoadsByRank(*f, order, {3, 2, 3, 2, 2});
    d = MustPick(*p, Request(key), *f, rng);
    EXPECT_EQ(d.instance, order[0]) << k;
    EXPECT_EQ(d.kind, DecisionKind::kAffinity);
  }
  // What the preset fixes cannot be set beside it.
  RoutingOptions bad = o;
  bad.balance_factor = 1.5;
  EXPECT_NE(bad.Validate().message().find("balance_factor: compatibility sagemaker fixes"), std::string::npos);
  bad = o;
  bad.spill = SpillMode::kNextPreferred;
  EXPECT_NE(bad.Validate().message().find("spill_mode"), std::string::npos);
}

}  // namespace
}  // namespace prefix_router
