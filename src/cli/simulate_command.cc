// `prefix-router simulate`: the discrete-event fleet simulator (sim/), sweeps included.
#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/peer_policies.h"
#include "engine_model/profiles.h"
#include "report/report.h"
#include "report/results.h"
#include "sim/sweep.h"

namespace prefix_router::cli {
namespace {

struct SimulateArgs {
  std::vector<std::string> workloads{"long-context"};
  std::vector<std::string> params;
  std::vector<std::string> strategies = sim::DefaultComparison();
  std::vector<uint32_t> prefix_lengths;
  std::vector<uint32_t> thresholds;
  double balance_factor = kDefaultBalanceFactor;
  bool canonical_json = false;
  std::vector<std::string> exclude_fields;
  std::vector<std::string> exclude_patterns;
  std::vector<uint32_t> instances{7};
  std::vector<uint32_t> gateways{1};
  std::vector<uint64_t> seeds{1};
  std::vector<double> load_pct;
  std::vector<double> rates;
  std::vector<uint32_t> concurrency;
  std::string profile = "llama-70b-h100x8";
  std::string calibration;
  uint32_t capacity_blocks = 0;
  double duration_s = 3600;
  double warmup_s = -1;
  uint64_t max_requests = 0;
  double window_s = 0;
  double trace_speed = 1;
  std::vector<std::string> events;
  bool no_bounds = false;
  unsigned jobs = 0;
  double saturation_duration_s = 900;
  sim::KvEventFeed kv_events;
  std::string tenants;
  uint32_t max_in_flight = 0;
  FlowQueueOptions flow;  // max_queue 0 = refuse at the ceiling
  bool no_fairness = false;
  bool no_deadlines = false;
  std::string saturation = "pool";
  std::string json, csv, report;
  std::string label_suffix;
  bool quiet = false;
};

int Fail(const std::string& message, int code = 2) {
  std::cerr << "prefix-router simulate: " << message << "\n";
  return code;
}

int RunSimulate(const SimulateArgs& a, const std::string& command_line) {
  sim::SweepSpec spec;
  auto profile = engine_model::FindProfile(a.profile);
  if (!profile.ok()) return Fail(profile.status().message());
  spec.base.profile = *profile;
  if (a.capacity_blocks > 0) spec.base.profile.config.capacity_blocks = a.capacity_blocks;
  if (!a.calibration.empty()) {
    auto target = engine_model::ParseCalibration(a.calibration);
    if (!target.ok()) return Fail("--calibration: " + target.status().message());
    if (Status s = engine_model::Calibrate(spec.base.profile.config, *target); !s.ok()) {
      return Fail("--calibration: " + s.message());
    }
    if (!a.quiet) {
      const auto& cost = spec.base.profile.config.cost;
      std::cerr << fmt::format(
          "calibration uncached {:.0f} ms, cached {:.0f} ms: fitted MFU {:.3f}{}, request "
          "overhead {:.1f} ms\n",
          target->uncached_ttft * 1e3, target->cached_ttft * 1e3, cost.mfu,
          cost.overlap_all_reduce ? " (all-reduces overlapped with the GEMMs)" : "", cost.request_overhead * 1e3);
    }
  }
  if (Status s = spec.base.profile.config.Validate(); !s.ok()) return Fail(s.message());
  for (const std::string& p : a.params) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos || eq == 0) return Fail("--param '" + p + "': expected NAME=VALUE");
    spec.base.params[p.substr(0, eq)] = p.substr(eq + 1);
  }
  for (const std::string& e : a.events) {
    auto ev = sim::ParseScaleEvent(e);
    if (!ev.ok()) return Fail(ev.status().message());
    spec.base.events.push_back(*ev);
  }
  spec.base.routing.balance_factor = a.balance_factor;
  spec.base.routing.key_normalisation = KeyNormalisation{a.canonical_json, a.exclude_fields, a.exclude_patterns};
  spec.base.duration_s = a.duration_s;
  spec.base.max_requests = a.max_requests;
  spec.base.warmup_s = a.warmup_s >= 0 ? a.warmup_s : std::min(300.0, a.duration_s / 6);
  spec.base.series_window_s = a.window_s > 0 ? a.window_s : std::max(1.0, a.duration_s / 60);
  spec.base.trace_speed = a.trace_speed;
  spec.base.bounds = !a.no_bounds;
  spec.base.kv_events = a.kv_events;
  spec.base.routing.max_in_flight = a.max_in_flight;
  spec.base.routing.flow_control = a.flow;
  spec.base.routing.flow_control.fairness = !a.no_fairness;
  spec.base.routing.flow_control.deadlines = !a.no_deadlines;
  if (auto s = ParseFlowSaturation(a.saturation); s.ok()) {
    spec.base.routing.flow_control.saturation = *s;
  } else {
    return Fail("--saturation: '" + a.saturation + "' is not one of pool, in-flight");
  }
  if (a.flow.max_queue > 0 && a.max_in_flight == 0 && a.flow.max_in_flight_per_tenant == 0 &&
      spec.base.routing.flow_control.saturation == FlowSaturation::kPool) {
    return Fail("--max-queue needs --max-in-flight, --max-in-flight-per-tenant or --saturation in-flight");
  }
  if (Status s = spec.base.routing.Validate(); !s.ok()) return Fail(s.message());
  if (!a.tenants.empty()) {
    auto t = workload::ParseTenantClasses(a.tenants);
    if (!t.ok()) return Fail("--tenants: " + t.status().message());
    spec.base.tenants = std::move(*t);
  }
  spec.workloads = a.workloads;
  spec.strategies = a.strategies;
  spec.prefix_lengths = a.prefix_lengths;
  spec.thresholds = a.thresholds;
  spec.instances = a.instances;
  spec.gateways = a.gateways;
  spec.seeds = a.seeds;
  spec.label_suffix = a.label_suffix;
  const int load_options = !a.load_pct.empty() + !a.rates.empty() + !a.concurrency.empty();
  if (load_options > 1) return Fail("give one of --load, --rate and --concurrency");
  if (!a.rates.empty()) {
    spec.load_kind = sim::LoadKind::kRate;
    spec.loads = a.rates;
  } else if (!a.concurrency.empty()) {
    spec.load_kind = sim::LoadKind::kConcurrency;
    spec.loads.assign(a.concurrency.begin(), a.concurrency.end());
  } else {
    spec.load_kind = sim::LoadKind::kPercentOfSaturation;
    spec.loads = a.load_pct.empty() ? std::vector<double>{70} : a.load_pct;
  }
  spec.saturation_duration_s = a.saturation_duration_s;
  spec.saturation_warmup_s = a.saturation_duration_s / 3;

