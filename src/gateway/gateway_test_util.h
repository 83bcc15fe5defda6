// Helpers shared by the gateway's tests: fleets of FakeUpstreams, configs, request bodies,
// readers of the gateway's live state, a log capture, temporary files, YAML validation.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/gateway.h"
#include "testing/fake_upstream.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::gateway::testing {

namespace pt = prefix_router::testing;

inline constexpr std::string_view kChat = "/v1/chat/completions";
inline constexpr std::string_view kInvocations = "/invocations";
inline constexpr std::string_view kInstance = "x-prefix-router-instance";
inline constexpr std::string_view kGroupHeader = "X-Amzn-SageMaker-Prefix-Aware-Id";
inline constexpr std::string_view kComponentHeader = "X-Amzn-SageMaker-Inference-Component";

// The gateway logs every start at info level; keep test output to warnings and errors.
inline void QuietLogs() { spdlog::set_level(spdlog::level::warn); }

using Fakes = std::vector<std::unique_ptr<pt::FakeUpstream>>;

// Fakes with these names, each on an ephemeral loopback port.
inline Fakes StartFakes(const std::vector<std::string>& names) {
  Fakes fakes;
  for (const auto& name : names) {
    auto fake = std::make_unique<pt::FakeUpstream>(name);
    const Status s = fake->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    fakes.push_back(std::move(fake));
  }
  return fakes;
}

inline int TotalRequests(const Fakes& fakes) {
  int n = 0;
  for (const auto& f : fakes) n += f->requests();
  return n;
}

inline int TotalInProgress(const Fakes& fakes) {
  int n = 0;
  for (const auto& f : fakes) n += f->in_progress();
  return n;
}

inline int TotalAborted(const Fakes& fakes) {
  int n = 0;
  for (const auto& f : fakes) n += f->aborted();
  return n;
}

// One instance per fake, named like it and serving every model; random routing; active health
// checks off; a short drain so that teardown never waits long.
inline GatewayConfig ConfigFor(const Fakes& fakes) {
  GatewayConfig c;
  c.routing.strategy = Strategy::kRandom;  // not kDefaultStrategy: tests name what they route by
  c.listen = "127.0.0.1:0";
  c.io_threads = 2;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  for (const auto& f : fakes) c.instances.push_back(InstanceConfig{f->name(), f->url()});
  return c;
}

// Prefix-aware on placement alone (no bounded load), so that a key's instance is a function of
// the available instances only.
inline RoutingOptions PlainPrefixAware() {
  RoutingOptions o;
  o.strategy = Strategy::kPrefixAware;
  o.prefix_length = kMinPrefixLength;
  o.balance_factor = 0;
  return o;
}

// Validates, creates and starts a gateway; nullptr (after a test failure) if any step fails.
inline std::unique_ptr<Gateway> StartGateway(GatewayConfig config) {
  if (Status s = ValidateConfig(config); !s.ok()) {
    ADD_FAILURE() << "config: " << s.ToString();
    return nullptr;
  }
  auto created = Gateway::Create(std::move(config));
  if (!created.ok()) {
    ADD_FAILURE() << "create: " << created.status().ToString();
    return nullptr;
  }
  std::unique_ptr<Gateway> gateway = std::move(*created);
  if (Status s = gateway->Start(); !s.ok()) {
    ADD_FAILURE() << "start: " << s.ToString();
    return nullptr;
  }
  return gateway;
}

inline int32_t TotalInFlight(const Gateway& g) {
  int32_t n = 0;
  for (uint32_t i = 0; i < g.routing()->fleet->size(); ++i) n += g.routing()->fleet->state(i).in_flight.load();
  return n;
}

// Requests admitted to the default pool and not yet ended.
inline int64_t DefaultPoolInFlight(const Gateway& g) { return g.routing()->default_pool.in_flight->load(); }

