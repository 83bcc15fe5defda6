#include "gateway/rate_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "api/request.h"

namespace prefix_router::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Verdict = RateLimiter::Verdict;

RateLimitsConfig Limits(uint64_t rpm, uint64_t request_burst, uint64_t tpm = 0, uint64_t token_burst = 0) {
  RateLimitsConfig c;
  c.defaults.requests_per_minute = rpm;
  c.defaults.request_burst = request_burst;
  c.defaults.tokens_per_minute = tpm;
  c.defaults.token_burst = token_burst;
  return c;
}

int AdmitAll(RateLimiter& limiter, std::string_view tenant, int tries, uint64_t tokens = 1) {
  int admitted = 0;
  for (int i = 0; i < tries; ++i) admitted += limiter.Admit(tenant, tokens).admitted();
  return admitted;
}

// Without limits everything passes and no tenant is remembered.
TEST(RateLimiterTest, NoLimitsAdmitsEverythingAndRemembersNothing) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  EXPECT_FALSE(limiter.enabled());
  EXPECT_EQ(AdmitAll(limiter, "a", 1000, 1'000'000), 1000);
  EXPECT_EQ(limiter.tenant_count(), 0u);
}

// A new tenant starts with a full bucket (the burst); then it refills at per_minute / 60 a second.
TEST(RateLimiterTest, BurstThenRefillAtTheRate) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(60, 10));
  EXPECT_EQ(AdmitAll(limiter, "a", 20), 10);
  clock.Advance(seconds(1));
  EXPECT_EQ(AdmitAll(limiter, "a", 5), 1);
  clock.Advance(seconds(3));
  EXPECT_EQ(AdmitAll(limiter, "a", 5), 3);
}

// The bucket never holds more than the burst, however long the tenant was idle; burst 0 is one
// minute's worth.
TEST(RateLimiterTest, IdleTimeFillsOnlyUpToTheBurst) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(600, 5));
  EXPECT_EQ(AdmitAll(limiter, "a", 10), 5);
  clock.Advance(std::chrono::hours(5));
  EXPECT_EQ(AdmitAll(limiter, "a", 10), 5);

  limiter.Configure(Limits(30, 0));
  EXPECT_EQ(AdmitAll(limiter, "fresh", 100), 30);
}

// Retry-After is the time until the request fits, in whole seconds rounded up, at least 1.
TEST(RateLimiterTest, RetryAfterIsWholeSecondsRoundedUp) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(7, 1));  // one request every 60/7 = 8.57 s
  ASSERT_TRUE(limiter.Admit("a", 1).admitted());
  RateLimiter::Decision d = limiter.Admit("a", 1);
  EXPECT_EQ(d.verdict, Verdict::kRequests);
  EXPECT_EQ(d.retry_after_seconds, 9u);
  clock.Advance(seconds(3));
  EXPECT_EQ(limiter.Admit("a", 1).retry_after_seconds, 6u);  // 5.57 s to go
  clock.Advance(milliseconds(5500));
  EXPECT_EQ(limiter.Admit("a", 1).retry_after_seconds, 1u);  // 0.07 s to go: still 1
  clock.Advance(milliseconds(100));
  EXPECT_TRUE(limiter.Admit("a", 1).admitted());

  // An exact refill time is not rounded past itself.
  limiter.Configure(Limits(60, 1));
  ASSERT_TRUE(limiter.Admit("b", 1).admitted());
  EXPECT_EQ(limiter.Admit("b", 1).retry_after_seconds, 1u);
  clock.Advance(seconds(1));
  EXPECT_TRUE(limiter.Admit("b", 1).admitted());
}

