#include "gateway/config_flags.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <system_error>
#include <utility>

#include "api/key_normalisation.h"
#include "core/fleet.h"

namespace prefix_router::gateway {
namespace {

// ---------------------------------------------------------------------------------------------
// Strict value conversion. CLI11's own converters accept octal and hex (strtoull base 0) and
// wrap "-1" around for 64-bit unsigned targets; a flag must read like the YAML field it sets.

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::optional<uint64_t> ToUnsigned(std::string_view s, uint64_t max) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || ptr != s.data() + s.size() || v > max) return std::nullopt;
  return v;
}

// Throws CLI::ConversionError: CLI11 reports it like its own conversion failures.
[[noreturn]] void Reject(const std::string& flag, const std::string& why) {
  throw CLI::ConversionError(flag + ": " + why);
}

template <typename T>
T ConvertFlag(const std::string& flag, const std::string& value);

template <>
std::string ConvertFlag<std::string>(const std::string&, const std::string& value) {
  return value;
}

template <typename T>
T ConvertUnsigned(const std::string& flag, const std::string& value) {
  const std::optional<uint64_t> v = ToUnsigned(value, std::numeric_limits<T>::max());
  if (!v) {
    Reject(flag, "expected a non-negative integer of at most " +
                     std::to_string(std::numeric_limits<T>::max()) + ", got " + Quote(value));
  }
  return static_cast<T>(*v);
}

template <>
uint32_t ConvertFlag<uint32_t>(const std::string& flag, const std::string& value) {
  return ConvertUnsigned<uint32_t>(flag, value);
}

template <>
uint64_t ConvertFlag<uint64_t>(const std::string& flag, const std::string& value) {
  return ConvertUnsigned<uint64_t>(flag, value);
}

// A finite decimal number; `expected` names it in the error ("a number of seconds").
double ConvertNumber(const std::string& flag, const std::string& value, const std::string& expected) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() ||
      !std::isfinite(v)) {
    Reject(flag, "expected " + expected + ", got " + Quote(value));
  }
  return v;
}

// Every other double flag is a timeout; --balance-factor registers its own converter.
template <>
double ConvertFlag<double>(const std::string& flag, const std::string& value) {
  return ConvertNumber(flag, value, "a number of seconds");
}

template <>
bool ConvertFlag<bool>(const std::string& flag, const std::string& value) {
  if (value == "true") return true;
  if (value == "false") return false;
  Reject(flag, "expected true or false, got " + Quote(value));
}

// The core's messages start with "strategy: " / "spill_mode: "; the flag name replaces that.
std::string AfterField(const Status& s) {
  const size_t colon = s.message().find(": ");
  return colon == std::string::npos ? s.message() : s.message().substr(colon + 2);
}

template <>
Strategy ConvertFlag<Strategy>(const std::string& flag, const std::string& value) {
  Result<Strategy> r = ParseStrategy(value);
  if (!r.ok()) Reject(flag, AfterField(r.status()));
  return *r;
}

template <>
SpillMode ConvertFlag<SpillMode>(const std::string& flag, const std::string& value) {
  Result<SpillMode> r = ParseSpillMode(value);
  if (!r.ok()) Reject(flag, AfterField(r.status()));
  return *r;
}

template <>
LoadMeasure ConvertFlag<LoadMeasure>(const std::string& flag, const std::string& value) {
  Result<LoadMeasure> r = ParseLoadMeasure(value);
  if (!r.ok()) Reject(flag, AfterField(r.status()));
  return *r;
}

template <>
TokenizerSource ConvertFlag<TokenizerSource>(const std::string& flag, const std::string& value) {
  Result<TokenizerSource> r = ParseTokenizerSource(value);
  if (!r.ok()) Reject(flag, AfterField(r.status()));
  return *r;
}

template <>
LogFormat ConvertFlag<LogFormat>(const std::string& flag, const std::string& value) {
  Result<LogFormat> r = ParseLogFormat(value);
  if (!r.ok()) Reject(flag, AfterField(r.status()));
  return *r;
}

template <typename T>
void AddValue(CLI::App& cmd, const std::string& flag, std::optional<T>& target,
              const std::string& type_name, const std::string& help) {
  cmd.add_option_function<std::string>(
         flag, [&target, flag](const std::string& value) { target = ConvertFlag<T>(flag, value); },
         help)
      ->type_name(type_name);
}

