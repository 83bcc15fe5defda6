// `prefix-router bench`: the HTTP load generator (loadgen/) against a gateway, an engine
// emulator or any OpenAI-compatible endpoint. Prints progress on stderr, a summary on stdout,
// and writes the run in the results format (docs/results-format.md) with --json / --csv.
//
// Exit codes: 0 when the run completed (request errors are reported, not fatal), 2 for usage
// errors, 1 when the endpoint could not be reached by any request (or a file could not be
// written).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#include <fmt/format.h>

#include "api/native_request.h"
#include "cli/commands.h"
#include "loadgen/loadgen.h"
#include "report/results.h"
#include "sim/simulator.h"
#include "workload/workload.h"

namespace prefix_router::cli {
namespace {

struct BenchArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string workload = "long-context";
  std::string trace;
  std::vector<std::string> params;
  uint64_t seed = 1;
  uint32_t concurrency = 16;
  double rate = 0;
  bool replay = false;
  double trace_speed = 1;
  uint64_t requests = 0;
  double duration_s = 0;
  uint64_t warmup = 0;
  bool stream = true;
  double stream_fraction = -1;  // < 0: not given
  double abort_fraction = 0;
  std::string model;
  std::string api = "chat";
  std::vector<std::string> inference_components;
  std::string tenants;
  double timeout_s = 300;
  double time_scale = 1;
  uint32_t threads = 1;
  std::string strategy = "unknown";
  uint32_t instances = 0;
  std::string json, csv;
  bool quiet = false;
  bool progress = false;
  // Which options were given (set after parsing).
  bool workload_given = false, concurrency_given = false, rate_given = false, requests_given = false,
       duration_given = false, no_stream_given = false, stream_fraction_given = false, abort_fraction_given = false;
};

constexpr uint64_t kDefaultRequests = 100;

int Fail(const std::string& message, int code = 2) {
  std::cerr << "prefix-router bench: " << message << "\n";
  return code;
}

// Workloads that carry arrival times (SessionStart::arrival_s): --replay follows them, --rate
// replaces them.
bool IsTimedWorkload(std::string_view name) { return name == "trace" || name == "mooncake"; }

// A trace replayed at a chosen Poisson rate instead of its recorded times.
class WithoutArrivalTimes final : public workload::Workload {
 public:
  explicit WithoutArrivalTimes(std::unique_ptr<workload::Workload> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  workload::SessionStart NextSession() override {
    workload::SessionStart s = inner_->NextSession();
    s.arrival_s.reset();
    return s;
  }
  double mean_turns() const override { return inner_->mean_turns(); }
  std::map<std::string, std::string> Parameters() const override { return inner_->Parameters(); }

 private:
  std::unique_ptr<workload::Workload> inner_;
};

// "123.4 ms" below a second, "1.234 s" above; "-" when unknown.
std::string Duration(double s) {
  if (!(s >= 0)) return "-";
  if (s < 1) return fmt::format("{:.1f} ms", s * 1000);
  return fmt::format("{:.3f} s", s);
}

// The measured span of the counted requests, model seconds (for the series window).
double MeasuredSpan(const std::vector<report::RequestRecord>& records) {
  double first = INFINITY, last = 0;
  for (const auto& r : records) {
    if (!r.counted) continue;
    first = std::min(first, r.start_s);
    last = std::max(last, r.start_s + std::max(0.0, r.e2e_s));
  }
  return std::isfinite(first) ? last - first : 0;
}

std::string Summary(const BenchArgs& a, const loadgen::LoadOptions& o, const loadgen::LoadRun& run,
                    const report::RunResult& r) {
  std::string out;
  const std::string loop = o.mode == loadgen::Mode::kClosed
                               ? fmt::format("closed loop, {} users", o.concurrency)
                               : (a.replay ? fmt::format("open loop, trace times x{}", o.trace_speed)
                                           : fmt::format("open loop, {} req/s", o.rate_rps));
  const std::string streaming = o.stream_fraction >= 0 ? fmt::format("{:g}% streaming", 100 * o.stream_fraction)
                                                       : (o.stream ? "streaming" : "not streaming");
  const std::string api = o.api == loadgen::ApiChoice::kNative ? ", native API" : "";
  const std::string model = o.default_model.empty() ? "model = component" : o.default_model;
  out += fmt::format("bench: {} against {} ({}, {}{}, {}), {} sent in {:.1f} s wall\n", r.workload, o.url, loop,
                     streaming, api, model, run.records.size() + run.aborted + run.aborted_warmup, run.wall_s);
  const std::string time_note = o.time_scale == 1 ? "" : fmt::format(" (model time: measured / {})", o.time_scale);
  const auto warmup =
      std::count_if(run.records.begin(), run.records.end(), [](const report::RequestRecord& x) { return !x.counted; });
  out += fmt::format("  requests      {} counted ({} warm-up excluded), {} errors\n", r.requests,
                     warmup + run.aborted_warmup, r.errors);
  if (o.abort_fraction > 0) {
    auto at = [&](const char* point) {
      auto it = run.aborted_by_point.find(point);
      return it == run.aborted_by_point.end() ? uint64_t{0} : it->second;
    };
    out += fmt::format(
        "  aborted       {} abandoned by the client, not counted above (sending {}, waiting {}, "
        "receiving {})\n",
        run.aborted, at("sending"), at("waiting"), at("receiving"));
  }
  if (r.requests == r.errors) {
    out += "  latency       - (no successful request)\n";
  } else {
    out += fmt::format("  TTFT          P50 {}  P90 {}  P99 {}  mean {}{}\n", Duration(r.ttft_p50_s),
                       Duration(r.ttft_p90_s), Duration(r.ttft_p99_s), Duration(r.ttft_mean_s), time_note);
    if (r.engine_ttft_p50_s >= 0) {
      out += fmt::format("  engine TTFT   P50 {}  P90 {}  P99 {}  (the engine's modelled time)\n",
                         Duration(r.engine_ttft_p50_s), Duration(r.engine_ttft_p90_s), Duration(r.engine_ttft_p99_s));
    }
    out += fmt::format("  e2e           P50 {}  P90 {}\n", Duration(r.e2e_p50_s), Duration(r.e2e_p90_s));
    out += fmt::format("  ITL           P50 {}\n", Duration(r.itl_p50_s));
  }
  if (std::isnan(r.hit_rate)) {
    out +=
        "  hit rate      n/a (no response carried usage.prompt_tokens_details.cached_tokens: vLLM "
        "sends it only with --enable-prompt-tokens-details)\n";
  } else {
    out += fmt::format("  hit rate      {:.1f}% of prompt tokens cached\n", 100 * r.hit_rate);
  }
  out += fmt::format("  throughput    {:.1f} req/s, {:.0f} output tok/s\n", r.throughput_rps, r.output_tokens_per_s);
  if (r.share.empty()) {
    out += "  share         - (no x-prefix-router-instance headers: not behind the gateway?)\n";
  } else {
    std::string shares;
    for (size_t i = 0; i < r.share.size(); ++i) {
      const std::string name = i < run.instance_names.size() ? run.instance_names[i] : "#" + std::to_string(i);
      shares += fmt::format("{}{} {:.1f}%", i ? ", " : "", name, 100 * r.share[i]);
    }
    out += "  share         " + shares + "\n";
    out += fmt::format("  overflow      {:.1f}% of requests\n", 100 * r.overflow_rate);
  }
  if (!o.inference_components.empty()) {
    std::string counts;
    for (size_t i = 0; i < o.inference_components.size(); ++i) {
      counts += fmt::format("{}{} {} ({} errors)", i ? ", " : "", o.inference_components[i],
                            i < run.component_requests.size() ? run.component_requests[i] : 0,
                            i < run.component_errors.size() ? run.component_errors[i] : 0);
    }
    out += "  components    " + counts + "\n";
  }
  if (!run.errors_by_kind.empty()) {
    std::string kinds;
    for (const auto& [kind, n] : run.errors_by_kind)
      kinds += fmt::format("{}{}: {}", kinds.empty() ? "" : ", ", kind, n);
    out += "  errors        " + kinds + "\n";
    out += "  first error   " + run.first_error + "\n";
  }
  return out;
}

int RunBench(BenchArgs& a) {
  // ---- usage checks: everything that is the user's to fix exits 2 before anything is sent.
  if (!a.trace.empty() && a.workload_given) return Fail("give --workload or --trace, not both");
  if (a.concurrency_given + a.rate_given + a.replay > 1) {
    return Fail("give one of --concurrency (closed loop), --rate (open loop) and --replay");
  }
  if (a.quiet && a.progress) return Fail("give --quiet or --progress, not both");
  if (a.stream_fraction_given && !(a.stream_fraction >= 0 && a.stream_fraction <= 1)) {
    return Fail("--stream-fraction: must be in [0, 1]");
  }
  if (a.stream_fraction_given && a.no_stream_given) return Fail("give --no-stream or --stream-fraction, not both");
  if (a.abort_fraction_given && !(a.abort_fraction >= 0 && a.abort_fraction <= 1)) {
    return Fail("--abort-fraction: must be in [0, 1]");
  }
  if (a.concurrency_given && a.concurrency == 0) return Fail("--concurrency: must be at least 1");
  if (a.rate_given && !(a.rate > 0)) return Fail("--rate: must be above 0 requests/s");
  if (!(a.duration_s >= 0)) return Fail("--duration: must be >= 0");
  if (!(a.timeout_s > 0)) return Fail("--timeout: must be above 0");
  if (!(a.time_scale > 0) || a.time_scale > 1000) return Fail("--time-scale: must be in (0, 1000]");
  if (!(a.trace_speed > 0)) return Fail("--trace-speed: must be above 0");
  if (a.requests_given && a.requests == 0 && !(a.duration_s > 0)) {
    return Fail("--requests 0 needs --duration (something must stop the run)");
  }
  if (a.api != "chat" && a.api != "native") return Fail("--api: '" + a.api + "' is not one of chat, native");
  for (size_t i = 0; i < a.inference_components.size(); ++i) {
    const std::string& c = a.inference_components[i];
    if (Status s = api::ValidateInferenceComponentName(c); !s.ok())
      return Fail("--inference-component: " + s.message());
    if (std::count(a.inference_components.begin(), a.inference_components.end(), c) > 1) {
      return Fail("--inference-component: '" + c + "' is given twice");
    }
  }
  const std::string workload_name = a.trace.empty() ? a.workload : "trace";
  workload::ParamMap params;
  for (const std::string& p : a.params) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos || eq == 0) return Fail("--param '" + p + "': expected NAME=VALUE");
    params[p.substr(0, eq)] = p.substr(eq + 1);
  }
  if (!a.trace.empty()) params["file"] = a.trace;
  if (a.replay && !IsTimedWorkload(workload_name)) {
    return Fail("--replay needs recorded arrival times (--trace FILE, or --workload mooncake)");
  }
  auto made = workload::MakeWorkload(workload_name, params, a.seed);
  if (!made.ok()) return Fail(made.status().message());
  std::unique_ptr<workload::Workload> wl = std::move(*made);
  if (a.rate_given && IsTimedWorkload(workload_name)) wl = std::make_unique<WithoutArrivalTimes>(std::move(wl));

