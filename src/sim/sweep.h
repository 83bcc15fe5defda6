// Sweeps: many simulations from one command. A SweepSpec lists values per dimension
// (workloads, strategies, prefix lengths, concurrency thresholds, fleet sizes, gateway counts,
// seeds, loads);
// RunSweep runs their cartesian product on `jobs` threads and returns one RunResult per
// combination, in a stable order (the nesting order of the fields below).
//
// Loads given as a percentage of random routing's saturation throughput are resolved first:
// one SaturationThroughput run per (workload, fleet size, seed), shared by every run with those
// values; each result records settings.load_pct, settings.saturation_rps and settings.rate_rps.
// The saturation does not depend on the gateway count: runs with 1 and 4 gateways at one
// load_pct are offered the same rate. When more than one gateway count is swept, every result
// records settings.gateways (1 included), so that rows differing only in it stay apart.
//
// Thread-safety: RunSweep starts and joins its own threads; `progress` is called from them
// under a lock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/simulator.h"

namespace prefix_router::sim {

enum class LoadKind { kPercentOfSaturation, kRate, kConcurrency };

struct SweepSpec {
  SimOptions base;  // everything not swept (profile, duration, warm-up, events, params, ...)
  std::vector<std::string> workloads{"long-context"};
  std::vector<std::string> strategies{std::string(StrategyName(Strategy::kRandom)),
                                      std::string(StrategyName(Strategy::kPrefixAware))};
  std::vector<uint32_t> prefix_lengths;  // empty = base.routing.prefix_length
  std::vector<uint32_t> thresholds;      // empty = base.routing.concurrency_threshold
  std::vector<uint32_t> instances;       // empty = base.instances
  std::vector<uint32_t> gateways;        // empty = base.gateways
  std::vector<uint64_t> seeds{1};
  LoadKind load_kind = LoadKind::kPercentOfSaturation;
  std::vector<double> loads{70};
  // Appended to every run's strategy label in the results ("+canonical": runs of one strategy
  // made by separate commands with other settings, read side by side by `prefix-router report`).
  std::string label_suffix;
  // Saturation measurement (LoadKind::kPercentOfSaturation).
  uint32_t saturation_users_per_instance = 32;
  double saturation_duration_s = 900;
  double saturation_warmup_s = 300;
};

// Number of simulations RunSweep would run (saturation runs excluded).
size_t SweepSize(const SweepSpec& spec);

// InvalidArgument for an empty dimension or a bad strategy name, before anything runs; any
// run's error stops the sweep.
Result<std::vector<report::RunResult>> RunSweep(
    const SweepSpec& spec, unsigned jobs,
    const std::function<void(const report::RunResult&, size_t done, size_t total)>& progress = {});

}  // namespace prefix_router::sim
