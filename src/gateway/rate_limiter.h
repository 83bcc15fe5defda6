// RateLimiter: per-tenant token buckets on requests and on estimated prompt tokens
// (config rate_limits; docs/limits.md).
//
// Each tenant has two buckets, one counting requests and one counting prompt tokens. A bucket
// holds at most its burst, starts full and refills continuously at per_minute / 60 a second
// (the classic token bucket, as in Envoy's local rate limit and the OpenAI API's RPM/TPM
// limits). A request is admitted when every limited bucket holds what it needs (one request;
// its estimated tokens), and only then takes it from both: a refused request costs nothing.
// A refusal says which limit bound and when the request would fit (Retry-After, whole seconds
// rounded up); a request estimated above the token burst can never fit and is refused as such.
//
// Memory is bounded: tenants may be named by clients (routing groups), so the table keeps at
// most max_tenants of them, split over shards by a seeded hash of the name, each shard
// forgetting its least recently seen tenant to make room. A forgotten tenant comes back with
// full buckets, which is what a tenant idle long enough to be forgotten would have anyway.
// Entries hold a 64-bit hash of the name, not the name (~150 bytes a tenant with the list and
// hash nodes: ~10 MB for 65,536); two names share buckets only if their seeded hashes collide.
//
// Time comes from an injected clock (tests and simulations step a ManualClock).
//
// Thread-safety: Admit may be called from any thread; each shard has its own mutex, held for a
// hash lookup and a few arithmetic operations. Configure swaps the limits atomically; buckets
// (and what they hold, capped to a lower new burst) carry over.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/config.h"

namespace prefix_router::gateway {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  enum class Verdict {
    kAdmitted,
    kRequests,  // the requests bucket is empty
    kTokens,    // the tokens bucket holds fewer than the request's tokens
    kTooLarge,  // the request's tokens exceed the token burst: it can never be admitted
  };

  struct Decision {
    Verdict verdict = Verdict::kAdmitted;
    uint64_t retry_after_seconds = 0;  // kRequests, kTokens: when it would fit, at least 1
    // The tenant's limits and what its buckets hold after this decision (rounded down), for
    // the x-ratelimit-* headers; a limit of 0 is no limit (its remaining is then 0).
    uint64_t limit_requests = 0;
    uint64_t limit_tokens = 0;
    uint64_t token_burst = 0;
    uint64_t remaining_requests = 0;
    uint64_t remaining_tokens = 0;
    bool admitted() const { return verdict == Verdict::kAdmitted; }
  };

  // `now` defaults to the steady clock. REQUIRES: shards >= 1.
  explicit RateLimiter(Now now = {}, uint32_t shards = 16);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // REQUIRES: the limits passed validation (ValidateConfig).
  void Configure(const RateLimitsConfig& config);
  // True when some tenant has a limit (otherwise Admit admits everything at once).
  bool enabled() const { return config_.load()->enabled(); }

  // Asks to admit one request of `tokens` estimated prompt tokens for `tenant`.
  Decision Admit(std::string_view tenant, uint64_t tokens);

  // Tenants remembered now (at most max_tenants, rounded down to a multiple of the shards).
  size_t tenant_count() const;

 private:
  struct Entry {
    uint64_t id;      // seeded hash of the tenant's name
    double requests;  // what each bucket holds
    double tokens;
    Clock::time_point last;  // when they were last refilled
  };
  struct Shard {
    mutable std::mutex mu;
    std::list<Entry> lru;  // most recently seen first
    std::unordered_map<uint64_t, std::list<Entry>::iterator> index;
  };

  Now now_;
  const uint64_t seed_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<std::shared_ptr<const RateLimitsConfig>> config_;
};

// The prompt tokens a request is charged: api::EstimatePromptTokens (api/request.h), body bytes
// / 4 rounded up. The keyed text stops at prefix_length, so it cannot measure a long prompt; the
// body holds all of it and needs no parsing.

// A clock that moves only when told; safe to read from any thread.
class ManualClock {
 public:
  RateLimiter::Clock::time_point Now() const {
    return RateLimiter::Clock::time_point(RateLimiter::Clock::duration(ticks_.load()));
  }
  void Advance(RateLimiter::Clock::duration d) { ticks_.fetch_add(d.count()); }
  RateLimiter::Now AsNow() const {
    return [this] { return Now(); };
  }

 private:
  // Far from the epoch, as a steady clock would be.
  std::atomic<RateLimiter::Clock::rep> ticks_{
      std::chrono::duration_cast<RateLimiter::Clock::duration>(std::chrono::hours(1000)).count()};
};

}  // namespace prefix_router::gateway
