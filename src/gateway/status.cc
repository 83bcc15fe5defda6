#include "gateway/status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gateway/gateway.h"
#include "gateway/status_page.h"  // generated from status_page.html (src/CMakeLists.txt)

namespace prefix_router::gateway {
namespace {

namespace json = boost::json;

int64_t SecondOf(StatusClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

double Seconds(StatusClock::duration d) { return std::chrono::duration<double>(d).count(); }

// Nearest rank: the smallest sample with at least p of the samples at or below it.
double Percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

// Milliseconds with three decimals: enough for the page, short in JSON.
double Ms(double seconds) { return std::round(seconds * 1e6) / 1e3; }

const RequestSeries::Count* FindCount(const std::vector<RequestSeries::Count>& sorted, std::string_view name) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), name,
                             [](const RequestSeries::Count& c, std::string_view n) { return c.instance < n; });
  return it != sorted.end() && it->instance == name ? &*it : nullptr;
}

uint64_t Delta(const std::vector<RequestSeries::Count>& before, const RequestSeries::Count& now) {
  const RequestSeries::Count* was = FindCount(before, now.instance);
  const uint64_t base = was ? was->requests : 0;
  return now.requests >= base ? now.requests - base : 0;
}

std::vector<RequestSeries::Count> CurrentCounts(const RoutingState& rs) {
  std::vector<RequestSeries::Count> out;
  out.reserve(rs.fleet->size());
  for (uint32_t i = 0; i < rs.fleet->size(); ++i) {
    out.push_back({rs.fleet->spec(i).name, rs.fleet->state(i).dispatched.load(std::memory_order_relaxed)});
  }
  return out;
}

json::object PoolJson(std::string_view name, const Pool& pool, size_t instances) {
  const RoutingOptions& o = pool.options;
  json::object out{{"name", name},
                   {"strategy", StrategyName(o.strategy)},
                   {"instances", instances},
                   {"in_flight", pool.in_flight->load(std::memory_order_relaxed)},
                   {"max_in_flight", o.max_in_flight}};
  // The prefix-aware settings mean nothing to the other strategies (which also ignore them).
  if (o.strategy == Strategy::kPrefixAware) {
    out["prefix_length"] = o.prefix_length;
    out["concurrency_threshold"] = o.concurrency_threshold;
    out["spill_mode"] = SpillModeName(o.spill);
    out["balance_factor"] = o.balance_factor;
  }
  if (UsesBlockChain(o.strategy) || UsesKvEvents(o.strategy)) {
    out["concurrency_threshold"] = o.concurrency_threshold;
    out["block_bytes"] = o.cache_aware.block_bytes;
    out["capacity_blocks"] = o.cache_aware.capacity_blocks;
    out["load_weight"] = o.cache_aware.load_weight;
  }
  if (o.strategy == Strategy::kPrefixAware || o.strategy == Strategy::kLeastOutstanding) {
    out["load_measure"] = LoadMeasureName(o.load_measure);
  }
  return out;
}

// The pools whose requests an instance can take: every pool when it serves every name, else
// the pool of each name it serves (the default pool for a name without one).
std::vector<std::pair<std::string_view, const Pool*>> PoolsOf(const RoutingState& rs, const InstanceSpec& spec) {
  std::vector<std::pair<std::string_view, const Pool*>> out;
  auto add = [&](std::string_view name, const Pool* p) {
    for (const auto& [n, q] : out) {
      if (q == p) return;
    }
    out.emplace_back(name, p);
  };
  if (spec.serves.empty()) {
    add("default", &rs.default_pool);
    for (const auto& [name, pool] : rs.pools) add(name, &pool);
  } else {
    for (const auto& served : spec.serves) {
      auto it = rs.pools.find(served);
      if (it == rs.pools.end()) {
        add("default", &rs.default_pool);
      } else {
        add(it->first, &it->second);
      }
    }
  }
  return out;
}

}  // namespace

// -------------------------------------------------------------------------------- TtftWindow

void TtftWindow::Add(StatusClock::time_point now, double seconds) {
  const double us = std::clamp(seconds * 1e6, 0.0, 4294967295.0);
  const uint64_t stamp = static_cast<uint64_t>(SecondOf(now) + 1) << 32;
  const uint64_t slot = next_.fetch_add(1, std::memory_order_relaxed) % kCapacity;
  slots_[slot].store(stamp | static_cast<uint32_t>(us), std::memory_order_relaxed);
}

