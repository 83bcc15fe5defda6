// The numbers behind the live status page (GET /status and /status.json on the admin listener;
// docs/status.md): per-instance counters that the request path bumps with relaxed atomics, a
// bounded window of recent time-to-first-byte samples per instance, and a bounded series of
// request counts sampled every 10 s, from which the page draws requests/s and each instance's
// share over the last five minutes. In the spirit of HAProxy's stats page: what an operator
// looks at first when a fleet misbehaves, without a Prometheus at hand.
//
// Memory is bounded whatever the traffic: a TtftWindow holds an instance's last 256 first-byte
// times (percentiles over those of the last 60 s); a RequestSeries holds the last 31 samples
// (30 buckets of 10 s). Nothing here is keyed by client input.
//
// Thread-safety: InstanceStats and TtftWindow are written lock-free from any I/O thread and read
// by the status handler without stopping writers (a read may miss a sample being written).
// RequestSeries has a mutex, taken only by the sampler (every 10 s) and the status handler,
// never on the request path.
#pragma once

#include <boost/json.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

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
};

// Cumulative request counts per instance, sampled every kInterval; the differences between
// consecutive samples are the buckets the page charts. Holds at most kBuckets + 1 samples.
class RequestSeries {
 public:
  static constexpr std::chrono::seconds kInterval{10};
  static constexpr size_t kBuckets = 30;  // 5 minutes

  struct Count {
    std::string instance;
    uint64_t requests = 0;  // cumulative (InstanceState::dispatched)
  };
  struct Bucket {
    double ended_ago = 0;   // seconds before `now` that the bucket ended (0: the current one)
    double seconds = 0;     // its length
    uint64_t total = 0;     // requests of every instance in it
    std::vector<uint64_t> by_instance;  // parallel to the `current` list given to Buckets()
    bool partial = false;   // the bucket still filling: from the last sample to `now`
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
