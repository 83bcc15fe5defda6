// Human-facing output of runs: the comparison table printed on the terminal and a self-contained
// HTML report (inline CSS and SVG, no scripts, fonts or links to fetch).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "report/results.h"

namespace prefix_router::report {

// A terminal table in the shape of the published results, one block per workload: for each
// strategy TTFT P50 and P90 (with their change against the `random` run of the same workload,
// instances and seed when there is one), P99, hit rate, throughput (and change), per-instance
// share range (min-max), overflow rate, errors. When several seeds are present, one row per
// (strategy, seed).
//
// Details: a block holds the runs of one workload, fleet size, source and TTFT kind; its header
// names them ("workload long-context, 7 instances, seed 1, simulate, TTFT modelled ..."). Rows
// are labelled with the strategy ("(default)" after the gateway's default strategy,
// kDefaultStrategy in core/policy.h) plus the seed and any setting that differs between runs. Among
// several random runs of the seed, a row is compared with the one whose settings agree with its
// own on the most keys (a load sweep compares equal loads). Columns for engine TTFT (P50/P90 with
// change), the LRU and infinite-cache hit-rate bounds and routing overhead appear when a run
// carries them. A share range outside the balance band (13.3-15.4% for 7 instances, the ideal
// share +-7.5% otherwise) is marked with '*'.
std::string ComparisonTable(const std::vector<RunResult>& runs);

struct ReportOptions {
  std::string title = "prefix-router results";
  // Free text paragraphs shown under the title (how the runs were made, the exact command,
  // whether TTFTs are client-measured or modelled).
  std::vector<std::string> notes;
};

// The report: the comparison table; per workload a TTFT CDF chart (one line per strategy), a
// per-instance share chart, hit rate (and TTFT P50) over time; sweeps (runs that differ only in
// settings.prefix_length, settings.concurrency_threshold, settings.load_pct, settings.gateways or
// instances) as tables and line charts of TTFT P50/P90 and hit rate against the swept setting; bounds
// (extra.lru_bound_hit_rate, extra.infinite_bound_hit_rate) beside the hit rates; when runs carry
// both client and engine TTFTs, both are shown and labelled. When some run's strategy re-implements
// a peer (core/peer_policies.h StrategyOrigin), a peers table lists every strategy of each
// experiment (workload, fleet size, source, with or without scale events) over its seeds: TTFT
// P90 and hit rate (lowest - highest across seeds), the range of per-instance shares, and what
// it is (ours, or the peer's source). Every run's JSON settings appear in a details table at the
// end.
std::string ReportHtml(const std::vector<RunResult>& runs, const ReportOptions& options);

}  // namespace prefix_router::report