// Each limit refuses on its own, and the refusal says which; the wait is computed from the
// limit that binds.
TEST(RateLimiterTest, TokenLimitAndRequestLimitAreSeparate) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(100, 0, 1000, 0));
  ASSERT_TRUE(limiter.Admit("a", 600).admitted());
  RateLimiter::Decision d = limiter.Admit("a", 600);
  EXPECT_EQ(d.verdict, Verdict::kTokens);
  EXPECT_EQ(d.retry_after_seconds, 12u);  // 200 tokens short at 1000/60 a second
  EXPECT_EQ(d.remaining_tokens, 400u);
  EXPECT_TRUE(limiter.Admit("a", 300).admitted()) << "a smaller request still fits";

  limiter.Configure(Limits(2, 0, 1'000'000, 0));
  EXPECT_EQ(AdmitAll(limiter, "b", 2, 10), 2);
  d = limiter.Admit("b", 10);
  EXPECT_EQ(d.verdict, Verdict::kRequests);
  EXPECT_EQ(d.retry_after_seconds, 30u);
  EXPECT_EQ(d.remaining_requests, 0u);
  EXPECT_EQ(d.limit_requests, 2u);
  EXPECT_EQ(d.limit_tokens, 1'000'000u);
}

// When both buckets are short, the verdict names the one that takes longer to refill.
TEST(RateLimiterTest, BothShortReportsTheLongerWait) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(1, 1, 600, 600));  // a request a minute; 10 tokens a second
  ASSERT_TRUE(limiter.Admit("a", 600).admitted());
  RateLimiter::Decision d = limiter.Admit("a", 10);  // requests: 60 s; tokens: 1 s
  EXPECT_EQ(d.verdict, Verdict::kRequests);
  EXPECT_EQ(d.retry_after_seconds, 60u);

  limiter.Configure(Limits(60, 1, 60, 60));  // a request a second; 1 token a second
  ASSERT_TRUE(limiter.Admit("b", 60).admitted());
  d = limiter.Admit("b", 30);  // requests: 1 s; tokens: 30 s
  EXPECT_EQ(d.verdict, Verdict::kTokens);
  EXPECT_EQ(d.retry_after_seconds, 30u);
}

// A refused request takes nothing from either bucket.
TEST(RateLimiterTest, RefusalCostsNothing) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(2, 2, 100, 100));
  ASSERT_TRUE(limiter.Admit("a", 80).admitted());
  EXPECT_EQ(limiter.Admit("a", 80).verdict, Verdict::kTokens);
  EXPECT_EQ(limiter.Admit("a", 80).verdict, Verdict::kTokens);
  RateLimiter::Decision d = limiter.Admit("a", 20);
  EXPECT_TRUE(d.admitted()) << "the refusals took neither a request nor tokens";
  EXPECT_EQ(d.remaining_requests, 0u);
  EXPECT_EQ(d.remaining_tokens, 0u);
}

// A request estimated above the token burst can never fit: refused as such, full bucket or not.
TEST(RateLimiterTest, RequestLargerThanTheTokenBurstIsTooLarge) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(0, 0, 1000, 500));
  RateLimiter::Decision d = limiter.Admit("a", 501);
  EXPECT_EQ(d.verdict, Verdict::kTooLarge);
  EXPECT_EQ(d.token_burst, 500u);
  EXPECT_EQ(d.remaining_tokens, 500u) << "nothing was taken";
  clock.Advance(std::chrono::hours(1));
  EXPECT_EQ(limiter.Admit("a", 501).verdict, Verdict::kTooLarge);
  EXPECT_TRUE(limiter.Admit("a", 500).admitted());
}

// Tenants have buckets of their own; overrides replace the defaults for the tenant named, and
// 0 there means no limit.
TEST(RateLimiterTest, TenantsAreIsolatedAndOverridesApply) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  RateLimitsConfig c = Limits(60, 1);
  c.tenants["vip"] = TenantLimits{60, 3, 0, 0};
  c.tenants["internal"] = TenantLimits{};
  limiter.Configure(c);
  EXPECT_EQ(AdmitAll(limiter, "a", 5), 1);
  EXPECT_EQ(AdmitAll(limiter, "b", 5), 1) << "a's empty bucket is not b's";
  EXPECT_EQ(AdmitAll(limiter, "vip", 5), 3);
  EXPECT_EQ(AdmitAll(limiter, "internal", 500), 500);
  EXPECT_EQ(limiter.Admit("internal", 1).limit_requests, 0u);
  EXPECT_EQ(limiter.tenant_count(), 3u) << "an unlimited tenant takes no entry";
}