TtftWindow::Percentiles TtftWindow::Recent(StatusClock::time_point now) const {
  const int64_t oldest = SecondOf(now) - kWindow.count();  // a sample of this second is out
  std::vector<double> values;
  values.reserve(kCapacity);
  for (const auto& s : slots_) {
    const uint64_t v = s.load(std::memory_order_relaxed);
    if (v == 0) continue;
    const int64_t second = static_cast<int64_t>(v >> 32) - 1;
    if (second <= oldest) continue;
    values.push_back(static_cast<double>(v & 0xffffffffu) / 1e6);
  }
  Percentiles out;
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  out.samples = static_cast<uint32_t>(values.size());
  out.p50 = Percentile(values, 0.5);
  out.p90 = Percentile(values, 0.9);
  return out;
}

// ----------------------------------------------------------------------------- RequestSeries

void RequestSeries::Sample(StatusClock::time_point now, std::vector<Count> counts) {
  std::sort(counts.begin(), counts.end(), [](const Count& a, const Count& b) { return a.instance < b.instance; });
  std::lock_guard lock(mu_);
  points_.push_back(Point{now, std::move(counts)});
  while (points_.size() > kBuckets + 1) points_.pop_front();
}

size_t RequestSeries::samples() const {
  std::lock_guard lock(mu_);
  return points_.size();
}

std::vector<RequestSeries::Bucket> RequestSeries::Buckets(StatusClock::time_point now,
                                                          const std::vector<Count>& current) const {
  std::vector<Bucket> out;
  std::lock_guard lock(mu_);
  // The bucket from sample `a` to `end`, when the counts were `later` (sorted by instance), or
  // `current` for the partial bucket (later == nullptr).
  auto bucket = [&](const Point& a, StatusClock::time_point end, const std::vector<Count>* later) {
    Bucket b;
    b.ended_ago = std::max(0.0, Seconds(now - end));
    b.seconds = std::max(0.0, Seconds(end - a.at));
    for (const Count& c : later ? *later : current) b.total += Delta(a.counts, c);
    b.by_instance.reserve(current.size());
    for (const Count& c : current) {
      const Count* then = later ? FindCount(*later, c.instance) : &c;
      b.by_instance.push_back(then ? Delta(a.counts, *then) : 0);  // absent: added since
    }
    return b;
  };
  for (size_t i = 0; i + 1 < points_.size(); ++i) {
    out.push_back(bucket(points_[i], points_[i + 1].at, &points_[i + 1].counts));
  }
  if (!points_.empty()) {
    Bucket b = bucket(points_.back(), now, nullptr);
    b.partial = true;
    out.push_back(std::move(b));
  }
  return out;
}

// ----------------------------------------------------------------------------------- Gateway

void Gateway::SampleRequests(StatusClock::time_point now) {
  request_series_.Sample(now, CurrentCounts(*routing_.load()));
}

// ------------------------------------------------------------------------------------ status

