// libFuzzer target: YAML text -> GatewayConfig (ParseConfigYaml) -> ValidateConfig.
//
// The input is the YAML text itself. Beyond "no crash, no sanitizer report, no exception
// escapes", each input is checked against the contract of gateway/config.h:
//   - parsing is deterministic (the same text twice gives the same config or the same error);
//   - a config that validates satisfies every documented range and cross-field rule, validates
//     again unchanged (validation is idempotent), and is accepted by what the gateway builds
//     from it at startup (FleetSnapshot::Create, MakePolicy, an eligible instance per pool);
//   - a validated config written back as YAML reads and validates to the same config.
// A violation aborts with a message, which libFuzzer reports as a crash.
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/fleet.h"
#include "core/policy.h"
#include "gateway/config.h"

namespace {

using namespace prefix_router;
using namespace prefix_router::gateway;

[[noreturn]] void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "gateway_config_fuzzer: invariant violated: %s\n%s\n", what, detail.c_str());
  std::abort();
}

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) Fail(#cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

std::string Number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Every field, parsed ones included, in a fixed order: equal dumps mean equal configs.
void DumpRouting(std::string& out, const RoutingOptions& o) {
  out += std::string(StrategyName(o.strategy)) + " " + std::to_string(o.prefix_length) + " " +
         std::to_string(o.concurrency_threshold) + " " + std::string(SpillModeName(o.spill)) + " " +
         Number(o.balance_factor) + "\n";
}

std::string Dump(const GatewayConfig& c) {
  std::string out;
  out += "listen '" + c.listen + "' '" + c.listen_host + "' " + std::to_string(c.listen_port) + "\n";
  out += "io_threads " + std::to_string(c.io_threads) + " decision_headers " + std::to_string(c.decision_headers) +
         "\nrouting ";
  DumpRouting(out, c.routing);
  for (const auto& [name, o] : c.pools) {
    out += "pool '" + name + "' ";
    DumpRouting(out, o);
  }
  for (const InstanceConfig& i : c.instances) {
    out += "instance '" + i.name + "' '" + i.url + "' " + std::to_string(i.weight) + " '" + i.host + "' " +
           std::to_string(i.port) + " '" + i.base_path + "' models";
    for (const std::string& m : i.models) out += " '" + m + "'";
    out += "\n";
  }
  out += "limits " + std::to_string(c.max_request_body_bytes) + " " + std::to_string(c.max_header_bytes) + "\n";
  const TimeoutsConfig& t = c.timeouts;
  out += "timeouts";
  for (double v : {t.connect, t.first_byte, t.idle, t.total, t.client_read, t.client_write, t.client_idle, t.drain}) {
    out += " " + Number(v);
  }
  out += "\nretries " + std::to_string(c.max_retries) + "\n";
  const HealthConfig& h = c.health;
  out += "health '" + h.path + "' " + Number(h.interval) + " " + Number(h.timeout) + " " +
         std::to_string(h.unhealthy_threshold) + " " + std::to_string(h.healthy_threshold) + " " +
         std::to_string(h.passive_failures) + "\n";
  return out;
}

std::string Outcome(const Result<GatewayConfig>& r) { return r.ok() ? Dump(*r) : r.status().ToString(); }

bool HeaderSafe(const std::string& s) {
  for (char c : s) {
    if (c <= ' ' || c >= 0x7f) return false;
  }
  return true;
}

void CheckRouting(const RoutingOptions& o, const std::string& where) {
  CHECK(o.prefix_length >= kMinPrefixLength && o.prefix_length <= kMaxPrefixLength, where);
  CHECK(o.concurrency_threshold >= kMinConcurrencyThreshold && o.concurrency_threshold <= kMaxConcurrencyThreshold,
        where);
  CHECK(o.balance_factor == 0 || (o.balance_factor >= kMinBalanceFactor && o.balance_factor <= kMaxBalanceFactor),
        where);
  CHECK(o.Validate().ok(), where);
  CHECK(MakePolicy(o) != nullptr, where);
}

// (0, hi] when `positive`, else [0, hi].
void CheckSeconds(double v, bool positive, double hi, const std::string& where) {
  CHECK(std::isfinite(v) && v <= hi, where);
  CHECK(positive ? v > 0 : v >= 0, where);
}

// The documented ranges and rules of a config that ValidateConfig accepted.
void CheckValid(const GatewayConfig& c) {
  const std::string dump = Dump(c);
  CHECK(!c.listen_host.empty(), dump);
  CHECK(c.io_threads <= 256, dump);
  CheckRouting(c.routing, dump);
  for (const auto& [name, o] : c.pools) CheckRouting(o, "pool '" + name + "'\n" + dump);
  CHECK(!c.instances.empty(), dump);
  std::set<std::string> names;
  std::vector<InstanceSpec> specs;
  for (const InstanceConfig& i : c.instances) {
    CHECK(!i.name.empty() && HeaderSafe(i.name), dump);
    CHECK(names.insert(i.name).second, dump);
    CHECK(i.weight >= 1 && i.weight <= kMaxInstanceWeight, dump);
    CHECK(!i.host.empty() && i.port >= 1, dump);
    CHECK(i.base_path.empty() || (i.base_path.front() == '/' && i.base_path.back() != '/'), dump);
    for (const std::string& m : i.models) CHECK(!m.empty(), dump);
    specs.push_back({i.name, i.url, i.weight, i.models});
  }
  CHECK(c.max_request_body_bytes >= 1024 && c.max_request_body_bytes <= (1u << 30), dump);
  CHECK(c.max_header_bytes >= 1024 && c.max_header_bytes <= (1u << 20), dump);
  const TimeoutsConfig& t = c.timeouts;
  CheckSeconds(t.connect, true, 600, dump);
  for (double v : {t.first_byte, t.idle, t.client_read, t.client_write, t.client_idle}) {
    CheckSeconds(v, true, 3600, dump);
  }
  CheckSeconds(t.total, false, 86400, dump);
  CheckSeconds(t.drain, false, 3600, dump);
  CHECK(c.max_retries <= 10, dump);
  const HealthConfig& h = c.health;
  CHECK(!h.path.empty() && h.path.front() == '/' && HeaderSafe(h.path), dump);
  CheckSeconds(h.interval, false, 3600, dump);
  CheckSeconds(h.timeout, true, 600, dump);
  CHECK(h.unhealthy_threshold >= 1 && h.unhealthy_threshold <= 100, dump);
  CHECK(h.healthy_threshold >= 1 && h.healthy_threshold <= 100, dump);
  CHECK(h.passive_failures <= 100, dump);

  // What Gateway::Create builds from the config must accept it.
  auto fleet = FleetSnapshot::Create(specs);
  CHECK(fleet.ok(), fleet.status().ToString() + "\n" + dump);
  for (const auto& [name, o] : c.pools) {
    CHECK(!name.empty(), dump);
    CHECK(!(*fleet)->Eligible(name).empty(), "pool '" + name + "'\n" + dump);
  }
}

void EmitRouting(YAML::Emitter& out, const RoutingOptions& o) {
  out << YAML::BeginMap;
  out << YAML::Key << "routing_strategy" << YAML::Value << std::string(StrategyName(o.strategy));
  out << YAML::Key << "prefix_length" << YAML::Value << o.prefix_length;
  out << YAML::Key << "concurrency_threshold" << YAML::Value << o.concurrency_threshold;
  out << YAML::Key << "spill_mode" << YAML::Value << std::string(SpillModeName(o.spill));
  out << YAML::Key << "balance_factor" << YAML::Value << Number(o.balance_factor);
  out << YAML::EndMap;
}

// The user-facing fields of `c` as YAML (the parsed ones are recomputed by validation).
std::string Emit(const GatewayConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "listen" << YAML::Value << c.listen;
  out << YAML::Key << "io_threads" << YAML::Value << c.io_threads;
  out << YAML::Key << "decision_headers" << YAML::Value << (c.decision_headers ? "true" : "false");
  out << YAML::Key << "routing" << YAML::Value;
  EmitRouting(out, c.routing);
  out << YAML::Key << "pools" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, o] : c.pools) {
    out << YAML::Key << name << YAML::Value;
    EmitRouting(out, o);
  }
  out << YAML::EndMap;
  out << YAML::Key << "instances" << YAML::Value << YAML::BeginSeq;
  for (const InstanceConfig& i : c.instances) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << i.name;
    out << YAML::Key << "url" << YAML::Value << i.url;
    out << YAML::Key << "weight" << YAML::Value << i.weight;
    out << YAML::Key << "models" << YAML::Value << YAML::BeginSeq;
    for (const std::string& m : i.models) out << m;
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "max_request_body_bytes" << YAML::Value << c.max_request_body_bytes;
  out << YAML::Key << "max_header_bytes" << YAML::Value << c.max_header_bytes;
  out << YAML::EndMap;
  const TimeoutsConfig& t = c.timeouts;
  out << YAML::Key << "timeouts" << YAML::Value << YAML::BeginMap;
  const std::pair<const char*, double> timeouts[] = {{"connect", t.connect},
                                                     {"first_byte", t.first_byte},
                                                     {"idle", t.idle},
                                                     {"total", t.total},
                                                     {"client_read", t.client_read},
                                                     {"client_write", t.client_write},
                                                     {"client_idle", t.client_idle},
                                                     {"drain", t.drain}};
  for (const auto& [k, v] : timeouts) out << YAML::Key << k << YAML::Value << Number(v);
  out << YAML::EndMap;
  out << YAML::Key << "retries" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "max_retries" << YAML::Value << c.max_retries << YAML::EndMap;
  const HealthConfig& h = c.health;
  out << YAML::Key << "health" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "path" << YAML::Value << h.path;
  out << YAML::Key << "interval" << YAML::Value << Number(h.interval);
  out << YAML::Key << "timeout" << YAML::Value << Number(h.timeout);
  out << YAML::Key << "unhealthy_threshold" << YAML::Value << h.unhealthy_threshold;
  out << YAML::Key << "healthy_threshold" << YAML::Value << h.healthy_threshold;
  out << YAML::Key << "passive_failures" << YAML::Value << h.passive_failures;
  out << YAML::EndMap;
  out << YAML::EndMap;
  return out.good() ? std::string(out.c_str(), out.size()) : std::string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Result<GatewayConfig> parsed = ParseConfigYaml(text);
  const Result<GatewayConfig> again = ParseConfigYaml(text);
  CHECK(Outcome(parsed) == Outcome(again), Outcome(parsed) + "\nthen\n" + Outcome(again));
  if (!parsed.ok()) {
    // Bad text is the user's mistake, described; Internal would mean an unexpected exception.
    CHECK(parsed.status().code() == StatusCode::kInvalidArgument, parsed.status().ToString());
    return 0;
  }

  GatewayConfig config = *parsed;
  const Status valid = ValidateConfig(config);
  if (!valid.ok()) {
    CHECK(valid.code() == StatusCode::kInvalidArgument, valid.ToString());
    CHECK(!valid.message().empty());
    return 0;
  }
  CheckValid(config);

  GatewayConfig revalidated = config;
  const Status again_valid = ValidateConfig(revalidated);
  CHECK(again_valid.ok(), again_valid.ToString() + "\n" + Dump(config));
  CHECK(Dump(revalidated) == Dump(config), Dump(config) + "\nrevalidated\n" + Dump(revalidated));

  // yaml-cpp refuses to emit some strings (invalid UTF-8): then there is nothing to read back.
  const std::string yaml = Emit(config);
  if (yaml.empty()) return 0;
  Result<GatewayConfig> reread = ParseConfigYaml(yaml);
  CHECK(reread.ok(), reread.status().ToString() + "\n" + yaml);
  const Status reread_valid = ValidateConfig(*reread);
  CHECK(reread_valid.ok(), reread_valid.ToString() + "\n" + yaml);
  CHECK(Dump(*reread) == Dump(config), Dump(config) + "\nre-read from\n" + yaml + "\nas\n" + Dump(*reread));
  return 0;
}