  loadgen::LoadOptions o;
  o.url = a.url;
  o.api = a.api == "native" ? loadgen::ApiChoice::kNative : loadgen::ApiChoice::kWorkload;
  o.inference_components = a.inference_components;
  if (!a.tenants.empty()) {
    auto t = workload::ParseTenantClasses(a.tenants);
    if (!t.ok()) return Fail("--tenants: " + t.status().message());
    o.tenants = std::move(*t);
  }
  o.stream = a.stream;
  if (a.stream_fraction_given) o.stream_fraction = a.stream_fraction;
  o.abort_fraction = a.abort_fraction;
  if (a.rate_given || a.replay) {
    o.mode = loadgen::Mode::kOpen;
    o.rate_rps = a.rate;
    o.trace_speed = a.trace_speed;
  } else {
    o.mode = loadgen::Mode::kClosed;
    o.concurrency = a.concurrency;
  }
  const uint64_t measured = a.requests_given || a.duration_given ? a.requests : kDefaultRequests;
  o.requests = measured ? measured + a.warmup : 0;
  o.duration_s = a.duration_s;
  o.warmup_requests = a.warmup;
  o.timeout_s = a.timeout_s;
  o.time_scale = a.time_scale;
  o.threads = a.threads;
  o.seed = a.seed;

