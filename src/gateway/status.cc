#include "gateway/status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

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

void CopyTokens(const TokenCounts& t, RequestSeries::Count& c) {
  c.prompt_tokens = t.prompt.load(std::memory_order_relaxed);
  c.cached_tokens = t.cached.load(std::memory_order_relaxed);
  c.completion_tokens = t.completion.load(std::memory_order_relaxed);
  c.with_usage = t.with_usage.load(std::memory_order_relaxed);
  c.without_usage = t.without_usage.load(std::memory_order_relaxed);
}

std::vector<RequestSeries::Count> CurrentCounts(const RoutingState& rs) {
  std::vector<RequestSeries::Count> out;
  out.reserve(rs.fleet->size());
  for (uint32_t i = 0; i < rs.fleet->size(); ++i) {
    RequestSeries::Count c{rs.fleet->spec(i).name, rs.fleet->state(i).dispatched.load(std::memory_order_relaxed)};
    const InstanceStats& stats = *rs.instances[i]->stats;
    CopyTokens(stats.tokens, c);
    c.engine_hits = stats.engine_prefix_hits.load(std::memory_order_relaxed);
    c.engine_queries = stats.engine_prefix_queries.load(std::memory_order_relaxed);
    c.engine_hits_first = stats.engine_prefix_hits_first.load(std::memory_order_relaxed);
    c.engine_queries_first = stats.engine_prefix_queries_first.load(std::memory_order_relaxed);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<RequestSeries::Count> ModelCounts(
    const std::vector<std::pair<std::string, const ModelStats::Entry*>>& entries) {
  std::vector<RequestSeries::Count> out;
  for (const auto& [name, entry] : entries) {
    RequestSeries::Count c{name};
    CopyTokens(entry->tokens, c);
    c.requests = c.with_usage + c.without_usage;
    out.push_back(std::move(c));
  }
  return out;
}

// cached / prompt, rounded to 4 decimals; null without prompt tokens.
json::value HitRate(double cached, double prompt) {
  if (!(prompt > 0) || !std::isfinite(cached)) return nullptr;
  return std::round(cached / prompt * 1e4) / 1e4;
}

// The token figures of a TokenCounts-shaped count (lifetime or grown over the window).
json::object TokensJson(const RequestSeries::Count& c) {
  return json::object{
      {"prompt", c.prompt_tokens},
      {"cached", c.cached_tokens},
      {"completion", c.completion_tokens},
      {"responses_with_usage", c.with_usage},
      {"responses_without_usage", c.without_usage},
      {"hit_rate", HitRate(static_cast<double>(c.cached_tokens), static_cast<double>(c.prompt_tokens))}};
}

// Sums of grown counts: the measured tokens and the engines' counters (over those that
// reported them).
struct Sums {
  RequestSeries::Count tokens;
  double engine_hits = 0;
  double engine_queries = 0;
  bool engine_known = false;
  void Add(const RequestSeries::Count& c) {
    tokens.requests += c.requests;
    tokens.prompt_tokens += c.prompt_tokens;
    tokens.cached_tokens += c.cached_tokens;
    tokens.completion_tokens += c.completion_tokens;
    tokens.with_usage += c.with_usage;
    tokens.without_usage += c.without_usage;
    if (std::isfinite(c.engine_hits) && std::isfinite(c.engine_queries)) {
      engine_hits += c.engine_hits;
      engine_queries += c.engine_queries;
      engine_known = true;
    }
  }
};

// The `recent` object: the window's measured tokens and hit rate, and the engines' own.
json::object RecentJson(const Sums& s, double seconds, bool with_engine) {
  json::object o = TokensJson(s.tokens);
  o["seconds"] = std::round(seconds * 10) / 10;
  if (with_engine) {
    if (s.engine_known) {
      o["engine_prefix_cache_hits"] = s.engine_hits;
      o["engine_prefix_cache_queries"] = s.engine_queries;
      o["engine_hit_rate"] = HitRate(s.engine_hits, s.engine_queries);
    } else {
      o["engine_prefix_cache_hits"] = nullptr;
      o["engine_prefix_cache_queries"] = nullptr;
      o["engine_hit_rate"] = nullptr;
    }
  }
  return o;
}

json::object PoolJson(std::string_view name, const Pool& pool, size_t instances, StatusClock::time_point now) {
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
  // Flow control's settings and its queue now; a pool without it has no such field, like the
  // settings above, so its document stays as it was. The ceiling is max_in_flight above.
  if (pool.flow) {
    const PoolFlow::Snapshot f = pool.flow->TakeSnapshot(FlowSeconds(now));
    json::value oldest = nullptr;
    if (f.oldest_wait) oldest = std::round(*f.oldest_wait * 1000) / 1000;
    out["flow_control"] = json::object{{"max_queue", f.options.max_queue},
                                       {"max_queue_bytes", f.options.max_queue_bytes},
                                       {"max_queue_wait", f.options.max_queue_wait},
                                       {"fairness", f.options.fairness},
                                       {"deadlines", f.options.deadlines},
                                       {"saturation", FlowSaturationName(f.options.saturation)},
                                       {"max_in_flight_per_tenant", f.options.max_in_flight_per_tenant},
                                       {"queue", json::object{{"length", f.queued},
                                                              {"bytes", f.queued_bytes},
                                                              {"oldest_wait_seconds", oldest},
                                                              {"tenants_at_bound", f.tenants_at_bound}}}};
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

// -------------------------------------------------------------------------------- ModelStats

ModelStats::Entry& ModelStats::For(std::string_view model) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(model);
  if (it != entries_.end()) return *it->second;
  if (entries_.size() >= kMaxModels) {
    model = "other";
    it = entries_.find(model);
    if (it != entries_.end()) return *it->second;
  }
  return *entries_.emplace(std::string(model), std::make_unique<Entry>()).first->second;
}

std::vector<std::pair<std::string, const ModelStats::Entry*>> ModelStats::All() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, const Entry*>> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.emplace_back(name, entry.get());
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

std::vector<RequestSeries::Count> RequestSeries::Growth(StatusClock::time_point now, const std::vector<Count>& current,
                                                        double* seconds) const {
  std::vector<Count> out;
  out.reserve(current.size());
  std::lock_guard lock(mu_);
  *seconds = points_.empty() ? 0.0 : std::max(0.0, Seconds(now - points_.front().at));
  for (const Count& c : current) {
    Count d{c.instance};
    const Count* was = points_.empty() ? nullptr : FindCount(points_.front().counts, c.instance);
    auto grown = [](uint64_t now_value, uint64_t base) { return now_value >= base ? now_value - base : 0; };
    d.requests = grown(c.requests, was ? was->requests : 0);
    d.prompt_tokens = grown(c.prompt_tokens, was ? was->prompt_tokens : 0);
    d.cached_tokens = grown(c.cached_tokens, was ? was->cached_tokens : 0);
    d.completion_tokens = grown(c.completion_tokens, was ? was->completion_tokens : 0);
    d.with_usage = grown(c.with_usage, was ? was->with_usage : 0);
    d.without_usage = grown(c.without_usage, was ? was->without_usage : 0);
    if (std::isfinite(c.engine_hits) && std::isfinite(c.engine_queries)) {
      // The oldest sample that had the engine's counters, else their first scrape: an engine
      // first scraped a minute ago counts from then, not from its whole life.
      double hits = c.engine_hits_first, queries = c.engine_queries_first;
      for (const Point& p : points_) {
        const Count* e = FindCount(p.counts, c.instance);
        if (!e || !std::isfinite(e->engine_hits) || !std::isfinite(e->engine_queries)) continue;
        hits = e->engine_hits;
        queries = e->engine_queries;
        break;
      }
      if (std::isfinite(hits) && std::isfinite(queries)) {
        const bool reset = c.engine_hits < hits || c.engine_queries < queries;
        d.engine_hits = reset ? c.engine_hits : c.engine_hits - hits;
        d.engine_queries = reset ? c.engine_queries : c.engine_queries - queries;
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

// ----------------------------------------------------------------------------------- Gateway

void Gateway::SampleRequests(StatusClock::time_point now) {
  request_series_.Sample(now, CurrentCounts(*routing_.load()));
  model_series_.Sample(now, ModelCounts(model_stats_.All()));
}

// ------------------------------------------------------------------------------------ status

json::object StatusJson(const Gateway& g, StatusClock::time_point now) {
  const std::shared_ptr<const RoutingState> rs = g.routing();
  const FleetSnapshot& fleet = *rs->fleet;
  const std::vector<RequestSeries::Count> counts = CurrentCounts(*rs);
  uint64_t total = 0;
  for (const auto& c : counts) total += c.requests;
  // The hit-rate window: what each instance's and model's counts grew by over the series.
  double window_seconds = 0;
  const std::vector<RequestSeries::Count> grown = g.request_series().Growth(now, counts, &window_seconds);
  const auto model_entries = g.model_stats().All();
  const std::vector<RequestSeries::Count> model_counts = ModelCounts(model_entries);
  double model_window_seconds = 0;
  const std::vector<RequestSeries::Count> model_grown =
      g.model_series().Growth(now, model_counts, &model_window_seconds);
  Sums lifetime_all, recent_all;

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
                   {"state", drained   ? "drained"
                             : healthy ? "available"
                                       : "ejected"},
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
      // The engine's own prefix-cache counters (tokens, since the engine started).
      const double hits = counts[i].engine_hits;
      const double queries = counts[i].engine_queries;
      const bool known = std::isfinite(hits) && std::isfinite(queries);
      e["prefix_cache_hits"] = known ? json::value(hits) : json::value(nullptr);
      e["prefix_cache_queries"] = known ? json::value(queries) : json::value(nullptr);
      e["hit_rate"] = known ? HitRate(hits, queries) : json::value(nullptr);
      o["engine"] = std::move(e);
    } else {
      o["engine"] = nullptr;
    }
    // Tokens measured from the usage of the responses relayed: since the gateway started, and
    // over the window beside the engine's own hit rate of the same window.
    o["tokens"] = TokensJson(counts[i]);
    Sums one;
    one.Add(grown[i]);
    o["recent"] = RecentJson(one, window_seconds, true);
    lifetime_all.Add(counts[i]);
    recent_all.Add(grown[i]);
    instances.push_back(std::move(o));
  }

  json::array pools;
  pools.push_back(PoolJson("default", rs->default_pool, fleet.Eligible("").size(), now));
  for (const auto& [name, pool] : rs->pools) pools.push_back(PoolJson(name, pool, fleet.Eligible(name).size(), now));
  // A pool's measured hit rate: its models' tokens (a model without a pool of its name is the
  // default pool's); its engines' hit rate: that of the instances that take its requests.
  auto pool_name_of = [&](std::string_view model) -> std::string_view {
    return rs->pools.contains(model) ? model : std::string_view("default");
  };
  std::map<std::string, Sums, std::less<>> pool_sums;
  for (const RequestSeries::Count& m : model_grown) pool_sums[std::string(pool_name_of(m.instance))].Add(m);
  std::map<std::string, Sums, std::less<>> pool_engines;
  for (uint32_t i = 0; i < fleet.size(); ++i) {
    for (const auto& [name, pool] : PoolsOf(*rs, fleet.spec(i))) {
      RequestSeries::Count engine_only{fleet.spec(i).name};
      engine_only.engine_hits = grown[i].engine_hits;
      engine_only.engine_queries = grown[i].engine_queries;
      pool_engines[std::string(name)].Add(engine_only);
    }
  }
  for (json::value& v : pools) {
    json::object& po = v.as_object();
    const std::string name(po["name"].as_string());
    Sums s;
    if (auto it = pool_sums.find(name); it != pool_sums.end()) s = it->second;
    if (auto it = pool_engines.find(name); it != pool_engines.end()) {
      s.engine_hits = it->second.engine_hits;
      s.engine_queries = it->second.engine_queries;
      s.engine_known = it->second.engine_known;
    }
    po["recent"] = RecentJson(s, model_window_seconds, true);
  }

  // The per-model view: tokens since start and over the window, first-byte times.
  json::array models;
  for (size_t k = 0; k < model_counts.size(); ++k) {
    const RequestSeries::Count& c = model_counts[k];
    json::object mo{{"name", c.instance}, {"pool", pool_name_of(c.instance)}, {"tokens", TokensJson(c)}};
    Sums one;
    one.Add(model_grown[k]);
    mo["recent"] = RecentJson(one, model_window_seconds, false);
    const TtftWindow::Percentiles ttft = model_entries[k].second->first_byte.Recent(now);
    if (ttft.samples) {
      mo["ttft"] = json::object{{"samples", ttft.samples}, {"p50_ms", Ms(ttft.p50)}, {"p90_ms", Ms(ttft.p90)}};
    } else {
      mo["ttft"] = json::object{{"samples", 0}, {"p50_ms", nullptr}, {"p90_ms", nullptr}};
    }
    models.push_back(std::move(mo));
  }

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
  // What the running configuration (reloads included) does not do as its names suggest: kv-aware
  // with no KV event stream, ... (ConfigWarnings, also logged at start and on each reload).
  json::array warnings;
  for (std::string& w : ConfigWarnings(g.running_config())) warnings.emplace_back(std::move(w));
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
                    {"health_interval_seconds", c.health.interval},
                    {"tokens", TokensJson(lifetime_all.tokens)},
                    {"recent", RecentJson(recent_all, window_seconds, true)},
                    {"warnings", std::move(warnings)}}},
      {"instances", std::move(instances)},
      {"pools", std::move(pools)},
      {"models", std::move(models)},
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
    default: out += json::serialize(v);
  }
}

std::string_view StatusPageHtml() { return kStatusPageHtml; }

}  // namespace prefix_router::gateway