// The table keeps at most max_tenants; the least recently seen is forgotten and comes back with
// a full bucket.
TEST(RateLimiterTest, LeastRecentlySeenTenantIsForgotten) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow(), /*shards=*/1);
  RateLimitsConfig c = Limits(1, 1);
  c.max_tenants = 16;
  limiter.Configure(c);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(limiter.Admit("t" + std::to_string(i), 1).admitted());
  EXPECT_EQ(limiter.tenant_count(), 16u);
  EXPECT_FALSE(limiter.Admit("t0", 1).admitted());  // t0 is now the most recently seen
  ASSERT_TRUE(limiter.Admit("t16", 1).admitted());  // makes room: forgets t1
  EXPECT_EQ(limiter.tenant_count(), 16u);
  EXPECT_FALSE(limiter.Admit("t0", 1).admitted()) << "t0 was remembered";
  EXPECT_TRUE(limiter.Admit("t1", 1).admitted()) << "t1 was forgotten: a full bucket again";
  EXPECT_FALSE(limiter.Admit("t16", 1).admitted());
}

// With the default shards the bound holds too, whatever the number of names seen.
TEST(RateLimiterTest, TableStaysBoundedUnderManyTenants) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  RateLimitsConfig c = Limits(10, 0);
  c.max_tenants = 1024;
  limiter.Configure(c);
  for (int i = 0; i < 50'000; ++i) limiter.Admit("group-" + std::to_string(i), 1);
  EXPECT_LE(limiter.tenant_count(), 1024u);
  EXPECT_GE(limiter.tenant_count(), 1024u - 16u);
}

// A reload keeps the buckets; a lower burst caps what they hold.
TEST(RateLimiterTest, ReconfigureKeepsBucketsAndCapsToANewBurst) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(60, 60));
  EXPECT_EQ(AdmitAll(limiter, "a", 10), 10);  // 50 left
  limiter.Configure(Limits(60, 60));
  EXPECT_EQ(limiter.Admit("a", 1).remaining_requests, 49u) << "the bucket carried over";
  limiter.Configure(Limits(60, 20));
  EXPECT_EQ(AdmitAll(limiter, "a", 100), 20);
}

// A clock that steps back adds nothing to a bucket.
TEST(RateLimiterTest, ClockGoingBackAddsNothing) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(60, 1));
  ASSERT_TRUE(limiter.Admit("a", 1).admitted());
  clock.Advance(-seconds(30));
  EXPECT_FALSE(limiter.Admit("a", 1).admitted());
  clock.Advance(seconds(30));
  EXPECT_FALSE(limiter.Admit("a", 1).admitted()) << "time only counts from the last refill";
  clock.Advance(seconds(1));
  EXPECT_TRUE(limiter.Admit("a", 1).admitted());
}

// Concurrent callers never admit more than the bucket holds.
TEST(RateLimiterTest, ConcurrentAdmissionsNeverOvershoot) {
  ManualClock clock;
  RateLimiter limiter(clock.AsNow());
  limiter.Configure(Limits(100, 100));
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) admitted += limiter.Admit("shared", 1).admitted();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 100);
}

// The estimate: body bytes / 4, rounded up.
TEST(RateLimiterTest, PromptTokenEstimate) {
  EXPECT_EQ(api::EstimatePromptTokens(0), 0u);
  EXPECT_EQ(api::EstimatePromptTokens(1), 1u);
  EXPECT_EQ(api::EstimatePromptTokens(4), 1u);
  EXPECT_EQ(api::EstimatePromptTokens(4001), 1001u);
}

}  // namespace
}  // namespace prefix_router::gateway