json::object StatusJson(const Gateway& g, StatusClock::time_point now) {
  const std::shared_ptr<const RoutingState> rs = g.routing();
  const FleetSnapshot& fleet = *rs->fleet;
  const std::vector<RequestSeries::Count> counts = CurrentCounts(*rs);
  uint64_t total = 0;
  for (const auto& c : counts) total += c.requests;

  json::array instances;
  int64_t in_flight_all = 0;
  uint64_t errors_all = 0;
  uint32_t routable = 0;
  for (uint32_t i = 0; i < fleet.size(); ++i) {
    const InstanceSpec& spec = fleet.spec(i);
    const InstanceState& st = fleet.state(i);
    const InstanceStats& stats = *rs->instances[i]->stats;
    const bool drained = st.drained.load(std::memory_order_relaxed);
    const bool healthy = st.available.load(std::memory_order_relaxed);
    const int32_t in_flight = st.in_flight.load(std::memory_order_relaxed);
    routable += st.routable();
    in_flight_all += in_flight;

    json::array pools;
    std::optional<uint32_t> threshold;
    for (const auto& [name, pool] : PoolsOf(*rs, spec)) {
      pools.emplace_back(name);
      if (pool->options.strategy == Strategy::kPrefixAware) {
        threshold = std::min(threshold.value_or(UINT32_MAX), pool->options.concurrency_threshold);
      }
    }
    json::object decisions;
    for (size_t k = 0; k < kDecisionKindCount; ++k) {
      decisions[DecisionKindName(static_cast<DecisionKind>(k))] = stats.decisions[k].load(std::memory_order_relaxed);
    }
    const uint64_t spill = stats.Decisions(DecisionKind::kOverflow) + stats.Decisions(DecisionKind::kSaturated);
    const uint64_t errors = stats.upstream_errors.load(std::memory_order_relaxed);
    errors_all += errors;
    const TtftWindow::Percentiles ttft = stats.first_byte.Recent(now);
    json::array models;
    for (const auto& m : spec.serves) models.emplace_back(m);

    json::object o{{"name", spec.name},
                   {"url", spec.url},
                   {"weight", spec.weight},
                   {"models", std::move(models)},
                   {"state", drained ? "drained" : healthy ? "available" : "ejected"},
                   {"in_flight", in_flight},
                   {"pools", std::move(pools)},
                   {"requests", counts[i].requests},
                   {"share", total ? static_cast<double>(counts[i].requests) / static_cast<double>(total) : 0.0},
                   {"affinity", stats.Decisions(DecisionKind::kAffinity)},
                   {"spill", spill},
                   {"decisions", std::move(decisions)},
                   {"upstream_errors", errors}};
    if (threshold) {
      o["concurrency_threshold"] = *threshold;
    } else {
      o["concurrency_threshold"] = nullptr;
    }
    if (ttft.samples) {
      o["ttft"] = json::object{{"samples", ttft.samples}, {"p50_ms", Ms(ttft.p50)}, {"p90_ms", Ms(ttft.p90)}};
    } else {
      o["ttft"] = json::object{{"samples", 0}, {"p50_ms", nullptr}, {"p90_ms", nullptr}};
    }
    // What the engine last reported of itself (engine_metrics); null until it has.
    const int32_t running = st.engine_running.load(std::memory_order_relaxed);
    const int32_t waiting = st.engine_waiting.load(std::memory_order_relaxed);
    const double usage = st.engine_kv_usage.load(std::memory_order_relaxed);
    if (running >= 0 || waiting >= 0) {
      json::object e;
      e["running"] = running >= 0 ? json::value(running) : json::value(nullptr);
      e["waiting"] = waiting >= 0 ? json::value(waiting) : json::value(nullptr);
      e["kv_usage"] = std::isnan(usage) ? json::value(nullptr) : json::value(usage);
      o["engine"] = std::move(e);
    } else {
      o["engine"] = nullptr;
    }
    instances.push_back(std::move(o));
  }

  json::array pools;
  pools.push_back(PoolJson("default", rs->default_pool, fleet.Eligible("").size()));
  for (const auto& [name, pool] : rs->pools) pools.push_back(PoolJson(name, pool, fleet.Eligible(name).size()));

  // The series: bucket counts parallel to `instances`.
  json::array buckets;
  double rate = 0;
  for (const RequestSeries::Bucket& b : g.request_series().Buckets(now, counts)) {
    json::array by;
    for (uint64_t n : b.by_instance) by.emplace_back(n);
    const double r = b.seconds > 0 ? static_cast<double>(b.total) / b.seconds : 0.0;
    if (!b.partial || b.seconds >= 1.0) rate = r;  // a bucket under a second old says little
    buckets.push_back(json::object{{"ended_ago", std::round(b.ended_ago * 10) / 10},
                                   {"seconds", std::round(b.seconds * 10) / 10},
                                   {"requests", b.total},
                                   {"rate", std::round(r * 100) / 100},
                                   {"partial", b.partial},
                                   {"by_instance", std::move(by)}});
  }

  const GatewayConfig& c = g.config();
  return json::object{
      {"gateway",
       json::object{{"uptime_seconds", static_cast<int64_t>(Seconds(now - g.started_at()))},
                    {"listen", c.listen_host + ":" + std::to_string(g.port())},  // the bound port (config may say 0)
                    {"instances", fleet.size()},
                    {"available", routable},
                    {"in_flight", in_flight_all},
                    {"requests", total},
                    {"requests_per_second", std::round(rate * 100) / 100},
                    {"upstream_errors", errors_all},
                    {"max_retries", c.max_retries},
                    {"health_interval_seconds", c.health.interval}}},
      {"instances", std::move(instances)},
      {"pools", std::move(pools)},
      {"ttft_window", json::object{{"seconds", TtftWindow::kWindow.count()}, {"max_samples", TtftWindow::kCapacity}}},
      {"series", json::object{{"bucket_seconds", RequestSeries::kInterval.count()},
                              {"max_buckets", RequestSeries::kBuckets},
                              {"buckets", std::move(buckets)}}},
  };
}

void AppendReadableJson(std::string& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& field : v.get_object()) {
        if (!first) out += ',';
        first = false;
        out += json::serialize(json::string_view(field.key()));
        out += ':';
        AppendReadableJson(out, field.value());
      }
      out += '}';
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.get_array()) {
        if (!first) out += ',';
        first = false;
        AppendReadableJson(out, item);
      }
      out += ']';
      return;
    }
    case json::kind::double_:
      // Shortest form that reads back the same ("0.25", "182.4", "3"), where Boost.JSON 1.81
      // writes "2.5E-1" and "3E0": both are JSON, only one is pleasant in `curl`.
      out += std::isfinite(v.get_double()) ? fmt::format("{}", v.get_double()) : "null";
      return;
    default:
      out += json::serialize(v);
  }
}

std::string_view StatusPageHtml() { return kStatusPageHtml; }

}  // namespace prefix_router::gateway