  // The model: as given, else each request's inference component, else the first the endpoint
  // serves.
  if (!a.model.empty()) {
    o.default_model = a.model;
  } else if (!o.inference_components.empty()) {
    o.default_model.clear();
  } else {
    auto models = loadgen::ListModels(a.url, std::min(a.timeout_s, 5.0));
    if (!models.ok() && models.status().code() == StatusCode::kInvalidArgument) return Fail(models.status().message());
    if (models.ok() && !models->empty()) {
      o.default_model = models->front();
      if (!a.quiet) std::cerr << "prefix-router bench: model " << o.default_model << " (from GET /v1/models)\n";
    } else if (!a.quiet) {
      std::cerr << "prefix-router bench: no model list ("
                << (models.ok() ? std::string("empty") : models.status().message()) << "); sending model \""
                << o.default_model << "\" (set --model)\n";
    }
  }

  // Progress: a line about once a second, rewritten in place on a terminal.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const bool show_progress = !a.quiet && (tty || a.progress);
  uint64_t last_done = 0;
  auto last_at = std::chrono::steady_clock::now();
  bool printed = false;
  if (show_progress) {
    o.progress = [&](uint64_t done, uint64_t failed, uint64_t in_flight) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - last_at).count();
      const double rps = dt > 0 ? static_cast<double>(done - last_done) / dt : 0;
      last_done = done;
      last_at = now;
      const std::string line =
          fmt::format("  {} done, {} failed, {} in flight, {:.1f} rps", done, failed, in_flight, rps);
      std::cerr << (tty ? "\r\033[K" + line : line + "\n") << std::flush;
      printed = true;
    };
  }

  auto result = loadgen::RunLoad(o, *wl);
  if (printed && tty) std::cerr << "\n";
  if (!result.ok()) {
    return Fail(result.status().message(), result.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  }
  const loadgen::LoadRun& run = *result;

  report::RunResult r;
  r.source = "bench";
  r.workload = std::string(wl->name());
  r.strategy = a.strategy;
  r.instances = a.instances ? a.instances : static_cast<uint32_t>(run.instance_names.size());
  r.seed = a.seed;
  r.ttft_kind = "client";
  if (o.mode == loadgen::Mode::kClosed) {
    r.settings["concurrency"] = o.concurrency;
  } else if (a.replay) {
    r.settings["trace_speed"] = o.trace_speed;
  } else {
    r.settings["rate_rps"] = o.rate_rps;
  }
  r.settings["duration_s"] = o.duration_s;
  r.settings["requests"] = static_cast<double>(measured);
  r.settings["time_scale"] = o.time_scale;
  r.settings["warmup"] = static_cast<double>(o.warmup_requests);
  r.extra["wall_s"] = run.wall_s;
  if (a.stream_fraction_given) r.settings["stream_fraction"] = o.stream_fraction;
  if (o.api == loadgen::ApiChoice::kNative) r.settings["native_api"] = 1;
  if (!o.inference_components.empty()) {
    r.settings["inference_components"] = static_cast<double>(o.inference_components.size());
    for (size_t i = 0; i < o.inference_components.size(); ++i) {
      r.extra["component_requests." + o.inference_components[i]] = static_cast<double>(run.component_requests[i]);
      r.extra["component_errors." + o.inference_components[i]] = static_cast<double>(run.component_errors[i]);
    }
  }
  if (a.abort_fraction_given) {
    r.settings["abort_fraction"] = o.abort_fraction;
    r.extra["aborted"] = static_cast<double>(run.aborted);
    for (const char* point : {"sending", "waiting", "receiving"}) {
      auto it = run.aborted_by_point.find(point);
      r.extra[std::string("aborted_") + point] = static_cast<double>(it == run.aborted_by_point.end() ? 0 : it->second);
    }
  }
  report::SummaryOptions so;
  so.instances = r.instances;
  so.series_window_s = std::max(1.0, (o.duration_s > 0 ? o.duration_s : MeasuredSpan(run.records)) / 60);
  report::Summarize(run.records, so, r);
  const std::vector<report::TenantLabel> labels = sim::TenantLabels(o.tenants);
  report::AddFlowFigures(run.records, labels, /*ceiling=*/false, r);

  std::cout << Summary(a, o, run, r) << report::FlowLines({r}, labels) << std::flush;
  const std::vector<report::RunResult> runs{r};
  if (!a.json.empty()) {
    if (Status s = report::WriteFile(a.json, report::ResultsJson(runs)); !s.ok()) return Fail(s.message(), 1);
  }
  if (!a.csv.empty()) {
    if (Status s = report::WriteFile(a.csv, report::ResultsCsv(runs)); !s.ok()) return Fail(s.message(), 1);
  }
  const auto connect = run.errors_by_kind.find("connect");
  if (!run.records.empty() && connect != run.errors_by_kind.end() && connect->second == run.records.size()) {
    return Fail("the endpoint " + o.url + " could not be reached by any request: " + run.first_error, 1);
  }
  return 0;
}