// The shortest form that reads back exactly: 1.5, 300.
std::string Number(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// "Sets <field>: <what>. Default: <default>. Range: <range>."
std::string Help(const std::string& field, const std::string& what, const std::string& default_value,
                 const std::string& range) {
  return "Sets " + field + ": " + what + ". Default: " + default_value + ". Range: " + range + ".";
}

// ---------------------------------------------------------------------------------------------
// BuildConfig helpers.

bool HasRoutingFlags(const ConfigFlags& f) {
  return f.strategy || f.prefix_length || f.concurrency_threshold || f.spill_mode || f.load_measure || f.tokenizer ||
         f.balance_factor || f.max_in_flight || f.canonical_json || !f.exclude_fields.empty() ||
         !f.exclude_patterns.empty();
}

void ApplyRoutingFlags(const ConfigFlags& f, RoutingOptions& o) {
  if (f.strategy) o.strategy = *f.strategy;
  if (f.prefix_length) o.prefix_length = *f.prefix_length;
  if (f.concurrency_threshold) o.concurrency_threshold = *f.concurrency_threshold;
  if (f.spill_mode) o.spill = *f.spill_mode;
  if (f.load_measure) o.load_measure = *f.load_measure;
  if (f.tokenizer) o.tokenizer = *f.tokenizer;
  if (f.balance_factor) o.balance_factor = *f.balance_factor;
  if (f.max_in_flight) o.max_in_flight = *f.max_in_flight;
  if (f.canonical_json) o.key_normalisation.canonical_json = *f.canonical_json;
  if (!f.exclude_fields.empty()) o.key_normalisation.exclude_fields = f.exclude_fields;
  if (!f.exclude_patterns.empty()) o.key_normalisation.exclude_patterns = f.exclude_patterns;
}

// The file's pools were resolved against the file's `routing`. A routing flag changes that
// final `routing`, so each pool field the file leaves unset takes the flag's value, exactly as
// if the flag were written in the file's `routing` section. Which fields a pool sets is only in
// the YAML, so it is read again (it parsed a moment ago; this is startup, not a hot path).
Status InheritRoutingFlags(const ConfigFlags& flags, GatewayConfig& config) {
  if (config.pools.empty() || !HasRoutingFlags(flags)) return Status::Ok();
  std::ifstream in(flags.config_file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return Status::InvalidArgument(flags.config_file +
                                   ": cannot read the configuration file again");
  }
  try {
    const YAML::Node root = YAML::Load(text.str());
    const YAML::Node pools = root["pools"];
    for (auto& [name, options] : config.pools) {
      const YAML::Node pool = pools.IsMap() ? pools[name] : YAML::Node();
      const auto unset = [&pool](const char* field) { return !pool.IsMap() || !pool[field]; };
      if (flags.strategy && unset("routing_strategy")) options.strategy = *flags.strategy;
      if (flags.prefix_length && unset("prefix_length")) options.prefix_length = *flags.prefix_length;
      if (flags.concurrency_threshold && unset("concurrency_threshold")) {
        options.concurrency_threshold = *flags.concurrency_threshold;
      }
      if (flags.spill_mode && unset("spill_mode")) options.spill = *flags.spill_mode;
      if (flags.load_measure && unset("load_measure")) options.load_measure = *flags.load_measure;
      if (flags.tokenizer && unset("tokenizer")) options.tokenizer = *flags.tokenizer;
      if (flags.balance_factor && unset("balance_factor")) {
        options.balance_factor = *flags.balance_factor;
      }
      if (flags.max_in_flight && unset("max_in_flight")) options.max_in_flight = *flags.max_in_flight;
      const YAML::Node key =
          pool.IsMap() && pool["key_normalisation"] ? pool["key_normalisation"] : YAML::Node();
      const auto key_unset = [&key](const char* field) { return !key.IsMap() || !key[field]; };
      KeyNormalisation& k = options.key_normalisation;
      if (flags.canonical_json && key_unset("canonical_json")) k.canonical_json = *flags.canonical_json;
      if (!flags.exclude_fields.empty() && key_unset("exclude_fields")) k.exclude_fields = flags.exclude_fields;
      if (!flags.exclude_patterns.empty() && key_unset("exclude_patterns")) {
        k.exclude_patterns = flags.exclude_patterns;
      }
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(flags.config_file + ": " + e.what());
  }
  return Status::Ok();
}

template <typename T, typename U>
void Override(const std::optional<T>& flag, U& field) {
  if (flag) field = *flag;
}

}  // namespace

void AddConfigFlags(CLI::App& cmd, ConfigFlags& flags) {
  const GatewayConfig d;  // the defaults the help text quotes
  const TimeoutsConfig& t = d.timeouts;
  const HealthConfig& h = d.health;

  cmd.add_option("--config", flags.config_file,
                 "YAML configuration file (examples/router.yaml documents every field); flags given with it "
                 "override its fields. Default: none (built-in defaults and flags only).")
      ->type_name("FILE");
  AddValue(cmd, "--listen", flags.listen, "HOST:PORT",
           Help("listen", "address of the client listener (IPv4, host name or [IPv6])", d.listen,
                "port 0..65535, 0 = any free port"));
  AddValue(cmd, "--io-threads", flags.io_threads, "N",
           Help("io_threads", "I/O threads", std::to_string(d.io_threads) + " (one per core)",
                "0..256"));
  AddValue(cmd, "--decision-headers", flags.decision_headers, "true|false",
           Help("decision_headers",
                "add x-prefix-router-instance/-decision/-rank headers to responses",
                d.decision_headers ? "true" : "false", "true | false"));
  AddValue(cmd, "--unknown-path-status", flags.unknown_path_status, "CODE",
           Help("unknown_path_status",
                "the status (with an OpenAI-style JSON error) of a request to a path the gateway "
                "does not route",
                std::to_string(d.unknown_path_status), "403 | 404 | 410 | 421 | 501"));

  AddValue(cmd, "--strategy", flags.strategy, "NAME",
           Help("routing.routing_strategy", "routing strategy of the default pool",
                std::string(StrategyName(d.routing.strategy)),
                StrategyNames(" | ")));
  AddValue(cmd, "--prefix-length", flags.prefix_length, "N",
           Help("routing.prefix_length",
                "leading bytes (native API) or characters (OpenAI API) keyed by prefix-aware",
                std::to_string(d.routing.prefix_length),
                std::to_string(kMinPrefixLength) + ".." + std::to_string(kMaxPrefixLength)));
  AddValue(cmd, "--concurrency-threshold", flags.concurrency_threshold, "N",
           Help("routing.concurrency_threshold",
                "in-flight requests per instance before prefix-aware spills",
                std::to_string(d.routing.concurrency_threshold),
                std::to_string(kMinConcurrencyThreshold) + ".." +
                    std::to_string(kMaxConcurrencyThreshold)));
  AddValue(cmd, "--spill-mode", flags.spill_mode, "MODE",
           Help("routing.spill_mode", "where prefix-aware sends a request when its first choice is full",
                std::string(SpillModeName(d.routing.spill)), "next-preferred | least-loaded"));
  AddValue(cmd, "--load-measure", flags.load_measure, "MEASURE",
           Help("routing.load_measure",
                "what \"least loaded\" compares (least-outstanding-requests, least-loaded spill): "
                "in-flight requests, or their estimated prompt tokens (body bytes / 4) plus one per "
                "request, so that a long prefill weighs more than a short one, or engine: the "
                "running and waiting requests the engines report on their /metrics (scraped every "
                "engine_metrics.interval) plus those sent since, one view shared by gateway replicas",
                std::string(LoadMeasureName(d.routing.load_measure)), "requests | prompt-tokens | engine"));
  AddValue(cmd, "--tokenizer", flags.tokenizer, "SOURCE",
           Help("routing.tokenizer",
                "where kv-aware and dynamo-kv get the prompt's token ids to match the blocks the "
                "engines report: local, the gateway's engine-compatible tokenizer (the emulator's; "
                "it does not match a real model's), or engine, POST /tokenize on a routable "
                "instance of the pool (vLLM), one round trip per request bounded by "
                "timeouts.tokenize",
                std::string(TokenizerSourceName(d.routing.tokenizer)), "local | engine"));
  cmd.add_option_function<std::string>(
         "--balance-factor",
         [&flags](const std::string& value) {
           flags.balance_factor = ConvertNumber("--balance-factor", value, "a number");
         },
         Help("routing.balance_factor",
              "prefix-aware bounded load: an instance is also full at F x its weight share of the "
              "pool's in-flight requests (at least 4) or, when the pool is busy, at 5% over its "
              "share of recent requests; a key moved off a full instance stays where it went; "
              "0 = off (threshold only, the managed service's behaviour)",
              Number(d.routing.balance_factor),
              "0, or " + Number(kMinBalanceFactor) + ".." + Number(kMaxBalanceFactor)))
      ->type_name("F");
  AddValue(cmd, "--max-in-flight", flags.max_in_flight, "N",
           Help("routing.max_in_flight",
                "requests in flight in the default pool beyond which new ones get 429 with "
                "Retry-After",
                std::to_string(d.routing.max_in_flight) + " (no ceiling)",
                "0.." + std::to_string(kMaxPoolInFlight)));

  AddValue(cmd, "--canonical-json", flags.canonical_json, "true|false",
           Help("routing.key_normalisation.canonical_json",
                "native API: key the canonical JSON of the body (sorted members, no whitespace, one "
                "escaping) instead of its raw bytes; non-JSON bodies keep raw bytes "
                "(docs/normalisation.md)",
                "false", "true | false"));
  cmd.add_option("--exclude-field", flags.exclude_fields,
                 Help("routing.key_normalisation.exclude_fields",
                      "native API: a JSON member left out of the canonical form, which it implies "
                      "(repeatable; replaces the file's list): name, a.b.c, * = any one key",
                      "none", "at most " + std::to_string(api::kMaxExcludeFields) + " paths"))
      ->type_name("PATH");
  cmd.add_option("--exclude-pattern", flags.exclude_patterns,
                 Help("routing.key_normalisation.exclude_patterns",
                      "a regular expression (Perl syntax) whose matches are removed from the keyed "
                      "text: OpenAI message and prompt text, native string values (repeatable; "
                      "replaces the file's list)",
                      "none", "at most " + std::to_string(api::kMaxExcludePatterns) + " patterns"))
      ->type_name("REGEX");

  cmd.add_option("--instance", flags.instances,
                 "Sets instances (repeatable; replaces the file's instances): URL, NAME=URL or "
                 "NAME=URL;weight=N;models=a,b with URL http(s)://host[:port][/path]. Default: none "
                 "(at least one instance, here or in the file); name host:port, weight 1, no "
                 "models = serves every name. Range: weight 1.." +
                     std::to_string(kMaxInstanceWeight) + ".")
      ->type_name("SPEC")
      ->allow_extra_args(false);

  AddValue(cmd, "--max-request-body-bytes", flags.max_request_body_bytes, "BYTES",
           Help("limits.max_request_body_bytes", "larger request bodies get 413",
                std::to_string(d.max_request_body_bytes) + " (32 MiB)",
                "1024..1073741824 (1 KiB..1 GiB)"));
  AddValue(cmd, "--max-header-bytes", flags.max_header_bytes, "BYTES",
           Help("limits.max_header_bytes", "larger request headers get 431",
                std::to_string(d.max_header_bytes) + " (64 KiB)", "1024..1048576 (1 KiB..1 MiB)"));
  cmd.add_option_function<std::string>(
         "--max-connections",
         [&flags](const std::string& value) {
           if (value == "auto") {
             flags.max_connections = kAutoMaxConnections;
             return;
           }
           flags.max_connections = ConvertFlag<uint32_t>("--max-connections", value);
         },
         Help("limits.max_connections",
              "open client connections beyond which a new one gets 503 and is closed; auto: half "
              "of the descriptor limit left after a reserve for listeners, health checks and "
              "scrapes (logged at start); 0 = no limit",
              "auto", "auto or 0..1000000"))
      ->type_name("N|auto");
  AddValue(cmd, "--max-connections-per-client", flags.max_connections_per_client, "N",
           Help("limits.max_connections_per_client",
                "open connections from one client address beyond which a new one gets 429 "
                "(too_many_connections_from_client) and is closed; leave 0 behind a load balancer "
                "whose address every client shares",
                "0 (no limit)", "0..1000000"));

  AddValue(cmd, "--connect-timeout", flags.connect_timeout, "SECONDS",
           Help("timeouts.connect", "upstream TCP connect", Number(t.connect), "(0, 600]"));
  AddValue(cmd, "--first-byte-timeout", flags.first_byte_timeout, "SECONDS",
           Help("timeouts.first_byte", "upstream response headers after the request is sent",
                Number(t.first_byte), "(0, 3600]"));
  AddValue(cmd, "--idle-timeout", flags.idle_timeout, "SECONDS",
           Help("timeouts.idle", "between upstream body chunks", Number(t.idle), "(0, 3600]"));
  AddValue(cmd, "--total-timeout", flags.total_timeout, "SECONDS",
           Help("timeouts.total", "whole exchange", Number(t.total) + " (no limit)",
                "[0, 86400], 0 = no limit"));
  AddValue(cmd, "--client-read-timeout", flags.client_read_timeout, "SECONDS",
           Help("timeouts.client_read", "reading a client's request head and body",
                Number(t.client_read), "(0, 3600]"));
  AddValue(cmd, "--client-write-timeout", flags.client_write_timeout, "SECONDS",
           Help("timeouts.client_write", "one write to a slow client", Number(t.client_write),
                "(0, 3600]"));
  AddValue(cmd, "--client-idle-timeout", flags.client_idle_timeout, "SECONDS",
           Help("timeouts.client_idle", "keep-alive wait for a client's next request",
                Number(t.client_idle), "(0, 3600]"));
  AddValue(cmd, "--per-try-timeout", flags.per_try_first_byte_timeout, "SECONDS",
           Help("timeouts.per_try_first_byte",
                "an attempt with no response byte this long after dispatch (nothing sent to the "
                "client yet) is cancelled and retried on the next instance",
                Number(t.per_try_first_byte) + " (off)", "[0, 3600], 0 = off"));
  AddValue(cmd, "--drain-timeout", flags.drain_timeout, "SECONDS",
           Help("timeouts.drain", "on SIGTERM, how long in-flight requests may finish",
                Number(t.drain), "[0, 3600]"));

  AddValue(cmd, "--max-retries", flags.max_retries, "N",
           Help("retries.max_retries",
                "further instances tried before any byte reached the client",
                std::to_string(d.max_retries), "0..10"));

  AddValue(cmd, "--health-path", flags.health_path, "PATH",
           Help("health.path", "active health check: GET this path, 2xx = success", h.path,
                "a path starting with '/'"));
  AddValue(cmd, "--health-interval", flags.health_interval, "SECONDS",
           Help("health.interval", "seconds between checks of one instance", Number(h.interval),
                "[0, 3600], 0 disables checks"));
  AddValue(cmd, "--health-timeout", flags.health_timeout, "SECONDS",
           Help("health.timeout", "per check", Number(h.timeout), "(0, 600]"));
  AddValue(cmd, "--unhealthy-threshold", flags.unhealthy_threshold, "N",
           Help("health.unhealthy_threshold", "consecutive failed checks to eject an instance",
                std::to_string(h.unhealthy_threshold), "1..100"));
  AddValue(cmd, "--healthy-threshold", flags.healthy_threshold, "N",
           Help("health.healthy_threshold", "consecutive successful checks to readmit it",
                std::to_string(h.healthy_threshold), "1..100"));
  AddValue(cmd, "--passive-failures", flags.passive_failures, "N",
           Help("health.passive_failures",
                "consecutive connect failures of real traffic to eject an instance",
                std::to_string(h.passive_failures), "0..100, 0 = off"));

  AddValue(cmd, "--log-format", flags.log_format, "FORMAT",
           Help("log.format",
                "log lines as text, or as one JSON object per line (ts, level, msg and the event's "
                "fields)",
                std::string(LogFormatName(d.log.format)), "text | json"));
  cmd.add_flag_function(
      "--access-log,!--no-access-log",
      [&flags](int64_t count) { flags.access_log = count > 0; },
      Help("log.access_log",
           "one log line per request (method, path, status, instance, decision, attempts, "
           "duration, time to first byte)",
           "off", "--access-log (on) | --no-access-log (off)"));
}

Result<InstanceConfig> ParseInstanceFlag(std::string_view spec) {
  const auto fail = [spec](const std::string& why) {
    return Status::InvalidArgument("--instance " + Quote(spec) + ": " + why);
  };
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t semi = spec.find(';', start);
    parts.push_back(spec.substr(start, semi - start));
    if (semi == std::string_view::npos) break;
    start = semi + 1;
  }
  const std::string_view head = parts[0];
  if (head.empty()) return fail("expected URL, NAME=URL or NAME=URL;weight=N;models=a,b");

  InstanceConfig instance;
  const size_t scheme = head.find("://");
  const size_t eq = head.find('=');
  if (eq != std::string_view::npos && (scheme == std::string_view::npos || eq < scheme)) {
    instance.name = std::string(head.substr(0, eq));
    instance.url = std::string(head.substr(eq + 1));
    if (instance.name.empty()) return fail("the name before '=' is empty");
    if (instance.url.empty()) return fail("no URL after '='");
  } else {
    instance.url = std::string(head);
  }

  bool weight_set = false;
  bool models_set = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view attr = parts[i];
    const size_t aeq = attr.find('=');
    const std::string_view key = attr.substr(0, aeq);
    const std::string_view value =
        aeq == std::string_view::npos ? std::string_view() : attr.substr(aeq + 1);
    if (key == "weight" && aeq != std::string_view::npos) {
      if (weight_set) return fail("weight is given twice");
      weight_set = true;
      const std::optional<uint64_t> w = ToUnsigned(value, std::numeric_limits<uint32_t>::max());
      if (!w) return fail("weight: expected a non-negative integer, got " + Quote(value));
      instance.weight = static_cast<uint32_t>(*w);
    } else if (key == "models" && aeq != std::string_view::npos) {
      if (models_set) return fail("models is given twice");
      models_set = true;
      for (size_t start = 0;;) {
        const size_t comma = value.find(',', start);
        const std::string_view model = value.substr(start, comma - start);
        if (model.empty()) return fail("models: empty name in " + Quote(value));
        instance.models.emplace_back(model);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else {
      return fail("unknown attribute " + Quote(attr) + "; expected weight=N or models=a,b");
    }
  }
  return instance;
}

Result<GatewayConfig> BuildConfig(const ConfigFlags& flags) {
  GatewayConfig config;
  if (!flags.config_file.empty()) {
    Result<GatewayConfig> loaded = LoadConfigFile(flags.config_file);
    if (!loaded.ok()) return loaded.status();
    config = std::move(loaded).value();
    if (Status s = InheritRoutingFlags(flags, config); !s.ok()) return s;
  }

  Override(flags.listen, config.listen);
  Override(flags.io_threads, config.io_threads);
  Override(flags.decision_headers, config.decision_headers);
  Override(flags.unknown_path_status, config.unknown_path_status);
  ApplyRoutingFlags(flags, config.routing);
  Override(flags.max_request_body_bytes, config.max_request_body_bytes);
  Override(flags.max_header_bytes, config.max_header_bytes);
  Override(flags.max_connections, config.max_connections);
  Override(flags.max_connections_per_client, config.max_connections_per_client);
  TimeoutsConfig& t = config.timeouts;
  Override(flags.connect_timeout, t.connect);
  Override(flags.first_byte_timeout, t.first_byte);
  Override(flags.idle_timeout, t.idle);
  Override(flags.total_timeout, t.total);
  Override(flags.client_read_timeout, t.client_read);
  Override(flags.client_write_timeout, t.client_write);
  Override(flags.client_idle_timeout, t.client_idle);
  Override(flags.drain_timeout, t.drain);
  Override(flags.per_try_first_byte_timeout, t.per_try_first_byte);
  Override(flags.max_retries, config.max_retries);
  HealthConfig& h = config.health;
  Override(flags.health_path, h.path);
  Override(flags.health_interval, h.interval);
  Override(flags.health_timeout, h.timeout);
  Override(flags.unhealthy_threshold, h.unhealthy_threshold);
  Override(flags.healthy_threshold, h.healthy_threshold);
  Override(flags.passive_failures, h.passive_failures);
  Override(flags.log_format, config.log.format);
  Override(flags.access_log, config.log.access_log);

  if (!flags.instances.empty()) {
    std::vector<InstanceConfig> instances;
    for (const std::string& spec : flags.instances) {
      Result<InstanceConfig> r = ParseInstanceFlag(spec);
      if (!r.ok()) return r.status();
      instances.push_back(std::move(r).value());
    }
    config.instances = std::move(instances);
  }

  if (Status s = ValidateConfig(config); !s.ok()) {
    if (s.message().starts_with("instances: ")) {
      return Status(s.code(), s.message() + " (give --instance URL, or --config FILE with instances)");
    }
    return s;
  }
  return config;
}

}  // namespace prefix_router::gateway