// Every in-flight count, per instance and per pool, and every fake's work, back to exactly 0.
inline void ExpectNothingInFlight(const Gateway& gw, const Fakes& fakes) {
  EXPECT_TRUE(pt::Eventually(
      [&] { return TotalInFlight(gw) == 0 && DefaultPoolInFlight(gw) == 0 && TotalInProgress(fakes) == 0; },
      std::chrono::milliseconds(10'000)))
      << "instances " << TotalInFlight(gw) << ", pool " << DefaultPoolInFlight(gw) << ", at the fakes "
      << TotalInProgress(fakes);
}

// A chat body whose system prompt is longer than the minimum prefix length, so that requests
// with the same cache key share a routing key.
inline std::string ChatBody(std::string_view model, std::string_view user, std::string_view cache_key = {},
                            bool stream = false) {
  static const std::string system = [] {
    std::string s;
    while (s.size() < 1500) s += "You are a careful assistant for the accounting team. ";
    return s;
  }();
  std::string b = R"({"model":")" + std::string(model) + R"(","messages":[{"role":"system","content":")" + system +
                  R"("},{"role":"user","content":")" + std::string(user) + "\"}]";
  if (!cache_key.empty()) b += R"(,"prompt_cache_key":")" + std::string(cache_key) + "\"";
  if (stream) b += R"(,"stream":true)";
  return b + "}";
}

inline pt::ClientRequest JsonRequest(std::string_view target, std::string body, pt::Headers headers = {}) {
  headers.emplace_back("Content-Type", "application/json");
  return pt::MakeRequest(http::bhttp::verb::post, target, std::move(body), headers);
}

// An SSE stream of `chunks` events, `delay` apart.
inline pt::Behavior SseStream(int chunks, std::chrono::milliseconds delay) {
  pt::Behavior b;
  b.sse = true;
  b.chunk_delay = delay;
  for (int i = 0; i < chunks; ++i) b.chunks.push_back("data: {\"n\":" + std::to_string(i) + "}\n\n");
  return b;
}

inline std::string Concat(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}

// The status /health reports for one instance ("up" or "ejected"; "" if absent).
inline std::string InstanceHealth(uint16_t port, const std::string& name) {
  const pt::ClientResponse r = pt::Get(port, "/health");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view state;
  if (parser.parse(r.body()).get(doc) || doc["instances"][name].get(state)) return "";
  return std::string(state);
}

// The `code` of an OpenAI-style error body ("" when absent, null or not such a body).
inline std::string ErrorCode(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view code;
  if (parser.parse(body).get(doc) || doc["error"]["code"].get(code)) return "";
  return std::string(code);
}

// A counter's value, or 0 when the series has not been created yet.
inline double CounterOrZero(uint16_t port, std::string_view series) {
  const double v = pt::Metric(port, series);
  return v < 0 ? 0 : v;
}

// The sink behind LogCapture: added to the default logger once, before main (so before any test
// starts a server thread), and never removed. Editing a logger's sink list while server threads
// log through it is a data race: a capture sink erased and freed mid-call once aborted a test
// with "pure virtual method called".
class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void Start() {
    std::lock_guard<std::mutex> lock(mutex_);
    text_.clear();
    active_ = true;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {  // under mutex_ (base_sink)
    if (!active_) return;
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    text_.append(line.data(), line.size());
  }
  void flush_() override {}

 private:
  bool active_ = false;
  std::string text_;
};

inline CaptureSink& TheCaptureSink() {
  static const std::shared_ptr<CaptureSink> sink = [] {
    auto s = std::make_shared<CaptureSink>();
    spdlog::default_logger()->sinks().push_back(s);
    return s;
  }();
  return *sink;
}
inline const bool kCaptureSinkInstalled = (TheCaptureSink(), true);

// Captures log lines at `level` and above while alive (the gateway tests run at warn). One at a
// time. REQUIRES: the default logger is the process's own (not one a test swapped in).
class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::info) : previous_(spdlog::get_level()) {
    TheCaptureSink().Start();
    spdlog::set_level(level);
  }
  ~LogCapture() {
    spdlog::set_level(previous_);
    TheCaptureSink().Stop();
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return TheCaptureSink().Text(); }
  // Occurrences of `what` in the captured text.
  size_t Count(std::string_view what) const {
    const std::string t = text();
    size_t n = 0;
    for (size_t at = t.find(what); at != std::string::npos; at = t.find(what, at + 1)) ++n;
    return n;
  }

 private:
  spdlog::level::level_enum previous_;
};

// A file in the temporary directory (named after the process and `name`), rewritten at will and
// removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / ("pr_test_" + std::to_string(::getpid()) + "_" + name))
                  .string()) {}
  ~TempFile() { std::filesystem::remove(path_); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void Write(const std::string& text) const { std::ofstream(path_, std::ios::trunc) << text; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Parses and validates YAML text; `out` (when not null) receives the parsed configuration.
inline Status ValidateYaml(const std::string& yaml, GatewayConfig* out = nullptr) {
  auto parsed = ParseConfigYaml(yaml);
  if (!parsed.ok()) return parsed.status();
  Status s = ValidateConfig(*parsed);
  if (out) *out = *parsed;
  return s;
}

}  // namespace prefix_router::gateway::testing
