// epp_bench: the endpoint picker's pick latency per stream over loopback gRPC (docs/epp.md).
//
// Starts a gateway with the picker alone (listen: "", epp.listen on a free loopback port) in
// front of `--instances` instances (addresses only: the picker never connects to them), then
// plays Envoy for `--streams` requests one after another, each a chat body of `--body-bytes`
// sent in FULL_DUPLEX_STREAMED mode in chunks of `--chunk-bytes` (Envoy's are up to 64 KiB),
// with `--keys` distinct prompts. Per stream it measures
//   pick:    the last body chunk sent -> the headers response (the decision) received
//   request: the request headers sent -> the last body chunk echoed back
// and prints p50, p90, p99 and max of both in microseconds. The response phase (served
// endpoint, end of stream) runs after the clock stops, so that in-flight counts stay at 0.
//
//   build/release/src/epp_bench --streams 20000
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "epp/envoy_client.h"
#include "epp/ext_proc.h"
#include "gateway/config.h"
#include "gateway/gateway.h"

using namespace prefix_router;
using namespace prefix_router::epp::envoy_client;
using Clock = std::chrono::steady_clock;

namespace {

std::string ChatBody(size_t bytes, int key) {
  std::string system = "Shared system prompt number " + std::to_string(key) + ". ";
  while (system.size() + 200 < bytes) system += "You answer questions about the quarterly accounts carefully. ";
  return R"({"model":"llama","messages":[{"role":"system","content":")" + system +
         R"("},{"role":"user","content":"What changed this quarter?"}],"max_tokens":64})";
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  int streams = 5000;
  int instances = 8;
  size_t body_bytes = 32 * 1024;
  size_t chunk_bytes = 16 * 1024;
  int keys = 64;
  std::string strategy = "cache-aware";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--streams") streams = std::atoi(v);
    else if (flag == "--instances") instances = std::atoi(v);
    else if (flag == "--body-bytes") body_bytes = std::strtoull(v, nullptr, 10);
    else if (flag == "--chunk-bytes") chunk_bytes = std::strtoull(v, nullptr, 10);
    else if (flag == "--keys") keys = std::atoi(v);
    else if (flag == "--strategy") strategy = v;
    else {
      std::fprintf(stderr, "epp_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::err);  // discovery warns that the addresses refuse
  gateway::GatewayConfig c;
  c.listen = "";
  c.epp.listen = "127.0.0.1:0";
  c.io_threads = 1;
  c.health.interval = 0;
  c.timeouts.drain = 1;
  auto parsed = ParseStrategy(strategy);
  if (!parsed.ok()) {
    std::fprintf(stderr, "epp_bench: %s\n", parsed.status().message().c_str());
    return 2;
  }
  c.routing.strategy = *parsed;
  for (int i = 0; i < instances; ++i) {
    // Discard-port addresses on loopback: refused at once, so discovery's first round ends fast.
    c.instances.push_back(gateway::InstanceConfig{"i" + std::to_string(i), "http://127.0.0." + std::to_string(i + 2) + ":9"});
  }
  if (Status s = gateway::ValidateConfig(c); !s.ok()) {
    std::fprintf(stderr, "epp_bench: %s\n", s.ToString().c_str());
    return 2;
  }
  auto gw = gateway::Gateway::Create(c);
  if (!gw.ok()) {
    std::fprintf(stderr, "epp_bench: %s\n", gw.status().ToString().c_str());
    return 1;
  }
  auto server = epp::EppServer::Start(**gw, "127.0.0.1", 0);
  if (!server.ok()) {
    std::fprintf(stderr, "epp_bench: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const uint16_t port = (*server)->port();
  (*gw)->Attach(std::move(*server));
  if (Status s = (*gw)->Start(); !s.ok()) {
    std::fprintf(stderr, "epp_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!(*gw)->first_discovery_done() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  std::vector<std::string> bodies;
  for (int k = 0; k < keys; ++k) bodies.push_back(ChatBody(body_bytes, k));
  EnvoyClient client(port);
  std::vector<double> pick_us;
  std::vector<double> request_us;
  int errors = 0;
  const int warmup = std::min(streams / 10, 200);
  for (int n = 0; n < streams + warmup; ++n) {
    const std::string& body = bodies[static_cast<size_t>(n % keys)];
    std::vector<std::string> chunks;
    for (size_t at = 0; at < body.size(); at += chunk_bytes) chunks.push_back(body.substr(at, chunk_bytes));
    EnvoyStream s(client);
    const auto start = Clock::now();
    bool ok = s.Send(RequestHeaders("/v1/chat/completions", false));
    for (size_t i = 0; ok && i < chunks.size(); ++i) ok = s.Send(RequestBody(chunks[i], i + 1 == chunks.size()));
    const auto sent = Clock::now();
    auto first = s.Read();
    const auto picked = Clock::now();
    std::string endpoint = first ? DestinationHeader(*first) : "";
    for (size_t i = 0; first && i < chunks.size(); ++i) {
      if (!s.Read()) first.reset();
    }
    const auto echoed = Clock::now();
    if (!ok || !first || endpoint.empty()) {
      ++errors;
      continue;
    }
    if (n >= warmup) {
      pick_us.push_back(std::chrono::duration<double, std::micro>(picked - sent).count());
      request_us.push_back(std::chrono::duration<double, std::micro>(echoed - start).count());
    }
    s.Send(ResponseHeaders(endpoint.substr(0, endpoint.find(',')), false));
    s.Read();
    s.Send(ResponseBody("{}", true));
    s.Read();
    s.Close();
  }
  std::printf("epp_bench: %d streams, %d instances, strategy %s, body %zu bytes in %zu-byte chunks, %d keys, %d errors\n",
              static_cast<int>(pick_us.size()), instances, strategy.c_str(), bodies[0].size(), chunk_bytes, keys,
              errors);
  std::printf("pick    (last chunk sent -> decision)    p50 %8.1f us  p90 %8.1f us  p99 %8.1f us  max %8.1f us\n",
              Percentile(pick_us, 0.50), Percentile(pick_us, 0.90), Percentile(pick_us, 0.99),
              Percentile(pick_us, 1.0));
  std::printf("request (headers sent -> body echoed)    p50 %8.1f us  p90 %8.1f us  p99 %8.1f us  max %8.1f us\n",
              Percentile(request_us, 0.50), Percentile(request_us, 0.90), Percentile(request_us, 0.99),
              Percentile(request_us, 1.0));
  // Inside the picker: body complete -> decision (parse, key, block chain, picks), the mean from
  // prefix_router_routing_decision_seconds (warm-up included).
  const std::string text = (*gw)->MetricsResponse().body();
  auto sample = [&](std::string_view name) {
    const size_t at = text.find(std::string(name) + " ");
    return at == std::string::npos ? 0.0 : std::strtod(text.c_str() + at + name.size() + 1, nullptr);
  };
  const double count = sample("prefix_router_routing_decision_seconds_count");
  if (count > 0) {
    std::printf("decision inside the picker (body complete -> endpoints), mean %.1f us over %.0f decisions\n",
                sample("prefix_router_routing_decision_seconds_sum") / count * 1e6, count);
  }
  (*gw)->Stop();
  return errors == 0 ? 0 : 1;
}
