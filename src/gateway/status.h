// The numbers behind the live status page (GET /status and /status.json on the admin listener;
// docs/status.md): per-instance counters that the request path bumps with relaxed atomics, a
// bounded window of recent time-to-first-byte samples per instance, and a bounded series of
// request counts sampled every 10 s, from which the page draws requests/s and each instance's
// share over the last five minutes. In the spirit of HAProxy's stats page: what an operator
// looks at first when a fleet misbehaves, without a Prometheus at hand.
//
// Memory is bounded whatever the traffic: a TtftWindow holds an instance's last 256 first-byte
// times (percentiles over those of the last 60 s); a RequestSeries holds the last 31 samples
// (30 buckets of 10 s). Nothing here is keyed by client input: ModelStats is keyed by the
// `model` metric label (a known served name or "other") and holds at most kMaxModels entries.
//
// Measured hit rate: every response the gateway relays is scanned for its `usage`
// (api/response_usage.h) and its prompt, cached and completion tokens are added to its
// instance's and its model's TokenCounts. Each RequestSeries sample records those cumulative
// counts, and the engines' own prefix-cache counters (vllm:prefix_cache_hits_total and
// vllm:prefix_cache_queries_total, scraped by the engine-metrics loop), so the page shows both
// hit rates over the last five minutes: the difference of the newest and the oldest sample,
// not a lifetime average that a long quiet history would freeze.
//
// Thread-safety: InstanceStats and TtftWindow are written lock-free from any I/O thread and read
// by the status handler without stopping writers (a read may miss a sample being written).
// RequestSeries has a mutex, taken only by the sampler (every 10 s) and the status handler,
// never on the request path.
#pragma once

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/response_usage.h"
#include "core/policy.h"

namespace prefix_router::gateway {

class Gateway;
using StatusClock = std::chrono::steady_clock;

inline constexpr size_t kDecisionKindCount = static_cast<size_t>(DecisionKind::kRoundRobin) + 1;

// The last kCapacity time-to-first-byte samples of one instance, each stamped with the second
// it was taken in. Percentiles count only the samples of the last kWindow: a quiet instance's
// old numbers fade out instead of standing for its present.
class TtftWindow {
 public:
  static constexpr size_t kCapacity = 256;
  static constexpr std::chrono::seconds kWindow{60};

  struct Percentiles {
    uint32_t samples = 0;  // within the window (0: p50 and p90 mean nothing)
    double p50 = 0;        // seconds, nearest rank
    double p90 = 0;
  };

  TtftWindow() = default;
  TtftWindow(const TtftWindow&) = delete;
  TtftWindow& operator=(const TtftWindow&) = delete;

  // Lock-free; overwrites the oldest sample once full. Values are kept to the microsecond and
  // clamped to [0, 4294 s].
  void Add(StatusClock::time_point now, double seconds);
  Percentiles Recent(StatusClock::time_point now) const;

 private:
  // (second of the sample + 1) << 32 | microseconds; 0 = never written.
  std::array<std::atomic<uint64_t>, kCapacity> slots_{};
  std::atomic<uint64_t> next_{0};
};

// Token usage of the responses relayed, cumulative, lock-free (relaxed atomics).
struct TokenCounts {
  TokenCounts() = default;
  TokenCounts(const TokenCounts&) = delete;
  TokenCounts& operator=(const TokenCounts&) = delete;

