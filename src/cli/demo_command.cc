// `prefix-router demo`: the whole proof on one machine. Starts 7 engine emulators and the
// gateway on loopback, replays the published workloads and a slice of the Mooncake production
// trace through the gateway for each strategy (cold caches for each), simulates the same runs
// with `simulate`'s model, prints the comparison and writes DIR/results.json and
// DIR/report.html.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/peer_policies.h"
#include "engine/engine_server.h"
#include "gateway/gateway.h"
#include "loadgen/loadgen.h"
#include "report/report.h"
#include "report/results.h"
#include "report/text.h"
#include "sim/simulator.h"

namespace prefix_router::cli {
namespace {

constexpr std::string_view kModel = "llama";
// Tokens per streamed chunk after the first: time-scaled engines produce tokens 4-10x faster
// than real ones, and relaying each as its own event would saturate 2 cores; TTFT (the first
// token, sent alone) is unaffected, inter-token latency is reported per chunk.
constexpr uint32_t kStreamInterval = 16;

// The committed slice of the Mooncake trace (data/mooncake/NOTICE), relative to the repository
// root, where scripts/demo.sh runs the demo.
constexpr std::string_view kMooncakeSlice = "data/mooncake/conversation_trace_600s.jsonl";

struct DemoArgs {
  std::string out = "demo-results";
  std::vector<std::string> workloads{"long-context", "sharegpt-like", "mooncake"};
  bool workloads_given = false;
  std::string mooncake_file{kMooncakeSlice};
  double trace_speed = 2;
  std::vector<std::string> strategies = sim::DefaultComparison();
  uint64_t seed = 1;
  uint32_t instances = 7;
  std::string profile = "llama-70b-h100x8";
  double load_pct = 70;
  double rate_rps = 0;  // > 0: offer this rate instead of a share of saturation
  double scale = 1;     // multiplies the request counts
  bool no_simulate = false;
  bool quiet = false;
};

// Per-workload run sizes and time scales: enough requests to reach a steady cache (random's
// LRU full, prefix-aware's documents all seen) and to measure shares to a few tenths of a
// point, in a few minutes on 2 cores. long-context sends 33 KB prompts and few output tokens
// per second, so it runs 6.7x faster than real time; sharegpt-like streams ~300 tokens per
// request, so it runs 4x faster to keep the relay's load modest. mooncake replays the whole
// slice (1,750 requests in 597 s): the first 350 (its first 2 minutes) warm the caches. At the
// default --trace-speed 2 the fleet is loaded but not saturated (simulated, random's TTFT P50
// is 0.6 s; at 3 it is 1.0 s and P90 5.4 s, queues of 100k-token prompts), and 10x faster than
// real time the slice takes 30 s of wall time per strategy: 58 requests/s of 56 KB prompts and
// ~350 output tokens each, about the relay's load under long-context.
struct WorkloadPlan {
  uint64_t warmup;
  uint64_t requests;
  double time_scale;
};

WorkloadPlan PlanFor(std::string_view workload, double scale) {
  WorkloadPlan p{2000, 3000, 0.25};
  if (workload == "long-context") p = WorkloadPlan{2000, 4000, 0.15};
  if (workload == "mooncake") p = WorkloadPlan{350, 1400, 0.1};
  p.warmup = std::max<uint64_t>(1, static_cast<uint64_t>(p.warmup * scale));
  p.requests = std::max<uint64_t>(10, static_cast<uint64_t>(p.requests * scale));
  return p;
}

// Workloads replayed at their recorded arrival times (x --trace-speed) rather than at a share
// of the simulated saturation throughput.
bool IsTimed(std::string_view workload) { return workload == "mooncake"; }

workload::ParamMap ParamsFor(const DemoArgs& a, std::string_view workload) {
  if (workload == "mooncake") return {{"file", a.mooncake_file}};
  return {};
}

// A timed workload's offered load: its mean rate over the planned requests and when the
// measured ones start, in model seconds (recorded times / trace speed).
struct TimedLoad {
  double rate_rps = 0;
  double warmup_s = 0;
};

Result<TimedLoad> TimedLoadFor(const DemoArgs& a, const std::string& workload, const WorkloadPlan& plan) {
  auto w = workload::MakeWorkload(workload, ParamsFor(a, workload), a.seed);
  if (!w.ok()) return w.status();
  TimedLoad load;
  uint64_t n = 0;
  double last = 0;
  for (; n < plan.warmup + plan.requests; ++n) {
    workload::SessionStart s = (*w)->NextSession();
    if (!s.session || !s.arrival_s) break;
    last = *s.arrival_s / a.trace_speed;
    if (n == plan.warmup) load.warmup_s = last;
  }
  if (n == 0) return Status::InvalidArgument(workload + ": no timed requests");
  // Requests recorded in the same instant: one second's worth stands for their span.
  load.rate_rps = static_cast<double>(n) / std::max(last, 1.0 / a.trace_speed);
  return load;
}

// About 30 points of hit rate and TTFT over a run.
double SeriesWindow(const WorkloadPlan& plan, double rate_rps) {
  return std::max(1.0, static_cast<double>(plan.warmup + plan.requests) / rate_rps / 30);
}

// Prefix lengths of the simulated sweep the report shows: from the article's minimum, where
// long-context's shared 300-token preamble is all that is keyed (every request looks alike),
// to its maximum, where the unique question is keyed too (related requests split).
constexpr uint32_t kSweepPrefixLengths[] = {1024, 2048, 8192, 32768, 65536};

int Fail(const std::string& message, int code = 1) {
  std::cerr << "prefix-router demo: " << message << "\n";
  return code;
}

struct Fleet {
  std::vector<std::unique_ptr<engine::EngineServer>> engines;
  std::unique_ptr<gateway::Gateway> gateway;
  ~Fleet() {
    if (gateway) gateway->Stop();
    for (auto& e : engines) e->Stop();
  }
};

// Cold engines and a gateway routing with `routing`, all on loopback ports chosen by the OS.
Result<std::unique_ptr<Fleet>> StartFleet(const DemoArgs& a, double time_scale, const RoutingOptions& routing) {
  auto fleet = std::make_unique<Fleet>();
  gateway::GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.io_threads = 1;
  config.routing = routing;
  config.timeouts.drain = 0;
  for (uint32_t i = 0; i < a.instances; ++i) {
    engine::EngineOptions eo;
    eo.host = "127.0.0.1";
    eo.port = 0;
    eo.profile = a.profile;
    eo.time_scale = time_scale;
    eo.model = std::string(kModel);
    eo.stream_interval = kStreamInterval;
    // The demo's hit rates come from the responses' cached-token counts, which the emulator
    // (like vLLM) sends only when asked to.
    eo.enable_prompt_tokens_details = true;
    auto e = engine::EngineServer::Create(eo);
    if (!e.ok()) return e.status();
    if (Status s = (*e)->Start(); !s.ok()) return s;
    gateway::InstanceConfig ic;
    ic.name = "instance-" + std::to_string(i + 1);
    ic.url = "http://127.0.0.1:" + std::to_string((*e)->port());
    config.instances.push_back(ic);
    fleet->engines.push_back(std::move(*e));
  }
  if (Status s = gateway::ValidateConfig(config); !s.ok()) return s;
  auto g = gateway::Gateway::Create(config);
  if (!g.ok()) return g.status();
  if (Status s = (*g)->Start(); !s.ok()) return s;
  fleet->gateway = std::move(*g);
  return fleet;
}

Result<report::RunResult> RunThroughGateway(const DemoArgs& a, const std::string& workload, const std::string& strategy,
                                            double rate_rps, const WorkloadPlan& plan) {
  auto routing = sim::ParseStrategyName(strategy, RoutingOptions{});
  if (!routing.ok()) return routing.status();
  auto fleet = StartFleet(a, plan.time_scale, *routing);
  if (!fleet.ok()) return fleet.status();
  auto w = workload::MakeWorkload(workload, ParamsFor(a, workload), a.seed);
  if (!w.ok()) return w.status();

  loadgen::LoadOptions lo;
  lo.url = "http://127.0.0.1:" + std::to_string((*fleet)->gateway->port());
  lo.default_model = std::string(kModel);
  lo.stream = true;
  lo.mode = loadgen::Mode::kOpen;
  lo.rate_rps = rate_rps;  // a timed workload's sessions start at their own times instead
  lo.trace_speed = a.trace_speed;
  lo.requests = plan.warmup + plan.requests;
  lo.warmup_requests = plan.warmup;
  lo.time_scale = plan.time_scale;
  lo.timeout_s = 120;
  lo.seed = a.seed;
  for (uint32_t i = 0; i < a.instances; ++i) lo.instance_names.push_back("instance-" + std::to_string(i + 1));
  const bool tty = isatty(2) != 0;
  if (!a.quiet && tty) {
    lo.progress = [&](uint64_t done, uint64_t failed, uint64_t in_flight) {
      std::cerr << fmt::format("\r  {} {}: {}/{} done, {} failed, {} in flight   ", workload, strategy, done,
                               lo.requests, failed, in_flight)
                << std::flush;
    };
  }
  auto run = loadgen::RunLoad(lo, **w);
  if (!a.quiet && tty) std::cerr << "\r" << std::string(100, ' ') << "\r";
  if (!run.ok()) return run.status();

  report::RunResult r;
  r.source = "demo";
  r.workload = workload;
  r.strategy = strategy;
  r.instances = a.instances;
  r.seed = a.seed;
  r.ttft_kind = "client";
  r.settings["prefix_length"] = routing->prefix_length;
  r.settings["concurrency_threshold"] = routing->concurrency_threshold;
  if (routing->strategy == Strategy::kPrefixAware) r.settings["balance_factor"] = routing->balance_factor;
  r.settings["rate_rps"] = rate_rps;
  if (IsTimed(workload)) {
    r.settings["trace_speed"] = a.trace_speed;
  } else if (a.rate_rps <= 0) {
    r.settings["load_pct"] = a.load_pct;
  }
  r.settings["time_scale"] = plan.time_scale;
  r.settings["warmup"] = static_cast<double>(plan.warmup);
  r.extra["wall_s"] = run->wall_s;
  report::Summarize(run->records, report::SummaryOptions{a.instances, SeriesWindow(plan, rate_rps)}, r);
  // What the gateway and the HTTP hops add, in wall time: the client's TTFT minus the engine's
  // own modelled TTFT, both converted back to wall seconds.
  std::vector<double> overhead;
  for (const auto& rec : run->records) {
    if (rec.counted && !rec.error && rec.ttft_s >= 0 && rec.engine_ttft_s >= 0) {
      overhead.push_back((rec.ttft_s - rec.engine_ttft_s) * plan.time_scale);
    }
  }
  if (!overhead.empty()) {
    r.extra["routing_overhead_p50_s"] = report::Percentile(overhead, 0.5);
    r.extra["routing_overhead_p90_s"] = report::Percentile(overhead, 0.9);
  }
  for (const auto& [kind, count] : run->errors_by_kind) r.extra["errors_" + kind] = static_cast<double>(count);
  return r;
}

int RunDemo(const DemoArgs& a) {
  // The gateway's and engines' per-request logs would drown the table.
  spdlog::set_level(a.quiet ? spdlog::level::err : spdlog::level::warn);
  auto profile = engine_model::FindProfile(a.profile);
  if (!profile.ok()) return Fail(profile.status().message(), 2);
  if (a.instances < 2) return Fail("--instances must be at least 2", 2);
  if (!(a.load_pct > 0 && a.load_pct <= 150)) return Fail("--load must be in (0, 150]", 2);
  if (!(a.scale > 0)) return Fail("--scale must be > 0", 2);
  if (!(a.trace_speed > 0)) return Fail("--trace-speed must be > 0", 2);
  for (const std::string& s : a.strategies) {
    if (auto r = sim::ParseStrategyName(s, RoutingOptions{}); !r.ok()) return Fail(r.status().message(), 2);
    if (IsPeerStrategy(s))
      return Fail("strategy '" + s + "' is a peer's policy, re-implemented for `simulate` only", 2);
  }
  std::vector<std::string> workloads;
  for (const std::string& w : a.workloads) {
    // A demo run away from the repository root (an installed binary) has no slice: the default
    // list goes on without it; asking for mooncake, or for another file, needs the file.
    if (w == "mooncake" && !a.workloads_given && a.mooncake_file == kMooncakeSlice &&
        !std::filesystem::exists(a.mooncake_file)) {
      if (!a.quiet) {
        std::cerr << "mooncake: " << kMooncakeSlice
                  << " not found (run from the repository root, or give --mooncake-file): left out\n";
      }
      continue;
    }
    if (auto made = workload::MakeWorkload(w, ParamsFor(a, w), a.seed); !made.ok()) {
      return Fail(made.status().message(), 2);
    }
    workloads.push_back(w);
  }
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return Fail("cannot create " + a.out + ": " + ec.message());

  const auto started = std::chrono::steady_clock::now();
  std::vector<report::RunResult> results;
  for (const std::string& workload : workloads) {
    const WorkloadPlan plan = PlanFor(workload, a.scale);
    sim::SimOptions so;
    so.workload = workload;
    so.params = ParamsFor(a, workload);
    so.seed = a.seed;
    so.instances = a.instances;
    so.profile = *profile;
    so.trace_speed = a.trace_speed;
    const bool timed = IsTimed(workload);
    // The offered load: a share of random routing's saturation throughput on this fleet, as
    // the simulator measures it (closed loop, no think time), or --rate; a trace's own times
    // when timed (its mean rate is only reported).
    TimedLoad timed_load;
    double saturation = 0;  // measured only for --load
    double rate = a.rate_rps;
    if (timed) {
      auto load = TimedLoadFor(a, workload, plan);
      if (!load.ok()) return Fail(load.status().message(), 2);
      timed_load = *load;
      rate = timed_load.rate_rps;
    } else if (a.rate_rps <= 0) {
      auto measured = sim::SaturationThroughput(so, 32, 600, 200);
      if (!measured.ok()) return Fail(measured.status().message(), 2);
      saturation = *measured;
      rate = saturation * a.load_pct / 100;
    }
    if (!a.quiet && timed) {
      std::cerr << fmt::format(
          "{}: replaying {} at its recorded times x{:g} ({:.1f} req/s on average), {} warm-up + {} "
          "measured requests per strategy, engines {:.0f}x faster than real time\n",
          workload, a.mooncake_file, a.trace_speed, rate, plan.warmup, plan.requests, 1 / plan.time_scale);
    } else if (!a.quiet && a.rate_rps > 0) {
      std::cerr << fmt::format("{}: offering {:.1f} req/s (--rate), {} warm-up + {} measured requests per strategy\n",
                               workload, rate, plan.warmup, plan.requests);
    } else if (!a.quiet) {
      std::cerr << fmt::format(
          "{}: random saturates this fleet at {:.1f} req/s (simulated); offering {:.0f}% = {:.1f} "
          "req/s, {} warm-up + {} measured requests per strategy, engines {:.0f}x faster than "
          "real time\n",
          workload, saturation, a.load_pct, rate, plan.warmup, plan.requests, 1 / plan.time_scale);
    }
    for (const std::string& strategy : a.strategies) {
      auto r = RunThroughGateway(a, workload, strategy, rate, plan);
      if (!r.ok()) return Fail(workload + " " + strategy + ": " + r.status().message());
      if (saturation > 0) r->settings["saturation_rps"] = saturation;
      if (!a.quiet) {
        std::cerr << fmt::format("  {} {}: {} requests ({} failed), TTFT P50 {:.3f} s, hit rate {}\n", workload,
                                 strategy, r->requests, r->errors, r->ttft_p50_s, report::FormatHitRate(r->hit_rate));
      }
      results.push_back(std::move(*r));
      if (!a.no_simulate) {
        sim::SimOptions s = so;
        auto routing = sim::ParseStrategyName(strategy, RoutingOptions{});
        s.routing = *routing;
        s.strategy_label = strategy;
        s.arrivals = sim::Arrivals::kOpen;
        s.rate_rps = rate;
        s.max_requests = plan.warmup + plan.requests;
        s.duration_s = 1e9;
        s.warmup_s = timed ? timed_load.warmup_s : static_cast<double>(plan.warmup) / rate;
        s.series_window_s = SeriesWindow(plan, rate);
        s.bounds = true;
        auto sr = sim::Simulate(s);
        if (!sr.ok()) return Fail(sr.status().message());
        if (timed) {
          sr->result.settings["trace_speed"] = a.trace_speed;
        } else if (a.rate_rps <= 0) {
          sr->result.settings["load_pct"] = a.load_pct;
          sr->result.settings["saturation_rps"] = saturation;
        }
        results.push_back(std::move(sr->result));
      }
    }
  }
  // The prefix-length trade-off, simulated on long-context (the live runs use the default).
  if (!a.no_simulate && std::find(workloads.begin(), workloads.end(), "long-context") != workloads.end()) {
    const WorkloadPlan plan = PlanFor("long-context", a.scale);
    double rate = 0;
    for (const auto& r : results) {
      if (r.workload == "long-context" && r.source == "demo") rate = r.settings.at("rate_rps");
    }
    if (!a.quiet) std::cerr << "long-context: simulating prefix lengths 1024..65536 for prefix-aware\n";
    for (uint32_t length : kSweepPrefixLengths) {
      sim::SimOptions s;
      s.workload = "long-context";
      s.seed = a.seed;
      s.instances = a.instances;
      s.profile = *profile;
      const std::string_view prefix_aware = StrategyName(Strategy::kPrefixAware);
      auto routing = sim::ParseStrategyName(prefix_aware, RoutingOptions{});
      s.routing = *routing;
      s.routing.prefix_length = length;
      s.strategy_label = prefix_aware;
      s.arrivals = sim::Arrivals::kOpen;
      s.rate_rps = rate;
      s.max_requests = plan.warmup + plan.requests;
      s.duration_s = 1e9;
      s.warmup_s = static_cast<double>(plan.warmup) / rate;
      s.series_window_s = 0;
      auto sr = sim::Simulate(s);
      if (!sr.ok()) return Fail(sr.status().message());
      sr->result.settings["sweep"] = 1;  // marks the sweep's runs apart from the comparison
      results.push_back(std::move(sr->result));
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  std::cout << report::ComparisonTable(results);
  std::cout << fmt::format(
      "Demo rows: TTFT measured by the client through the gateway over loopback HTTP, in model "
      "seconds (wall / time scale); \"engine\" columns are the emulators' own modelled TTFTs. "
      "Simulate rows: the same workload, load and strategies in the simulator.\n"
      "Finished in {:.0f} s. Results: {}/results.json, report: {}/report.html\n",
      wall, a.out, a.out);
  const std::string json_path = a.out + "/results.json";
  const std::string html_path = a.out + "/report.html";
  if (Status s = report::WriteFile(json_path, report::ResultsJson(results)); !s.ok()) return Fail(s.message());
  report::ReportOptions ro;
  ro.title = "prefix-router demo";
  ro.notes.push_back("Made by: " + CommandLine());
  ro.notes.push_back(
      fmt::format("{} engine emulators (profile {}) and the gateway ran on loopback on this machine; each "
                  "strategy started with cold caches. Offered load of the generated workloads: {:.0f}% of "
                  "random routing's saturation throughput (measured in the simulator), Poisson arrivals.",
                  a.instances, a.profile, a.load_pct));
  if (std::find(workloads.begin(), workloads.end(), "mooncake") != workloads.end()) {
    ro.notes.push_back(
        fmt::format("mooncake: {} (the first 600 s of the Mooncake FAST'25 conversation trace from Moonshot "
                    "AI's Kimi; data/mooncake/NOTICE) replayed open loop at its recorded arrival times x{:g}, "
                    "with its recorded prompt and output lengths; each 512-token block id of the trace is a "
                    "fixed synthetic text, so requests share prefixes exactly as the trace's requests did.",
                    a.mooncake_file, a.trace_speed));
  }
  ro.notes.push_back(
      "The prefix-length sweep (simulated, long-context, prefix-aware) shows the trade-off the "
      "article describes: at 1,024 characters only the 300-token instruction preamble every "
      "request shares is keyed, so all requests look alike and pile onto one instance until "
      "bounded loads push them around (hit rate and TTFT suffer); from 2,048 the key reaches "
      "into each document and every document keeps its instance; at 65,536 the key includes "
      "the unique question after the 8,000-token (about 33,000-character) document, so requests "
      "that share the document split across instances and the hit rate falls back to random's.");
  ro.notes.push_back(
      "Two kinds of TTFT are shown. 'demo' rows: measured by the load generator at the first "
      "streamed content chunk, through the gateway, converted to model seconds (wall / time "
      "scale), so loopback, gateway and scheduling delays are magnified by 1 / time scale. "
      "'engine' columns: the emulators' own modelled TTFT (x-engine-timing). 'simulate' rows: the "
      "same runs in the discrete-event simulator (modelled).");
  if (Status s = report::WriteFile(html_path, report::ReportHtml(results, ro)); !s.ok()) return Fail(s.message());
  return 0;
}

}  // namespace

void AddDemoCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* cmd =
      app.add_subcommand("demo",
                         "Run the whole comparison on this machine: starts 7 engine emulators and the gateway on "
                         "loopback, replays long-context, sharegpt-like and the committed slice of the Mooncake "
                         "trace through the gateway for random, "
                         "least-outstanding-requests, prefix-aware with the managed service's spill "
                         "(prefix-aware-least-loaded-b0), ours (prefix-aware: next-preferred spill, bounded "
                         "loads) and cache-aware (the gateway's default strategy, marked \"(default)\" in the "
                         "table), simulates the same runs, prints the table and writes DIR/results.json and "
                         "DIR/report.html. Takes about 12 minutes on 2 cores.");
  cmd->add_option("--out", a->out, "Directory for results.json and report.html")->capture_default_str();
  auto* workload_opt =
      cmd->add_option("--workload", a->workloads, "Workloads, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--mooncake-file", a->mooncake_file,
                  "The Mooncake trace the mooncake workload replays (relative to the current "
                  "directory: scripts/demo.sh runs from the repository root; without it there the "
                  "default list leaves mooncake out)")
      ->capture_default_str();
  cmd->add_option("--trace-speed", a->trace_speed,
                  "Replay speed of the mooncake workload's recorded arrival times (--load and "
                  "--rate set the generated workloads' load)")
      ->capture_default_str();
  cmd->add_option("--strategy", a->strategies, "Strategies, comma-separated (see simulate --help)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Workload and arrival seed")->capture_default_str();
  cmd->add_option("--instances", a->instances, "Engine emulators to start")->capture_default_str();
  cmd->add_option("--profile", a->profile, "Engine profile (tiny-test for a quick smoke run)")->capture_default_str();
  cmd->add_option("--load", a->load_pct, "Offered load, % of random routing's saturation throughput")
      ->capture_default_str();
  cmd->add_option("--rate", a->rate_rps,
                  "Offer this many requests/s (model time) instead of --load's share of the "
                  "simulated saturation throughput");
  cmd->add_option("--scale", a->scale, "Multiplies the request counts (0.1 for a quick look; figures get noisier)")
      ->capture_default_str();
  cmd->add_flag("--no-simulate", a->no_simulate, "Skip the simulated runs beside the live ones");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  cmd->callback([a, exit_code, workload_opt] {
    a->workloads_given = workload_opt->count() > 0;
    *exit_code = RunDemo(*a);
  });
}

}  // namespace prefix_router::cli
