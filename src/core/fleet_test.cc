#include "core/fleet.h"

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace prefix_router {
namespace {

InstanceSpec Spec(std::string name, std::vector<std::string> serves = {}, uint32_t weight = 1) {
  InstanceSpec s;
  s.url = "http://" + name + ":8080";
  s.name = std::move(name);
  s.weight = weight;
  s.serves = std::move(serves);
  return s;
}

std::shared_ptr<const FleetSnapshot> MakeFleet(std::vector<InstanceSpec> specs,
                                               const FleetSnapshot* previous = nullptr) {
  auto r = FleetSnapshot::Create(std::move(specs), previous);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::vector<uint32_t> ToVector(std::span<const uint32_t> s) { return {s.begin(), s.end()}; }

// Expects Create to fail with InvalidArgument and a message containing `field`.
void ExpectRejected(std::vector<InstanceSpec> specs, const std::string& field) {
  auto r = FleetSnapshot::Create(std::move(specs));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
}

// ---------------------------------------------------------------------------------------------
// Validation.

// An empty instance name is rejected with a message naming the offending field.
// Every snapshot has its own generation, also one built from the same specs where a freed one
// lived (caches keyed on a snapshot rely on it).
TEST(FleetTest, EverySnapshotHasItsOwnGeneration) {
  std::vector<uint64_t> seen;
  for (int k = 0; k < 100; ++k) {
    auto f = FleetSnapshot::Create({InstanceSpec{"a"}, InstanceSpec{"b"}});
    ASSERT_TRUE(f.ok());
    const uint64_t g = (*f)->generation();
    EXPECT_NE(g, 0u);
    for (uint64_t earlier : seen) ASSERT_NE(g, earlier);
    seen.push_back(g);
  }
}

TEST(FleetTest, CreateRejectsEmptyName) {
  ExpectRejected({Spec("a"), Spec("")}, "instances[1].name");
  ExpectRejected({Spec("")}, "instances[0].name");
}

// A name used twice is rejected, naming the later entry.
TEST(FleetTest, CreateRejectsDuplicateName) {
  ExpectRejected({Spec("a"), Spec("b"), Spec("a")}, "instances[2].name");
  ExpectRejected({Spec("a"), Spec("b"), Spec("a")}, "'a'");
}

// Weights outside 1..kMaxInstanceWeight are rejected with the field and the allowed range;
// the bounds themselves are accepted.
TEST(FleetTest, CreateRejectsWeightOutOfRange) {
  ExpectRejected({Spec("a", {}, 0)}, "instances[0].weight");
  ExpectRejected({Spec("a"), Spec("b", {}, kMaxInstanceWeight + 1)}, "instances[1].weight");
  ExpectRejected({Spec("a"), Spec("b", {}, kMaxInstanceWeight + 1)}, "1..10000");
  auto ok = MakeFleet({Spec("a", {}, 1), Spec("b", {}, kMaxInstanceWeight)});
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->spec(1).weight, kMaxInstanceWeight);
}

// A valid fleet keeps its specs in order and finds instances by name.
TEST(FleetTest, CreateKeepsSpecsAndIndexesNames) {
  auto f = MakeFleet({Spec("a", {"m1"}), Spec("b", {}, 3), Spec("c")});
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ(f->spec(0).name, "a");
  EXPECT_EQ(f->spec(1).weight, 3u);
  EXPECT_EQ(f->spec(2).url, "http://c:8080");
  EXPECT_EQ(f->Find("b"), 1u);
  EXPECT_EQ(f->Find("c"), 2u);
  EXPECT_EQ(f->Find("missing"), std::nullopt);
  EXPECT_EQ(f->Find(""), std::nullopt);
  EXPECT_FALSE(f->uniform_weights());
  EXPECT_TRUE(MakeFleet({Spec("a", {}, 5), Spec("b", {}, 5)})->uniform_weights());
}

// The placement seed depends on the instance name only, not on index, URL, weight or serves.
TEST(FleetTest, PlacementSeedDependsOnNameOnly) {
  auto f1 = MakeFleet({Spec("a"), Spec("b")});
  InstanceSpec moved = Spec("a", {"m"}, 7);
  moved.url = "http://elsewhere";
  auto f2 = MakeFleet({Spec("z"), Spec("y"), std::move(moved)});
  EXPECT_EQ(f1->placement_seed(0), f2->placement_seed(2));
  EXPECT_NE(f1->placement_seed(0), f1->placement_seed(1));
}

// ---------------------------------------------------------------------------------------------
// Eligibility.

// The empty name selects every instance, in index order.
TEST(FleetTest, EligibleEmptyNameIsAllInstances) {
  auto f = MakeFleet({Spec("a", {"m1"}), Spec("b", {"m2"}), Spec("c"), Spec("d", {"m1"})});
  EXPECT_EQ(ToVector(f->Eligible("")), (std::vector<uint32_t>{0, 1, 2, 3}));
}

// A served name selects the instances declaring it plus the wildcard (empty serves) ones.
TEST(FleetTest, EligibleNameIsServersPlusWildcards) {
  auto f = MakeFleet(
      {Spec("a", {"m1", "lora-x"}), Spec("b", {"m2"}), Spec("c"), Spec("d", {"m1"}), Spec("e", {"m2", "lora-x"})});
  EXPECT_EQ(ToVector(f->Eligible("m1")), (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_EQ(ToVector(f->Eligible("m2")), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(ToVector(f->Eligible("lora-x")), (std::vector<uint32_t>{0, 2, 4}));
}

// A name nobody declares selects only the wildcard instances, or nothing when there are none.
TEST(FleetTest, EligibleUnknownNameIsWildcardsOnly) {
  auto with_wildcards = MakeFleet({Spec("a", {"m1"}), Spec("b"), Spec("c", {"m2"}), Spec("d")});
  EXPECT_EQ(ToVector(with_wildcards->Eligible("unknown")), (std::vector<uint32_t>{1, 3}));
  auto without = MakeFleet({Spec("a", {"m1"}), Spec("b", {"m2"})});
  EXPECT_TRUE(without->Eligible("unknown").empty());
  EXPECT_EQ(ToVector(without->Eligible("")), (std::vector<uint32_t>{0, 1}));
}

// An empty list marked serves_only_listed serves no name (a discovered instance not polled
// yet), while an unmarked empty list still serves every name; both stay in the default pool.
TEST(FleetTest, EmptyListOnlyListedServesNothing) {
  InstanceSpec none = Spec("b");
  none.serves_only_listed = true;
  InstanceSpec listed = Spec("c", {"m1"});
  listed.serves_only_listed = true;
  auto f = MakeFleet({Spec("a", {"m1"}), none, listed, Spec("d")});
  EXPECT_EQ(ToVector(f->Eligible("m1")), (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_EQ(ToVector(f->Eligible("other")), (std::vector<uint32_t>{3}));
  EXPECT_EQ(ToVector(f->Eligible("")), (std::vector<uint32_t>{0, 1, 2, 3}));
}

// ServedNames lists every declared name once, sorted.
TEST(FleetTest, ServedNamesAreSortedAndUnique) {
  auto f = MakeFleet({Spec("a", {"zeta", "alpha"}), Spec("b"), Spec("c", {"alpha", "mid"})});
  EXPECT_EQ(f->ServedNames(), (std::vector<std::string>{"alpha", "mid", "zeta"}));
}

// ---------------------------------------------------------------------------------------------
// Live state across snapshots.

// A snapshot built from a previous one shares the state of retained instances (by name, at
// any index), so in-flight counts and availability survive; new instances start fresh.
TEST(FleetTest, StateCarriesOverToNextSnapshotByName) {
  auto old_fleet = MakeFleet({Spec("a"), Spec("b"), Spec("c")});
  old_fleet->state(0).in_flight.store(3);
  old_fleet->state(1).available.store(false);
  old_fleet->state(2).in_flight.store(5);

  auto next = MakeFleet({Spec("c"), Spec("d"), Spec("a", {"m"}, 4)}, old_fleet.get());
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->shared_state(2).get(), old_fleet->shared_state(0).get());  // a
  EXPECT_EQ(next->shared_state(0).get(), old_fleet->shared_state(2).get());  // c
  EXPECT_EQ(next->state(2).in_flight.load(), 3);
  EXPECT_EQ(next->state(0).in_flight.load(), 5);
  EXPECT_EQ(next->state(1).in_flight.load(), 0);  // d is new
  EXPECT_TRUE(next->state(1).available.load());
  EXPECT_NE(next->shared_state(1).get(), old_fleet->shared_state(1).get());

  // b was dropped; when it returns via a snapshot that no longer has it, it starts fresh.
  auto again = MakeFleet({Spec("b")}, next.get());
  EXPECT_NE(again->shared_state(0).get(), old_fleet->shared_state(1).get());
  EXPECT_TRUE(again->state(0).available.load());
}

// The states of the instances a snapshot adds sit side by side, whole cache lines each (request
// threads write neighbours), and FindSeed maps seeds to indices.
TEST(FleetTest, NewStatesAreContiguousLinesAndSeedsAreFound) {
  static_assert(sizeof(InstanceState) % 64 == 0);
  auto f1 = MakeFleet({Spec("a"), Spec("b"), Spec("c")});
  for (uint32_t i = 0; i < 3; ++i) {
    const auto addr = reinterpret_cast<uintptr_t>(f1->shared_state(i).get());
    EXPECT_EQ(addr % 64, 0u);
    if (i > 0) {
      EXPECT_EQ(addr - reinterpret_cast<uintptr_t>(f1->shared_state(i - 1).get()), sizeof(InstanceState));
    }
    EXPECT_EQ(f1->FindSeed(f1->placement_seed(i)), i);
  }
  EXPECT_FALSE(f1->FindSeed(f1->placement_seed(0) + 1).has_value());
  // Retained states stay where they were; the added ones come from a new array.
  auto f2 = MakeFleet({Spec("d"), Spec("b"), Spec("e")}, f1.get());
  EXPECT_EQ(f2->shared_state(1).get(), f1->shared_state(1).get());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f2->shared_state(2).get()) -
                reinterpret_cast<uintptr_t>(f2->shared_state(0).get()),
            sizeof(InstanceState));
  EXPECT_EQ(f2->FindSeed(f1->placement_seed(1)), 1u);
  EXPECT_FALSE(f2->FindSeed(f1->placement_seed(0)).has_value());
  // The array outlives the snapshots while one of its states is held.
  std::shared_ptr<InstanceState> kept = f1->shared_state(2);
  f1.reset();
  f2.reset();
  kept->in_flight.store(7);
  EXPECT_EQ(kept->in_flight.load(), 7);
}

// What decisions read of each instance (LiveLoad) is its state's own, kept as one dense array in
// index order for the instances a snapshot creates, and carried with the state to later
// snapshots; a snapshot whose instances came from several arrays, or out of their order, has no
// dense array.
TEST(FleetTest, LiveLoadsAreTheStatesAndDenseWhenCreatedTogether) {
  auto f1 = MakeFleet({Spec("a"), Spec("b"), Spec("c")});
  ASSERT_NE(f1->dense_live(), nullptr);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(&f1->live(i), &f1->state(i).live);
    EXPECT_EQ(&f1->live(i), f1->dense_live() + i);
  }
  f1->state(1).in_flight.store(3);
  f1->state(2).drained.store(true);
  EXPECT_EQ(f1->live(1).in_flight(), 3);
  EXPECT_FALSE(f1->live(2).routable());
  EXPECT_FALSE(f1->state(2).routable());

  auto grown = MakeFleet({Spec("a"), Spec("b"), Spec("c"), Spec("d")}, f1.get());
  EXPECT_EQ(grown->dense_live(), nullptr);  // d's LiveLoad is in another array
  EXPECT_EQ(grown->live(1).in_flight(), 3);
  EXPECT_EQ(&grown->live(1), &f1->live(1));
  EXPECT_EQ(&grown->live(3), &grown->state(3).live);

  auto reordered = MakeFleet({Spec("b"), Spec("a"), Spec("c")}, f1.get());
  EXPECT_EQ(reordered->dense_live(), nullptr);
  auto same = MakeFleet({Spec("a"), Spec("b"), Spec("c")}, f1.get());
  EXPECT_EQ(same->dense_live(), f1->dense_live());
  EXPECT_EQ(same->dense_totals(), f1->dense_totals());
  // c left: a and b are still the array's first two, in order, but the array's totals count c.
  auto fewer = MakeFleet({Spec("a"), Spec("b")}, f1.get());
  EXPECT_EQ(fewer->dense_live(), f1->dense_live());
  EXPECT_EQ(fewer->dense_totals(), nullptr);

  // A state made alone has its own.
  InstanceState alone;
  alone.in_flight.store(5);
  alone.available.store(false);
  EXPECT_EQ(alone.live.in_flight(), 5);
  EXPECT_FALSE(alone.live.routable());
}

// The array's totals move by exactly what each change does, through every way of changing a
// count or a flag: the sum of in-flight counts, how many are negative, how many are unroutable.
TEST(FleetTest, LiveTotalsFollowEveryChange) {
  auto f = MakeFleet({Spec("a"), Spec("b"), Spec("c")});
  const LiveTotals* t = f->dense_totals();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->size, 3u);
  const auto expect = [&](int64_t in_flight, int32_t negative, int32_t unroutable) {
    EXPECT_EQ(t->in_flight.load(), in_flight);
    EXPECT_EQ(t->negative.load(), negative);
    EXPECT_EQ(t->unroutable.load(), unroutable);
  };
  expect(0, 0, 0);
  f->state(0).in_flight.fetch_add(3);
  f->state(1).in_flight.store(2);
  expect(5, 0, 0);
  EXPECT_EQ(f->state(1).in_flight.exchange(-1), 2);
  expect(2, 1, 0);
  f->state(1).in_flight.fetch_add(1);  // -1 -> 0: no longer negative
  f->state(0).in_flight.fetch_sub(4);  // 3 -> -1
  expect(-1, 1, 0);
  f->state(0).in_flight.store(0);
  expect(0, 0, 0);
  f->state(2).available.store(false);
  f->state(2).drained.store(true);  // unroutable already: counted once
  expect(0, 0, 1);
  EXPECT_FALSE(f->state(2).available.exchange(true));  // still drained
  expect(0, 0, 1);
  EXPECT_TRUE(f->state(2).drained.exchange(false));
  expect(0, 0, 0);
  EXPECT_TRUE(f->state(2).routable());
  f->state(2).available.store(true);  // no change
  expect(0, 0, 0);
}

// Without `previous` every instance gets fresh state, even if another snapshot has its name.
TEST(FleetTest, StateIsFreshWithoutPrevious) {
  auto f1 = MakeFleet({Spec("a")});
  f1->state(0).in_flight.store(2);
  auto f2 = MakeFleet({Spec("a")});
  EXPECT_NE(f2->shared_state(0).get(), f1->shared_state(0).get());
  EXPECT_EQ(f2->state(0).in_flight.load(), 0);
}

// A guard taken on an old snapshot releases into the counter the new snapshot reads.
TEST(FleetTest, GuardOnOldSnapshotReleasesIntoNewSnapshot) {
  auto old_fleet = MakeFleet({Spec("a"), Spec("b")});
  auto guard = std::make_unique<InFlightGuard>(old_fleet->shared_state(1));
  auto next = MakeFleet({Spec("b"), Spec("c")}, old_fleet.get());
  EXPECT_EQ(next->state(0).in_flight.load(), 1);
  old_fleet.reset();  // the guard keeps the state alive on its own
  guard.reset();
  EXPECT_EQ(next->state(0).in_flight.load(), 0);
  EXPECT_EQ(next->state(0).dispatched.load(), 1u);
}

// ---------------------------------------------------------------------------------------------
// InFlightGuard.

// A guard counts one request in flight while it lives and gives it back exactly once.
TEST(FleetTest, InFlightGuardCountsWhileAlive) {
  auto state = std::make_shared<InstanceState>();
  {
    InFlightGuard g(state);
    EXPECT_TRUE(g.active());
    EXPECT_EQ(state->in_flight.load(), 1);
    EXPECT_EQ(state->dispatched.load(), 1u);
    InFlightGuard g2(state);
    EXPECT_EQ(state->in_flight.load(), 2);
  }
  EXPECT_EQ(state->in_flight.load(), 0);
  EXPECT_EQ(state->dispatched.load(), 2u);  // dispatched counts requests ever sent
}

// A guard with work counts its prompt tokens while it lives; moves carry them, once.
TEST(FleetTest, InFlightGuardCountsPromptTokens) {
  auto state = std::make_shared<InstanceState>();
  {
    InFlightGuard a(state, 32'000);
    InFlightGuard b(state, 50);
    EXPECT_EQ(state->outstanding_tokens.load(), 32'050);
    InFlightGuard c(std::move(a));
    EXPECT_EQ(state->outstanding_tokens.load(), 32'050);
    c.Release();
    EXPECT_EQ(state->outstanding_tokens.load(), 50);
    InFlightGuard d(state, 7);
    d = std::move(b);  // releases d's 7, takes b's 50
    EXPECT_EQ(state->outstanding_tokens.load(), 50);
    EXPECT_EQ(state->in_flight.load(), 1);
  }
  EXPECT_EQ(state->outstanding_tokens.load(), 0);
  EXPECT_EQ(state->in_flight.load(), 0);
}

// A default guard holds nothing and releases nothing.
TEST(FleetTest, InFlightGuardDefaultIsInactive) {
  InFlightGuard g;
  EXPECT_FALSE(g.active());
  g.Release();
  EXPECT_FALSE(g.active());
}

// Move construction transfers the count: one decrement in total, by the new owner.
TEST(FleetTest, InFlightGuardMoveConstructTransfersCount) {
  auto state = std::make_shared<InstanceState>();
  auto outer = std::make_unique<InFlightGuard>();
  {
    InFlightGuard a(state);
    InFlightGuard b(std::move(a));
    EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): moved-from state is contract
    EXPECT_TRUE(b.active());
    EXPECT_EQ(state->in_flight.load(), 1);
    *outer = std::move(b);
  }
  EXPECT_EQ(state->in_flight.load(), 1);  // the count left the scope with the guard
  outer.reset();
  EXPECT_EQ(state->in_flight.load(), 0);
  EXPECT_EQ(state->dispatched.load(), 1u);
}

// Move assignment releases the target's own count first, then takes over the source's.
TEST(FleetTest, InFlightGuardMoveAssignReleasesOldCount) {
  auto s1 = std::make_shared<InstanceState>();
  auto s2 = std::make_shared<InstanceState>();
  {
    InFlightGuard a(s1);
    InFlightGuard b(s2);
    a = std::move(b);
    EXPECT_EQ(s1->in_flight.load(), 0);
    EXPECT_EQ(s2->in_flight.load(), 1);
    EXPECT_TRUE(a.active());
    EXPECT_FALSE(b.active());  // NOLINT(bugprone-use-after-move)
    // Self-assignment keeps the count.
    InFlightGuard& alias = a;
    a = std::move(alias);
    EXPECT_TRUE(a.active());
    EXPECT_EQ(s2->in_flight.load(), 1);
  }
  EXPECT_EQ(s1->in_flight.load(), 0);
  EXPECT_EQ(s2->in_flight.load(), 0);
}

// Release() gives the count back once; a second Release() and the destructor do nothing.
TEST(FleetTest, InFlightGuardReleaseThenDestructorDecrementsOnce) {
  auto state = std::make_shared<InstanceState>();
  InFlightGuard other(state);  // keeps a second count so a double decrement would show
  {
    InFlightGuard g(state);
    EXPECT_EQ(state->in_flight.load(), 2);
    g.Release();
    EXPECT_FALSE(g.active());
    EXPECT_EQ(state->in_flight.load(), 1);
    g.Release();
    EXPECT_EQ(state->in_flight.load(), 1);
  }
  EXPECT_EQ(state->in_flight.load(), 1);
  other.Release();
  EXPECT_EQ(state->in_flight.load(), 0);
}

// ---------------------------------------------------------------------------------------------
// FleetState.

// Load returns the last stored snapshot; a reader's snapshot stays valid after a swap.
TEST(FleetTest, FleetStateStoreAndLoad) {
  auto first = MakeFleet({Spec("a")});
  FleetState state(first);
  EXPECT_EQ(state.Load(), first);
  std::shared_ptr<const FleetSnapshot> held = state.Load();
  auto second = MakeFleet({Spec("a"), Spec("b")}, first.get());
  state.Store(second);
  EXPECT_EQ(state.Load(), second);
  first.reset();
  ASSERT_EQ(held->size(), 1u);  // the reader still holds the old picture
  EXPECT_EQ(held->spec(0).name, "a");
  EXPECT_EQ(state.Load()->size(), 2u);
}

// Guards taken and released on several threads while snapshots are swapped leave exact counts.
TEST(FleetTest, ConcurrentGuardsAndSwapsKeepCountsExact) {
  auto first = MakeFleet({Spec("a"), Spec("b")});
  FleetState state(first);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&state, t] {
      for (int n = 0; n < 20000; ++n) {
        auto snap = state.Load();
        InFlightGuard g(snap->shared_state((n + t) % snap->size()));
        if (n % 1000 == 0) {
          auto next = FleetSnapshot::Create({Spec("b"), Spec("a")}, snap.get());
          state.Store(*next);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  auto last = state.Load();
  for (uint32_t i = 0; i < last->size(); ++i) {
    EXPECT_EQ(last->state(i).in_flight.load(), 0);
  }
  EXPECT_EQ(last->state(0).dispatched.load() + last->state(1).dispatched.load(), 80000u);
}

}  // namespace
}  // namespace prefix_router