  // One response's usage; a response without usage counts only in without_usage. Cached
  // tokens beyond the prompt's (a broken engine) count as the prompt's.
  void Add(const api::ResponseUsage& u) {
    if (!u.present) {
      without_usage.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    with_usage.fetch_add(1, std::memory_order_relaxed);
    if (u.cached_present) cached_reported.fetch_add(1, std::memory_order_relaxed);
    prompt.fetch_add(u.prompt_tokens, std::memory_order_relaxed);
    cached.fetch_add(std::min(u.cached_tokens, u.prompt_tokens), std::memory_order_relaxed);
    completion.fetch_add(u.completion_tokens, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> prompt{0};  // prompt tokens, cached ones included
  std::atomic<uint64_t> cached{0};  // of which the engine served from its prefix cache
  std::atomic<uint64_t> completion{0};
  std::atomic<uint64_t> with_usage{0};       // responses that carried usage
  std::atomic<uint64_t> without_usage{0};    // ... that did not (a stream without include_usage)
  std::atomic<uint64_t> cached_reported{0};  // with usage and a cached-token count in it
};

// What the status page counts per instance beyond the core's InstanceState (in-flight and
// dispatched counts, availability, drain). Shared by every RoutingState that keeps the
// instance, like its InstanceState.
struct InstanceStats {
  InstanceStats() = default;
  InstanceStats(const InstanceStats&) = delete;
  InstanceStats& operator=(const InstanceStats&) = delete;

  void CountDecision(DecisionKind kind) {
    decisions[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t Decisions(DecisionKind kind) const {
    return decisions[static_cast<size_t>(kind)].load(std::memory_order_relaxed);
  }

  std::array<std::atomic<uint64_t>, kDecisionKindCount> decisions{};  // by DecisionKind
  std::atomic<uint64_t> upstream_errors{0};  // every failed attempt (prefix_router_upstream_errors_total)
  TtftWindow first_byte;
  TokenCounts tokens;
  // The engine's own prefix-cache counters (tokens) as last scraped; NaN until a scrape read
  // them, and again after a failed scrape.
  std::atomic<double> engine_prefix_hits{std::numeric_limits<double>::quiet_NaN()};
  std::atomic<double> engine_prefix_queries{std::numeric_limits<double>::quiet_NaN()};
  // ... as the first scrape read them: the engine's window starts there until a series sample
  // has its counters (RequestSeries::Growth).
  std::atomic<double> engine_prefix_hits_first{std::numeric_limits<double>::quiet_NaN()};
  std::atomic<double> engine_prefix_queries_first{std::numeric_limits<double>::quiet_NaN()};
};

// Tokens and first-byte times per model (by the `model` metric label: a served name the
// gateway knows, else "other"). Entries are created on first use and never removed; beyond
// kMaxModels the rest count under "other". For() takes a mutex (once per response, like the
// metric families' WithLabels); the counts it returns are updated lock-free.
class ModelStats {
 public:
  static constexpr size_t kMaxModels = 256;
  struct Entry {
    TokenCounts tokens;
    TtftWindow first_byte;
  };

  ModelStats() = default;
  ModelStats(const ModelStats&) = delete;
  ModelStats& operator=(const ModelStats&) = delete;

  Entry& For(std::string_view model);
  // Every model's entry, by name (entries live as long as this object).
  std::vector<std::pair<std::string, const Entry*>> All() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> entries_;  // guarded by mu_
};

// Cumulative request counts per instance, sampled every kInterval; the differences between
// consecutive samples are the buckets the page charts. Holds at most kBuckets + 1 samples.
class RequestSeries {
 public:
  static constexpr std::chrono::seconds kInterval{10};
  static constexpr size_t kBuckets = 30;  // 5 minutes

  struct Count {
    std::string instance;   // the key: an instance's name (a model's, in the models' series)
    uint64_t requests = 0;  // cumulative (InstanceState::dispatched; responses for a model)
    // Cumulative TokenCounts.
    uint64_t prompt_tokens = 0;
    uint64_t cached_tokens = 0;
    uint64_t completion_tokens = 0;
    uint64_t with_usage = 0;
    uint64_t without_usage = 0;
    // The engine's prefix-cache counters as last scraped (NaN: not known then).
    double engine_hits = std::numeric_limits<double>::quiet_NaN();
    double engine_queries = std::numeric_limits<double>::quiet_NaN();
    // The engine's counters at their first scrape (InstanceStats::engine_prefix_*_first).
    double engine_hits_first = std::numeric_limits<double>::quiet_NaN();
    double engine_queries_first = std::numeric_limits<double>::quiet_NaN();
  };
  struct Bucket {
    double ended_ago = 0;               // seconds before `now` that the bucket ended (0: the current one)
    double seconds = 0;                 // its length
    uint64_t total = 0;                 // requests of every instance in it
    std::vector<uint64_t> by_instance;  // parallel to the `current` list given to Buckets()
    bool partial = false;               // the bucket still filling: from the last sample to `now`
  };

  RequestSeries() = default;
  RequestSeries(const RequestSeries&) = delete;
  RequestSeries& operator=(const RequestSeries&) = delete;

  // Records every instance's cumulative count at `now`; drops the oldest sample beyond
  // kBuckets + 1. REQUIRES: `now` no earlier than the previous sample's.
  void Sample(StatusClock::time_point now, std::vector<Count> counts);
  // The completed buckets, oldest first, then the partial one from the last sample to `now`
  // (counted from `current`). An instance absent from a sample counts from 0 (it was added);
  // a count that went down (removed and added again) counts as 0.
  std::vector<Bucket> Buckets(StatusClock::time_point now, const std::vector<Count>& current) const;
  // What each of `current` grew by since the oldest sample (at most kBuckets * kInterval old),
  // parallel to `current`; `*seconds` receives the span (0 with no sample). A key absent from
  // that sample counts from 0. The engine counters count from the oldest sample that has them,
  // else from their first scrape (`current`'s engine_*_first; NaN when neither is known); one
  // that went down (the engine restarted) counts from 0, as Prometheus's increase() does.
  std::vector<Count> Growth(StatusClock::time_point now, const std::vector<Count>& current, double* seconds) const;
  size_t samples() const;

 private:
  struct Point {
    StatusClock::time_point at;
    std::vector<Count> counts;  // sorted by instance
  };
  mutable std::mutex mu_;
  std::deque<Point> points_;  // guarded by mu_; oldest first
};

// The document GET /status.json answers; docs/status.md describes every field.
boost::json::object StatusJson(const Gateway& gateway, StatusClock::time_point now);

// Appends `value` as JSON text with doubles in their shortest round-trip decimal form.
void AppendReadableJson(std::string& out, const boost::json::value& value);

// The page GET /status answers: self-contained HTML (inline CSS and script, no external
// resource) that fetches status.json every 2 s. Generated from gateway/status_page.html.
std::string_view StatusPageHtml();

}  // namespace prefix_router::gateway