// A numeric option parsed here rather than by CLI11, so that a malformed number is a usage
// error with exit code 2 like every other (CLI11's own conversion errors exit with 104).
template <typename T>
CLI::Option* AddNumber(CLI::App* cmd, const std::string& name, T& target, const std::string& help,
                       bool show_default = true) {
  CLI::Option* opt = cmd->add_option_function<std::string>(
      name,
      [&target, name](const std::string& text) {
        T value{};
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || ptr != end || text.empty()) {
          throw CLI::ConversionError(
              name + ": '" + text + "' is not " + (std::is_integral_v<T> ? "a non-negative integer" : "a number"), 2);
        }
        target = value;
      },
      help);
  opt->type_name(std::is_integral_v<T> ? "UINT" : "FLOAT");
  if (show_default) opt->default_str(fmt::format("{}", target));
  return opt;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  std::string names;
  for (auto n : workload::WorkloadNames()) names += (names.empty() ? "" : ", ") + std::string(n);
  CLI::App* cmd =
      app.add_subcommand("bench",
                         "Measure an endpoint over HTTP: send a workload's requests to a gateway, an engine emulator "
                         "or any OpenAI-compatible server and report TTFT (to the first streamed token), end-to-end "
                         "latency, inter-token latency, prefix-cache hit rate (from usage.prompt_tokens_details."
                         "cached_tokens, which vLLM and `prefix-router engine` send only with "
                         "--enable-prompt-tokens-details; n/a without), throughput and, behind the gateway, each "
                         "instance's share of requests. "
                         "Closed loop (--concurrency users) by default; --rate for an open loop.");
  cmd->add_option("--url", a->url, "Base URL of the endpoint (http only); the API path is appended")
      ->capture_default_str();
  auto* workload_opt =
      cmd->add_option("--workload", a->workload, "Workload: " + names + " (docs/workloads.md)")->capture_default_str();
  cmd->add_option("--trace", a->trace,
                  "Send the requests of a JSONL trace (docs/trace-format.md); same as --workload trace "
                  "--param file=FILE");
  cmd->add_option("--param", a->params,
                  "Workload parameter NAME=VALUE (repeatable), e.g. documents=64 (docs/workloads.md)");
  AddNumber(cmd, "--seed", a->seed, "Seed of the workload and of the open loop's arrival times");
  auto* concurrency_opt = AddNumber(cmd, "--concurrency", a->concurrency,
                                    "Closed loop: number of users, each sending its session's next request when the "
                                    "previous one has finished (the default mode)");
  auto* rate_opt = AddNumber(cmd, "--rate", a->rate,
                             "Open loop instead: requests per second (model time), sessions starting "
                             "at Poisson times (exclusive with --concurrency)",
                             false);
  cmd->add_flag("--replay", a->replay,
                "Open loop at a trace's recorded arrival times (with --trace or --workload mooncake; "
                "see --trace-speed)");
  AddNumber(cmd, "--trace-speed", a->trace_speed, "Replay speed of --replay (2 = twice as fast)");
  auto* requests_opt = AddNumber(cmd, "--requests", a->requests,
                                 "Requests to measure, sent after the warm-up (default: 100 unless "
                                 "--duration is given; 0 = no limit)",
                                 false);
  auto* duration_opt = AddNumber(cmd, "--duration", a->duration_s,
                                 "Stop sending after this many seconds of model time, warm-up "
                                 "included (0 = no limit)",
                                 false);
  AddNumber(cmd, "--warmup", a->warmup, "Requests sent first and left out of every figure (warms the caches)");
  auto* stream_opt = cmd->add_flag("--stream,!--no-stream", a->stream,
                                   "Stream responses (SSE, with usage; the default): TTFT is the first content chunk. "
                                   "--no-stream: whole responses, TTFT = end to end");
  auto* stream_fraction_opt =
      AddNumber(cmd, "--stream-fraction", a->stream_fraction,
                "Mixed traffic: this share of requests (0..1) streams, the rest are sent "
                "non-streaming; which ones is fixed by --seed (instead of --stream/--no-stream)",
                false);
  auto* abort_fraction_opt =
      AddNumber(cmd, "--abort-fraction", a->abort_fraction,
                "Share of requests (0..1) the client abandons by closing the connection at a random "
                "point (seeded): mid-request body, while waiting for the response head, or "
                "mid-stream. Reported as aborted, not as errors, and left out of every other figure",
                false);
  cmd->add_option("--model", a->model,
                  "Model for requests that name none (default: the request's inference component "
                  "with --inference-component, else the first model the endpoint lists at GET "
                  "/v1/models)");
  cmd->add_option("--api", a->api,
                  "chat: each request over the API the workload builds it for (the OpenAI chat route; "
                  "trace rows and noisy-native as recorded). native: every request to POST "
                  "/invocations, the body being the same JSON the chat route gets (less "
                  "prompt_cache_key: a routing group goes in X-Amzn-SageMaker-Prefix-Aware-Id)")
      ->capture_default_str();
  cmd->add_option("--inference-component", a->inference_components,
                  "An inference component of the endpoint (repeatable): every request carries "
                  "X-Amzn-SageMaker-Inference-Component with one of them, each session's drawn by "
                  "--seed; the summary and results count requests per component. A request naming "
                  "no model names its component (the component is the endpoint's model, and the "
                  "gateway picks an OpenAI request's pool by `model`) unless --model is given");
  cmd->add_option("--tenants", a->tenants,
                  "Tenant classes NAME:PRIORITY:SHARE[:TTFT_OBJECTIVE_MS],... e.g. "
                  "interactive:1:0.2:500,batch:0:0.8 (docs/flow-control.md): each session belongs to one "
                  "class, drawn by --seed; its requests carry x-prefix-router-priority, "
                  "x-gateway-inference-fairness-id and, with an objective, x-slo-ttft-ms. With "
                  "--rate a class sends SHARE x the rate (a:0:0.5,b:0:5 is b at 10x its half); "
                  "otherwise shares are weights. One line per class follows the summary (429s "
                  "counted as refused)");
  AddNumber(cmd, "--timeout", a->timeout_s, "Per-request time limit in wall seconds (connect to last byte)");
  AddNumber(cmd, "--time-scale", a->time_scale,
            "The engines' --time-scale (wall seconds per model second): measured times are divided "
            "by it, --duration and --rate are in model time");
  AddNumber(cmd, "--threads", a->threads, "I/O threads of the load generator (0 = one per core)");
  cmd->add_option("--strategy", a->strategy,
                  "Label recorded in the results: the strategy the gateway under test runs (the "
                  "bench does not route)")
      ->capture_default_str();
  AddNumber(cmd, "--instances", a->instances,
            "Instances behind the endpoint (length of the share vector; default: the number of "
            "instance names seen in x-prefix-router-instance headers)",
            false);
  cmd->add_option("--json", a->json, "Write the run as JSON (docs/results-format.md)");
  cmd->add_option("--csv", a->csv, "Write the run as CSV");
  cmd->add_flag("--quiet", a->quiet, "No progress or notes on stderr");
  cmd->add_flag("--progress", a->progress, "Progress lines on stderr even when it is not a terminal");
  cmd->callback([a, exit_code, workload_opt, concurrency_opt, rate_opt, requests_opt, duration_opt, stream_opt,
                 stream_fraction_opt, abort_fraction_opt] {
    a->no_stream_given = stream_opt->count() > 0 && !a->stream;
    a->stream_fraction_given = stream_fraction_opt->count() > 0;
    a->abort_fraction_given = abort_fraction_opt->count() > 0;
    a->workload_given = workload_opt->count() > 0;
    a->concurrency_given = concurrency_opt->count() > 0;
    a->rate_given = rate_opt->count() > 0;
    a->requests_given = requests_opt->count() > 0;
    a->duration_given = duration_opt->count() > 0;
    *exit_code = RunBench(*a);
  });
}

}  // namespace prefix_router::cli
