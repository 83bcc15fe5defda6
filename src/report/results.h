// Results of a load run (simulated or over HTTP) in one fixed shape, so scripts, `demo` and the
// HTML report can rely on it.
//
// A run's raw material is one RequestRecord per request; Summarize turns them into a RunResult
// (percentiles, hit rate, shares, a time series and a TTFT distribution for charts). The JSON
// written by WriteResultsJson is an array of run objects; the field names below are the JSON
// names (documented for users in docs/results-format.md).
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace prefix_router::report {

struct RequestRecord {
  double start_s = 0;          // when the request was sent, seconds from the run's start
  double ttft_s = -1;          // to the first content token (client-measured or modelled); <0 unknown
  double e2e_s = -1;           // to the last byte; <0 when the request failed
  double engine_ttft_s = -1;   // the engine's own modelled TTFT when reported, else <0
  double engine_queue_s = -1;  // the engine's modelled queue wait when reported, else <0
  double itl_mean_s = -1;      // mean inter-token latency over the stream, <0 unknown
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens served from the engine's prefix cache
  // False when the response carried no cached-token count (a vLLM without
  // --enable-prompt-tokens-details, or with it and nothing cached: vLLM leaves a count of 0
  // out); cached_tokens is then 0. See Summarize for how the hit rate reads it.
  bool cached_tokens_known = true;
  uint32_t output_tokens = 0;
  int32_t instance = -1;  // index into the run's instance list; -1 unknown or none
  bool error = false;     // no complete, successful response
  bool overflow = false;  // routed away from its preferred instance (spill)
  bool counted = true;    // false during warm-up: excluded from every summary figure
  // Flow control (simulate): refused at admission (429: the pool's ceiling, its queue full, the
  // wait run out; `error` is set too), the seconds spent in the gateway's queue (<0: not queued;
  // ttft_s and e2e_s count it), and the client's tenant class (index into the run's classes;
  // -1 = none).
  bool refused = false;
  double queue_s = -1;
  int32_t tenant = -1;
};

// One point of a run's time series: requests that started in [t_s, t_s + window).
struct SeriesPoint {
  double t_s = 0;
  uint64_t requests = 0;
  double hit_rate = 0;  // cached / prompt tokens in the window; NaN when not known (see Summarize)
  double ttft_p50_s = 0;
  double ttft_p90_s = 0;
  std::vector<double> share;  // per instance, fraction of the window's requests
};

struct RunResult {
  // Identity.
  std::string source;  // "simulate", "bench" or "demo"
  std::string workload;
  std::string strategy;  // strategy name as given on the command line (e.g. prefix-aware-least-loaded)
  uint32_t instances = 0;
  uint64_t seed = 0;
  std::string ttft_kind;  // "modelled" (engine model's clock) or "client" (measured over HTTP)
  // Settings and sweep coordinates: prefix_length, concurrency_threshold, load_pct,
  // concurrency, rate_rps, duration_s, time_scale, ... (numbers only).
  std::map<std::string, double> settings;
  // Counts.
  uint64_t requests = 0;  // counted requests (warm-up excluded), errors included
  uint64_t errors = 0;
  // Latency, seconds, over successful counted requests.
  double ttft_p50_s = 0, ttft_p90_s = 0, ttft_p99_s = 0, ttft_mean_s = 0;
  double e2e_p50_s = 0, e2e_p90_s = 0;
  double itl_p50_s = -1;  // <0 when unknown
  // The engines' own modelled TTFT when reported (bench/demo through the emulator), else <0.
  double engine_ttft_p50_s = -1, engine_ttft_p90_s = -1, engine_ttft_p99_s = -1;
  // Cache, throughput, balance.
  // Sum cached_tokens / sum prompt_tokens; NaN ("n/a", JSON null) when no response carried a
  // cached-token count (see Summarize).
  double hit_rate = 0;
  double throughput_rps = 0;  // successful counted requests / measured span
  double output_tokens_per_s = 0;
  std::vector<double> share;  // per instance, fraction of counted requests
  double overflow_rate = 0;   // fraction of counted requests that overflowed
  // Extra figures a producer may add (e.g. queue_depth_mean, queue_depth_max, lru_bound_hit_rate,
  // infinite_bound_hit_rate, routing_overhead_p50_s). Numbers only.
  std::map<std::string, double> extra;
  // For charts.
  std::vector<double> ttft_quantiles;  // TTFT at quantiles 0, 0.01, ..., 1 (101 values); empty if none
  std::vector<SeriesPoint> series;
};

struct SummaryOptions {
  uint32_t instances = 0;      // share vector length
  double series_window_s = 0;  // 0 = no time series
};

// Fills the measured fields of `into` (counts, latencies, hit rate, throughput, shares,
// overflow, quantiles, series) from `records`; identity, settings and extra are left as they are.
// The measured span is from the first counted request's start to the last counted request's end
// (start + e2e; a failed request ends at its start).
//
// Only counted records contribute. Errors count in `requests` and `errors` (and in shares and
// overflow when they carry an instance) but never in latencies, hit rate or throughput; a
// latency of <0 (unknown) is left out of its percentiles.
// Hit rate: NaN (not known, shown as "n/a") when there are successful counted records and none
// carried a cached-token count (cached_tokens_known), as against a default vLLM; an engine that
// reports no count must not read as a 0% hit rate (0 without successful records, like the other
// figures). When at least one did, the endpoint reports counts,
// and a record without one counts 0 cached tokens: vLLM with --enable-prompt-tokens-details
// leaves the count out exactly when it is 0, so averaging only over the records that carry
// one would leave every miss out and overstate the rate. The same holds per series window
// (NaN in every window when the run has no count). `share` has options.instances entries
// (more if a record names a higher instance index) over counted requests with instance >= 0.
// Series windows are aligned to multiples of series_window_s from t = 0 and run from the window
// of the first counted start to that of the last, empty windows included (requests = 0); more
// than 10,000 windows widen the window to a multiple of itself.
void Summarize(const std::vector<RequestRecord>& records, const SummaryOptions& options, RunResult& into);

// Percentile by linear interpolation between closest ranks; 0 for an empty input. Sorts `v`.
double Percentile(std::vector<double>& v, double p);

// A tenant class as the figures name it (RequestRecord::tenant indexes a list of these).
struct TenantLabel {
  std::string name;
  int32_t priority = 0;
  double ttft_objective_s = 0;  // its requests' TTFT objective; 0 = none
};
// Flow control's figures in `into.extra`, over counted requests. With `ceiling` (the run had a
// max_in_flight): "refused" (429s at admission), "queued" (requests that waited in the gateway's
// queue, refused ones included) and "queue_wait_p90_s". Per class: "tenant.NAME.priority",
// ".requests", ".refused", ".ttft_p50_s" / "_p90_s" / "_p99_s" (successful requests; TTFT counts
// the queue wait), ".objective_met" (with an objective: the share of its requests, refused ones
// included, whose TTFT met it), ".throughput_rps" (completed over the run's span, so the classes' add up to
// the run's), and where a class's TTFT went, over its successful requests: ".hit_rate" (cached
// over prompt tokens, of the requests whose cached count is known; none when none is),
// ".queue_wait_p90_s" (with `ceiling`: the gateway's queue, 0 for a request not queued) and
// ".engine_queue_p90_s" (arrival at the engine to first admission; only when the engine reported it). Nothing without a ceiling and classes: such runs keep their figures as they were.
void AddFlowFigures(const std::vector<RequestRecord>& records, const std::vector<TenantLabel>& tenants, bool ceiling,
                    RunResult& into);
// One line per run with flow figures (see AddFlowFigures) and per class: what `simulate` and
// `bench` print after their table. "" when no run has any.
std::string FlowLines(const std::vector<RunResult>& runs, const std::vector<TenantLabel>& tenants);

// JSON: an array of run objects with every field above (series and quantiles included).
// Numbers are written in their shortest exact form and read back exactly; a NaN or infinite
// value is written as null and read back as NaN.
std::string ResultsJson(const std::vector<RunResult>& runs);
// Parses what ResultsJson wrote (for `demo` and the report); InvalidArgument on bad input,
// naming the offending field (e.g. "runs[2].share[1]: expected a number"). Missing fields keep
// their defaults and unknown fields are ignored, so older and newer files still load.
Result<std::vector<RunResult>> ParseResultsJson(std::string_view json);
// CSV: one header line, one line per run: the scalar fields, settings.* and extra.* columns
// (union over runs), share as "a;b;c".
std::string ResultsCsv(const std::vector<RunResult>& runs);

// The whole file at `path`; NotFound or Internal naming the path on failure.
Result<std::string> ReadFile(const std::string& path);

// Writes `content` to `path` atomically enough for a CLI (temp file + rename); Internal error
// naming the path on failure.
Status WriteFile(const std::string& path, const std::string& content);

}  // namespace prefix_router::report
