#include "gateway/rate_limiter.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace prefix_router::gateway {
namespace {

uint64_t RandomSeed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

constexpr double kSlack = 1e-6;

uint64_t BurstOf(uint64_t per_minute, uint64_t burst) { return burst > 0 ? burst : per_minute; }

// Whole seconds until a bucket refilling at `per_minute` gains `deficit`, rounded up (a client
// that waits that long fits), at least 1. The small slack keeps 2.0000000001 (float noise on an
// exact answer) from becoming 3.
uint64_t SecondsToRefill(double deficit, uint64_t per_minute) {
  const double seconds = deficit * 60.0 / static_cast<double>(per_minute);
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(seconds - 1e-6)));
}

uint64_t Floor(double v) { return v <= 0 ? 0 : static_cast<uint64_t>(std::floor(v)); }

}  // namespace

RateLimiter::RateLimiter(Now now, uint32_t shards)
    : now_(now ? std::move(now) : Now([] { return Clock::now(); })), seed_(RandomSeed()) {
  shards_.reserve(std::max<uint32_t>(shards, 1));
  for (uint32_t i = 0; i < std::max<uint32_t>(shards, 1); ++i) shards_.push_back(std::make_unique<Shard>());
  config_.store(std::make_shared<const RateLimitsConfig>());
}

void RateLimiter::Configure(const RateLimitsConfig& config) {
  config_.store(std::make_shared<const RateLimitsConfig>(config));
}

size_t RateLimiter::tenant_count() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    n += shard->index.size();
  }
  return n;
}

RateLimiter::Decision RateLimiter::Admit(std::string_view tenant, uint64_t tokens) {
  const std::shared_ptr<const RateLimitsConfig> config = config_.load();
  const TenantLimits& limits = config->For(tenant);
  Decision d;
  if (!limits.any()) return d;
  const uint64_t rpm = limits.requests_per_minute;
  const uint64_t tpm = limits.tokens_per_minute;
  const double request_burst = static_cast<double>(BurstOf(rpm, limits.request_burst));
  const double token_burst = static_cast<double>(BurstOf(tpm, limits.token_burst));
  d.limit_requests = rpm;
  d.limit_tokens = tpm;
  d.token_burst = tpm > 0 ? BurstOf(tpm, limits.token_burst) : 0;

  const uint64_t id = XXH3_64bits_withSeed(tenant.data(), tenant.size(), seed_);
  Shard& shard = *shards_[id % shards_.size()];
  const size_t capacity = std::max<size_t>(1, config->max_tenants / shards_.size());
  const Clock::time_point now = now_();

  std::lock_guard lock(shard.mu);
  auto found = shard.index.find(id);
  if (found == shard.index.end()) {
    while (shard.index.size() >= capacity) {
      shard.index.erase(shard.lru.back().id);
      shard.lru.pop_back();
    }
    shard.lru.push_front(Entry{id, request_burst, token_burst, now});
    found = shard.index.emplace(id, shard.lru.begin()).first;
  } else if (found->second != shard.lru.begin()) {
    shard.lru.splice(shard.lru.begin(), shard.lru, found->second);
  }
  Entry& e = *found->second;

  // Refill for the time since the last visit (a clock that went back adds nothing); a lower
  // burst set by a reload caps what the bucket held.
  const double elapsed = std::max(0.0, std::chrono::duration<double>(now - e.last).count());
  e.last = std::max(e.last, now);
  if (rpm > 0) e.requests = std::min(request_burst, e.requests + elapsed * static_cast<double>(rpm) / 60.0);
  if (tpm > 0) e.tokens = std::min(token_burst, e.tokens + elapsed * static_cast<double>(tpm) / 60.0);

  const auto need = static_cast<double>(tokens);
  if (tpm > 0 && need > token_burst) {
    d.verdict = Verdict::kTooLarge;
  } else {
    // The slack absorbs rounding in the refill sums (0.95 + 0.05 must make a whole request).
    const bool requests_short = rpm > 0 && e.requests < 1.0 - kSlack;
    const bool tokens_short = tpm > 0 && e.tokens < need - kSlack;
    const uint64_t wait_requests = requests_short ? SecondsToRefill(1.0 - e.requests, rpm) : 0;
    const uint64_t wait_tokens = tokens_short ? SecondsToRefill(need - e.tokens, tpm) : 0;
    if (requests_short || tokens_short) {
      // Both may be short: the one that takes longer to refill is the one that binds.
      d.verdict = wait_requests >= wait_tokens ? Verdict::kRequests : Verdict::kTokens;
      d.retry_after_seconds = std::max(wait_requests, wait_tokens);
    } else {
      if (rpm > 0) e.requests = std::max(0.0, e.requests - 1.0);
      if (tpm > 0) e.tokens = std::max(0.0, e.tokens - need);
    }
  }
  d.remaining_requests = rpm > 0 ? Floor(e.requests) : 0;
  d.remaining_tokens = tpm > 0 ? Floor(e.tokens) : 0;
  return d;
}

}  // namespace prefix_router::gateway
