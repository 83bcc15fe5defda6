#include "sim/sweep.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include "core/peer_policies.h"

namespace prefix_router::sim {
namespace {

// Runs fn(i) for i in [0, n) on up to `jobs` threads; returns the first error by index.
Status ParallelFor(size_t n, unsigned jobs, const std::function<Status(size_t)>& fn) {
  std::vector<Status> statuses(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) statuses[i] = fn(i);
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(n)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

template <typename T>
std::vector<T> OrDefault(const std::vector<T>& v, T fallback) {
  return v.empty() ? std::vector<T>{fallback} : v;
}

}  // namespace

size_t SweepSize(const SweepSpec& spec) {
  return spec.workloads.size() * spec.strategies.size() * std::max<size_t>(1, spec.prefix_lengths.size()) *
         std::max<size_t>(1, spec.thresholds.size()) * std::max<size_t>(1, spec.instances.size()) *
         std::max<size_t>(1, spec.gateways.size()) * spec.seeds.size() * spec.loads.size();
}

Result<std::vector<report::RunResult>> RunSweep(
    const SweepSpec& spec, unsigned jobs,
    const std::function<void(const report::RunResult&, size_t, size_t)>& progress) {
  if (spec.workloads.empty() || spec.strategies.empty() || spec.seeds.empty() || spec.loads.empty()) {
    return Status::InvalidArgument("every swept dimension needs at least one value");
  }
  const auto prefix_lengths = OrDefault(spec.prefix_lengths, spec.base.routing.prefix_length);
  const auto thresholds = OrDefault(spec.thresholds, spec.base.routing.concurrency_threshold);
  const auto instances = OrDefault(spec.instances, spec.base.instances);
  const auto gateways = OrDefault(spec.gateways, spec.base.gateways);
  // Checked here as well as by Simulate, so that a bad count stops the sweep before the
  // saturation runs.
  for (uint32_t g : gateways) {
    if (g < 1 || g > kMaxGateways) {
      return Status::InvalidArgument("gateways: " + std::to_string(g) + " is outside the allowed range 1.." +
                                     std::to_string(kMaxGateways));
    }
  }

  struct Planned {
    SimOptions options;
    double load = 0;
  };
  std::vector<Planned> plan;
  for (const std::string& w : spec.workloads) {
    for (const std::string& strategy : spec.strategies) {
      for (uint32_t pl : prefix_lengths) {
        for (uint32_t th : thresholds) {
          for (uint32_t n : instances) {
            for (uint32_t k : gateways) {
              for (uint64_t seed : spec.seeds) {
                for (double load : spec.loads) {
                  RoutingOptions routing = spec.base.routing;
                  routing.prefix_length = pl;
                  routing.concurrency_threshold = th;
                  auto parsed = ParseStrategyName(strategy, routing);
                  if (!parsed.ok()) return parsed.status();
                  if (Status s = parsed->Validate(); !s.ok()) return s;
                  Planned p{spec.base, load};
                  p.options.workload = w;
                  p.options.routing = *parsed;
                  p.options.strategy_label = strategy + spec.label_suffix;
                  if (IsPeerStrategy(strategy)) p.options.peer = strategy;
                  p.options.instances = n;
                  p.options.gateways = k;
                  p.options.seed = seed;
                  if (spec.load_kind == LoadKind::kConcurrency) {
                    if (!(load >= 1)) return Status::InvalidArgument("concurrency must be >= 1");
                    p.options.arrivals = Arrivals::kClosed;
                    p.options.concurrency = static_cast<uint32_t>(load);
                  } else {
                    if (!(load > 0)) return Status::InvalidArgument("loads must be > 0");
                    p.options.arrivals = Arrivals::kOpen;
                    p.options.rate_rps = load;  // resolved below for percentages
                  }
                  plan.push_back(std::move(p));
                }
              }
            }
          }
        }
      }
    }
  }

  // Saturation throughputs, one per (workload, instances, seed).
  using SatKey = std::tuple<std::string, uint32_t, uint64_t>;
  std::map<SatKey, double> saturation;
  if (spec.load_kind == LoadKind::kPercentOfSaturation) {
    std::vector<SatKey> keys;
    for (const Planned& p : plan) {
      SatKey k{p.options.workload, p.options.instances, p.options.seed};
      if (!saturation.contains(k)) {
        saturation[k] = 0;
        keys.push_back(k);
      }
    }
    std::vector<double> values(keys.size());
    Status s = ParallelFor(keys.size(), jobs, [&](size_t i) -> Status {
      SimOptions o = spec.base;
      o.workload = std::get<0>(keys[i]);
      o.instances = std::get<1>(keys[i]);
      o.seed = std::get<2>(keys[i]);
      auto sat = SaturationThroughput(o, spec.saturation_users_per_instance, spec.saturation_duration_s,
                                      spec.saturation_warmup_s);
      if (!sat.ok()) return sat.status();
      values[i] = *sat;
      return Status::Ok();
    });
    if (!s.ok()) return s;
    for (size_t i = 0; i < keys.size(); ++i) saturation[keys[i]] = values[i];
    for (Planned& p : plan) {
      const double sat = saturation[{p.options.workload, p.options.instances, p.options.seed}];
      p.options.rate_rps = sat * p.load / 100.0;
    }
  }

  std::vector<report::RunResult> results(plan.size());
  std::mutex mu;
  size_t done = 0;
  Status s = ParallelFor(plan.size(), jobs, [&](size_t i) -> Status {
    auto run = Simulate(plan[i].options);
    if (!run.ok()) return run.status();
    report::RunResult r = std::move(run->result);
    if (gateways.size() > 1) r.settings["gateways"] = plan[i].options.gateways;
    if (spec.load_kind == LoadKind::kPercentOfSaturation) {
      r.settings["load_pct"] = plan[i].load;
      r.settings["saturation_rps"] =
          saturation[{plan[i].options.workload, plan[i].options.instances, plan[i].options.seed}];
    }
    std::lock_guard lock(mu);
    results[i] = std::move(r);
    ++done;
    if (progress) progress(results[i], done, plan.size());
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return results;
}

}  // namespace prefix_router::sim