  const unsigned jobs = a.jobs > 0 ? a.jobs : std::max(1u, std::thread::hardware_concurrency());
  const size_t total = sim::SweepSize(spec);
  if (!a.quiet) {
    std::cerr << fmt::format("simulating {} run(s) of {:.0f} model seconds on {} thread(s)...\n", total, a.duration_s,
                             jobs);
  }
  const auto started = std::chrono::steady_clock::now();
  auto results = sim::RunSweep(spec, jobs, [&](const report::RunResult& r, size_t done, size_t n) {
    if (a.quiet) return;
    std::cerr << fmt::format("  [{}/{}] {} {} seed {}: {} requests, TTFT P50 {:.3f} s, hit rate {:.1f}%\n", done, n,
                             r.workload, r.strategy, r.seed, r.requests, r.ttft_p50_s, 100 * r.hit_rate);
  });
  if (!results.ok()) return Fail(results.status().message());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::cout << report::ComparisonTable(*results);
  std::cout << report::FlowLines(*results, sim::TenantLabels(spec.base.tenants));
  std::cout << fmt::format("{} run(s) simulated in {:.1f} s of wall time (TTFTs are the engine model's).\n",
                           results->size(), wall);
  if (!a.json.empty()) {
    if (Status s = report::WriteFile(a.json, report::ResultsJson(*results)); !s.ok()) return Fail(s.message(), 1);
  }
  if (!a.csv.empty()) {
    if (Status s = report::WriteFile(a.csv, report::ResultsCsv(*results)); !s.ok()) return Fail(s.message(), 1);
  }
  if (!a.report.empty()) {
    report::ReportOptions ro;
    ro.title = "prefix-router simulation";
    ro.notes.push_back("Made by: " + command_line);
    ro.notes.push_back("Simulated with the engine model (profile " + spec.base.profile.name +
                       "): TTFTs are modelled, not measured over HTTP. Requests sent during the warm-up are "
                       "excluded from every figure.");
    if (Status s = report::WriteFile(a.report, report::ReportHtml(*results, ro)); !s.ok()) {
      return Fail(s.message(), 1);
    }
  }
  return 0;
}

}  // namespace

void AddSimulateCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* cmd =
      app.add_subcommand("simulate",
                         "Simulate a fleet behind the router, without sockets or sleeping: the gateway's routing "
                         "code and the engine emulator's cache and timing model, driven by a workload in model "
                         "time (an hour of traffic in seconds). Compares strategies and sweeps settings; writes "
                         "JSON, CSV and an HTML report.");
  cmd->add_option("--workload", a->workloads,
                  "Workload(s), comma-separated: long-context, sharegpt-like, agentic, rag, "
                  "noisy-native, trace, mooncake (docs/workloads.md). A timed trace (trace with "
                  "arrival times, mooncake) replays at its own times (see --trace-speed); give "
                  "it --rate with any value to skip the saturation run that --load needs")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--param", a->params,
                  "Workload parameter NAME=VALUE (repeatable), e.g. documents=640, file=trace.jsonl");
  std::string gateway_strategies;
  for (const StrategyInfo& e : StrategyRegistry()) {
    gateway_strategies +=
        (gateway_strategies.empty() ? "" : "; ") + std::string(e.name) + " (" + std::string(e.description) + ")";
  }
  cmd->add_option("--strategy", a->strategies,
                  "Strategies, comma-separated. The gateway's: " + gateway_strategies + ". " +
                      std::string(StrategyName(kDefaultStrategy)) +
                      " is the gateway's default strategy, marked \"(default)\" in the table. "
                      "prefix-aware spills next-preferred (= prefix-aware-next-preferred), "
                      "prefix-aware-least-loaded to the least loaded instance; a prefix-aware name "
                      "may end in -bF to set its balance factor (-b0: off), cache-aware in -wF to "
                      "set its load weight F; any name may end in +tokens to measure load in "
                      "outstanding prompt tokens (routing.load_measure: prompt-tokens), e.g. "
                      "least-outstanding-requests+tokens. Peers, at their sources' defaults: " +
                      PeerStrategyHelp())
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--prefix-length", a->prefix_lengths,
                  "Prefix length(s) in characters, 1024..65536, comma-separated (default 2048)")
      ->delimiter(',');
  cmd->add_option("--threshold", a->thresholds,
                  "Concurrency threshold(s) per instance, 1..1024, comma-separated (default 64)")
      ->delimiter(',');
  cmd->add_option("--balance-factor", a->balance_factor,
                  "prefix-aware bounded load (sticky): an instance is full at ceil(F x average "
                  "in-flight), never below 4; 0 = off, else 1..100. A strategy name ending in "
                  "-bF (prefix-aware-least-loaded-b0) overrides it for that strategy")
      ->capture_default_str();
  cmd->add_option("--canonical-json", a->canonical_json,
                  "Key normalisation (docs/normalisation.md): native bodies keyed on their canonical JSON, as "
                  "a gateway pool with key_normalisation.canonical_json: true")
      ->capture_default_str();
  cmd->add_option("--exclude-field", a->exclude_fields,
                  "Key normalisation: a JSON member left out of the native key (implies --canonical-json); "
                  "name, a.b.c, * = any one key; repeatable");
  cmd->add_option("--exclude-pattern", a->exclude_patterns,
                  "Key normalisation: a regular expression removed from the keyed text (OpenAI message text, "
                  "native string values); repeatable");
  cmd->add_option("--instances", a->instances, "Fleet size(s), comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--gateways", a->gateways,
                  "Gateway replicas in front of the fleet, 1..64, comma-separated (1,4 compares "
                  "them in one table): requests are dealt round-robin to K independent gateways, "
                  "each with its own routing state (learned index, key homes, share meter) and "
                  "its own in-flight counts (only the requests it sent), over the same engines; "
                  "every gateway receives the engines' KV events (each loses batches "
                  "independently) and their load reports (docs/gateways.md)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--seed", a->seeds, "Seed(s), comma-separated; each seed is a separate run")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--load", a->load_pct,
                  "Open-loop (Poisson) offered load(s) in % of random routing's saturation "
                  "throughput on the same fleet (measured first), comma-separated (default 70)")
      ->delimiter(',');
  cmd->add_option("--rate", a->rates, "Open-loop offered load(s) in requests/s instead")->delimiter(',');
  cmd->add_option("--concurrency", a->concurrency,
                  "Closed loop instead: number of users, each sending its next request when the "
                  "previous finishes")
      ->delimiter(',');
  std::string profiles = "Engine profile:";
  for (auto name : engine_model::ProfileNames()) profiles += " " + std::string(name);
  cmd->add_option("--profile", a->profile, profiles)->capture_default_str();
  cmd->add_option("--calibration", a->calibration,
                  "Refit the engine model to other idle-instance TTFTs of an 8,000-token prompt: "
                  "uncached=MS,cached=MS (either or both; the reference is uncached=280,cached=63, "
                  "the managed service's published range). Refits the MFU and the per-request "
                  "overhead (engine_model/profiles.h); says so when a point is out of the "
                  "hardware's reach");
  cmd->add_option("--capacity-blocks", a->capacity_blocks,
                  "Override the profile's KV cache capacity per instance, in blocks");
  cmd->add_option("--duration", a->duration_s, "Seconds of model time during which requests are sent")
      ->capture_default_str();
  cmd->add_option("--warmup", a->warmup_s,
                  "Seconds at the start excluded from the figures (default: duration/6, at most 300)");
  cmd->add_option("--max-requests", a->max_requests, "Stop sending after this many requests (0 = no limit)");
  cmd->add_option("--window", a->window_s, "Time-series window in seconds (default: duration/60)");
  cmd->add_option("--trace-speed", a->trace_speed, "Replay speed of a timed trace (2 = twice as fast)")
      ->capture_default_str();
  cmd->add_option("--event", a->events,
                  "Scale event KIND[:INSTANCE]@SECONDS (repeatable): add@600, remove:instance-3@1200, "
                  "replace:instance-2@1800 (same name, cold cache)");
  cmd->add_option("--kv-event-delay", a->kv_events.delay_s,
                  "kv-aware, dynamo-kv: model seconds from the end of the engine step that produced a "
                  "KV event batch to the router")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-event-interval", a->kv_events.batch_interval_s,
                  "kv-aware, dynamo-kv: an engine publishes its KV events once this many model seconds "
                  "passed since the batch's first (0 = one batch per engine step, as vLLM)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-event-loss", a->kv_events.loss,
                  "kv-aware, dynamo-kv: probability that a KV event batch is lost (seeded); kv-aware "
                  "routes an instance whose stream has a gap on cache-aware's view")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--no-bounds", a->no_bounds, "Skip the LRU and infinite-cache hit-rate bounds (saves time and memory)");
  cmd->add_option("--saturation-duration", a->saturation_duration_s,
                  "Model seconds of the closed-loop run that measures random's saturation throughput")
      ->capture_default_str();
  cmd->add_option("--max-in-flight", a->max_in_flight,
                  "Flow control (docs/flow-control.md): each gateway admits at most this many requests in "
                  "flight (routing.max_in_flight); one more is refused (429) or, with --max-queue, waits "
                  "(0 = no ceiling)")
      ->capture_default_str();
  cmd->add_option("--max-queue", a->flow.max_queue,
                  "Flow control: requests that may wait at each gateway's ceiling "
                  "(routing.flow_control.max_queue; 0 = refuse at once)")
      ->capture_default_str();
  cmd->add_option("--max-queue-bytes", a->flow.max_queue_bytes,
                  "Flow control: bytes of queued bodies per gateway (0 = bounded by --max-queue only)")
      ->capture_default_str();
  cmd->add_option("--max-queue-wait", a->flow.max_queue_wait,
                  "Flow control: seconds a request may wait before it is refused")
      ->capture_default_str();
  cmd->add_option("--max-in-flight-per-tenant", a->flow.max_in_flight_per_tenant,
                  "Flow control: requests one tenant may have in flight at each gateway; more wait in the queue "
                  "(or get 429 with --max-queue 0) while other tenants' requests pass them "
                  "(routing.flow_control.max_in_flight_per_tenant; 0 = no bound)")
      ->capture_default_str();
  cmd->add_option("--saturation", a->saturation,
                  "Flow control: when a gateway's pool is saturated besides --max-in-flight: pool (only there), "
                  "in-flight (also when every instance has --threshold requests in flight: the routing policy's "
                  "notion of full) (routing.flow_control.saturation)")
      ->capture_default_str();
  cmd->add_flag("--no-deadlines", a->no_deadlines,
                "Flow control: arrival order within a tenant even for requests with a TTFT objective (for "
                "comparison: the objectives are still counted as met or not)");
  cmd->add_flag("--no-fairness", a->no_fairness,
                "Flow control: arrival order within a priority band instead of fairness between tenants");
  cmd->add_option("--tenants", a->tenants,
                  "Tenant classes NAME:PRIORITY:SHARE[:TTFT_OBJECTIVE_MS],... e.g. "
                  "interactive:1:0.2:500,batch:0:0.8: each session belongs to one class, its requests carry "
                  "the class's priority band (-10..10; negative = sheddable), tenant name and TTFT objective "
                  "(their deadline in the queue: earliest first within a tenant, or within the band with "
                  "--no-fairness; the lines say how many met it). Open loop: a class sends SHARE x the offered rate (shares need "
                  "not add up to 1: a:0:0.5,b:0:5 is b at 10x its half); closed loop and timed traces: "
                  "shares are weights. Per-class lines follow the table");
  cmd->add_option("--jobs", a->jobs, "Runs simulated in parallel (default: one per core)");
  cmd->add_option("--label-suffix", a->label_suffix,
                  "Appended to every run's strategy name in the results (e.g. +canonical), so that "
                  "runs made by separate commands with other settings stay apart in `prefix-router "
                  "report`");
  cmd->add_option("--json", a->json, "Write the results as JSON (docs/results-format.md)");
  cmd->add_option("--csv", a->csv, "Write the results as CSV");
  cmd->add_option("--report", a->report, "Write a self-contained HTML report");
  cmd->add_flag("--quiet", a->quiet, "No progress lines on stderr");
  cmd->callback([a, exit_code] { *exit_code = RunSimulate(*a, CommandLine()); });
}

}  // namespace prefix_router::cli
