#include "gateway/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

namespace prefix_router::gateway {
namespace {

// ---------------------------------------------------------------------------------------------
// Strict text conversion, shared by YAML scalars, flags and --set. Errors start with the path.

Status Expected(const std::string& path, std::string_view what, std::string_view text) {
  return Status::InvalidArgument(path + ": expected " + std::string(what) + ", got '" + std::string(text) + "'");
}

std::string_view WithoutPlus(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  return s;
}

template <typename T>
Status ParseUnsignedText(std::string_view text, const std::string& path, T& out) {
  static_assert(std::is_unsigned_v<T>);
  const std::string_view s = WithoutPlus(text);
  const auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(s)) {
    return Expected(path, s.starts_with('-') && digits(s.substr(1)) ? "a non-negative integer" : "an integer", text);
  }
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && v > std::numeric_limits<T>::max())) {
    return Status::InvalidArgument(path + ": " + std::string(text) + " is too large (at most " +
                                   std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  if (ec != std::errc() || ptr != s.data() + s.size()) return Expected(path, "a non-negative integer", text);
  out = static_cast<T>(v);
  return Status::Ok();
}

// A finite decimal number. Negative values parse, and fail the range check with the range named.
Status ParseNumberText(std::string_view text, const std::string& path, std::string_view what, double& out) {
  const std::string_view s = WithoutPlus(text);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) {
    return Expected(path, what, text);
  }
  out = v;
  return Status::Ok();
}

Status ParseBoolText(std::string_view text, const std::string& path, bool& out) {
  if (text == "true" || text == "True" || text == "TRUE") {
    out = true;
    return Status::Ok();
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    out = false;
    return Status::Ok();
  }
  return Expected(path, "true or false", text);
}

// The shortest text that reads back exactly: 1.5, 300.
std::string FormatDouble(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Replaces the leading "field: " of a message from a Parse function with `path`.
Status WithPath(const Status& s, const std::string& path) {
  const std::string& m = s.message();
  const size_t colon = m.find(": ");
  return Status(s.code(), path + ": " + (colon == std::string::npos ? m : m.substr(colon + 2)));
}

// How a field's C++ type reads and prints: integers, doubles (seconds or plain numbers),
// booleans, strings, optional booleans and names from a fixed list.
template <typename T>
struct Codec;

template <>
struct Codec<uint32_t> {
  static Status Read(std::string_view t, const std::string& p, FieldKind, uint32_t& out) {
    return ParseUnsignedText(t, p, out);
  }
  static std::string Show(uint32_t v) { return std::to_string(v); }
};
template <>
struct Codec<uint64_t> {
  static Status Read(std::string_view t, const std::string& p, FieldKind, uint64_t& out) {
    return ParseUnsignedText(t, p, out);
  }
  static std::string Show(uint64_t v) { return std::to_string(v); }
};
template <>
struct Codec<double> {
  static Status Read(std::string_view t, const std::string& p, FieldKind kind, double& out) {
    return ParseNumberText(t, p, kind == FieldKind::kSeconds ? "a number of seconds" : "a number", out);
  }
  static std::string Show(double v) { return FormatDouble(v); }
};
template <>
struct Codec<bool> {
  static Status Read(std::string_view t, const std::string& p, FieldKind, bool& out) {
    return ParseBoolText(t, p, out);
  }
  static std::string Show(bool v) { return v ? "true" : "false"; }
};
template <>
struct Codec<std::string> {
  static Status Read(std::string_view t, const std::string&, FieldKind, std::string& out) {
    out = std::string(t);
    return Status::Ok();
  }
  static std::string Show(const std::string& v) { return v; }
};
template <>
struct Codec<std::optional<bool>> {
  static Status Read(std::string_view t, const std::string& p, FieldKind, std::optional<bool>& out) {
    bool b = false;
    if (Status s = ParseBoolText(t, p, b); !s.ok()) return s;
    out = b;
    return Status::Ok();
  }
  static std::string Show(const std::optional<bool>& v) { return v ? (*v ? "true" : "false") : "absent"; }
};

template <typename E, Result<E> (*Parse)(std::string_view), std::string_view (*Name)(E)>
struct NameCodec {
  static Status Read(std::string_view t, const std::string& p, FieldKind, E& out) {
    Result<E> r = Parse(t);
    if (!r.ok()) return WithPath(r.status(), p);
    out = *r;
    return Status::Ok();
  }
  static std::string Show(E v) { return std::string(Name(v)); }
};
std::string_view MetricsListenerName(MetricsListener l) { return l == MetricsListener::kAdmin ? "admin" : "client"; }
template <>
struct Codec<Strategy> : NameCodec<Strategy, ParseStrategy, StrategyName> {};
template <>
struct Codec<SpillMode> : NameCodec<SpillMode, ParseSpillMode, SpillModeName> {};
template <>
struct Codec<FlowSaturation> : NameCodec<FlowSaturation, ParseFlowSaturation, FlowSaturationName> {};
template <>
struct Codec<LoadMeasure> : NameCodec<LoadMeasure, ParseLoadMeasure, LoadMeasureName> {};
template <>
struct Codec<TokenizerSource> : NameCodec<TokenizerSource, ParseTokenizerSource, TokenizerSourceName> {};
template <>
struct Codec<LogFormat> : NameCodec<LogFormat, ParseLogFormat, LogFormatName> {};
template <>
struct Codec<MetricsListener> : NameCodec<MetricsListener, ParseMetricsListener, MetricsListenerName> {};
template <>
struct Codec<Compatibility> : NameCodec<Compatibility, ParseCompatibility, CompatibilityName> {};

// What a table row says besides its accessor.
struct Meta {
  std::string range;
  std::string flag;
  std::string help;
  std::string example;
  std::string bad;
};

// A scalar of GatewayConfig; `access` returns a reference to it.
template <typename T, typename Access>
ConfigField Scalar(std::string path, FieldKind kind, bool reloadable, Access access, Meta m) {
  ConfigField f;
  f.path = std::move(path);
  f.kind = kind;
  f.reloadable = reloadable;
  f.range = std::move(m.range);
  f.flag = std::move(m.flag);
  f.help = std::move(m.help);
  f.example = std::move(m.example);
  f.bad = std::move(m.bad);
  f.set = [access, kind](GatewayConfig& c, std::string_view text, const std::string& p) {
    return Codec<T>::Read(text, p, kind, access(c));
  };
  f.get = [access](const GatewayConfig& c) { return Codec<T>::Show(access(c)); };
  return f;
}

// A field of `routing` (and of each pool); `access` takes RoutingOptions.
template <typename T, typename Access>
ConfigField Routing(std::string rel, FieldKind kind, Access access, Meta m) {
  ConfigField f = Scalar<T>(
      "routing." + rel, kind, /*reloadable=*/true, [access](auto& c) -> auto& { return access(c.routing); },
      std::move(m));
  f.rel = std::move(rel);
  f.set_routing = [access, kind](RoutingOptions& o, std::string_view text, const std::string& p) {
    return Codec<T>::Read(text, p, kind, access(o));
  };
  f.get_routing = [access](const RoutingOptions& o) { return Codec<T>::Show(access(o)); };
  return f;
}

// A list or a map: YAML only.
ConfigField Structure(std::string path, FieldKind kind, bool reloadable, std::string help, std::string flag = "") {
  ConfigField f;
  f.path = std::move(path);
  f.kind = kind;
  f.reloadable = reloadable;
  f.help = std::move(help);
  f.flag = std::move(flag);
  return f;
}

constexpr bool kApplied = true;
constexpr bool kRestart = false;
using K = FieldKind;

std::vector<ConfigField> BuildSchema() {
  std::vector<ConfigField> s;
  // ------------------------------------------------------------------------------- top level
  s.push_back(Scalar<std::string>("listen", K::kString, kRestart, [](auto& c) -> auto& { return c.listen; },
                                  {"HOST:PORT (IPv4, host name or [IPv6]); port 0..65535, 0 = any free port",
                                   "--listen", "address of the client listener", "0.0.0.0:8000", "127.0.0.1:70000"}));
  s.push_back(Scalar<uint32_t>("io_threads", K::kInteger, kRestart, [](auto& c) -> auto& { return c.io_threads; },
                               {"0..256, 0 = one per core", "--io-threads", "I/O threads", "4", "257"}));
  s.push_back(Scalar<bool>("decision_headers", K::kBoolean, kRestart,
                           [](auto& c) -> auto& { return c.decision_headers; },
                           {"true | false", "--decision-headers",
                            "add x-prefix-router-instance/-decision/-rank headers to responses", "false", ""}));
  s.push_back(Scalar<uint32_t>(
      "unknown_path_status", K::kInteger, kRestart, [](auto& c) -> auto& { return c.unknown_path_status; },
      {"403 | 404 | 410 | 421 | 501", "--unknown-path-status",
       "the status (with an OpenAI-style JSON error) of a request to a path the gateway does not route", "403",
       "500"}));

  // --------------------------------------------------------------------------------- routing
  s.push_back(Routing<Strategy>("routing_strategy", K::kName, [](auto& o) -> auto& { return o.strategy; },
                                {StrategyNames(" | "), "--strategy", "routing strategy of the default pool",
                                 std::string(StrategyName(Strategy::kPrefixAware)), ""}));
  s.push_back(Routing<uint32_t>(
      "prefix_length", K::kInteger, [](auto& o) -> auto& { return o.prefix_length; },
      {std::to_string(kMinPrefixLength) + ".." + std::to_string(kMaxPrefixLength), "--prefix-length",
       "leading bytes (native API) or characters (OpenAI API) keyed by prefix-aware", "4096", "1023"}));
  s.push_back(Routing<uint32_t>(
      "concurrency_threshold", K::kInteger, [](auto& o) -> auto& { return o.concurrency_threshold; },
      {std::to_string(kMinConcurrencyThreshold) + ".." + std::to_string(kMaxConcurrencyThreshold),
       "--concurrency-threshold", "in-flight requests per instance before prefix-aware spills", "8", "0"}));
  s.push_back(Routing<SpillMode>(
      "spill_mode", K::kName, [](auto& o) -> auto& { return o.spill; },
      {"next-preferred | least-loaded", "--spill-mode",
       "where prefix-aware sends a request when its first choice is full: a stable second home, or the least "
       "loaded instance (the managed service's behaviour)",
       "least-loaded", ""}));
  s.push_back(Routing<LoadMeasure>(
      "load_measure", K::kName, [](auto& o) -> auto& { return o.load_measure; },
      {"requests | prompt-tokens | engine", "--load-measure",
       "what \"least loaded\" compares (least-outstanding-requests, least-loaded spill): in-flight requests, "
       "or their estimated prompt tokens (body bytes / 4) plus one per request, so that a long prefill weighs "
       "more than a short one, or engine: the running and waiting requests the engines report on their "
       "/metrics (scraped every engine_metrics.interval) plus those sent since, one view shared by gateway "
       "replicas",
       "prompt-tokens", ""}));
  s.push_back(Routing<double>(
      "balance_factor", K::kNumber, [](auto& o) -> auto& { return o.balance_factor; },
      {"0, or " + FormatDouble(kMinBalanceFactor) + ".." + FormatDouble(kMaxBalanceFactor), "--balance-factor",
       "prefix-aware bounded load: an instance is also full at F x its weight share of the pool's in-flight "
       "requests (at least 4) or, when the pool is busy, at 5% over its share of recent requests; a key moved "
       "off a full instance stays where it went; 0 = off (threshold only, the managed service's behaviour)",
       "2", "0.5"}));
  s.push_back(Routing<TokenizerSource>(
      "tokenizer", K::kName, [](auto& o) -> auto& { return o.tokenizer; },
      {"local | engine", "--tokenizer",
       "where kv-aware and dynamo-kv get the prompt's token ids to match the blocks the engines report: local, "
       "the gateway's engine-compatible tokenizer (the emulator's; it does not match a real model's), or "
       "engine, POST /tokenize on a routable instance of the pool (vLLM), one round trip per request bounded "
       "by timeouts.tokenize",
       "engine", ""}));
  s.push_back(Routing<uint32_t>(
      "max_in_flight", K::kInteger, [](auto& o) -> auto& { return o.max_in_flight; },
      {"0..1000000, 0 = no ceiling", "--max-in-flight",
       "requests in flight in the pool beyond which new ones get 429 with Retry-After", "500", "1000001"}));
  s.push_back(Routing<uint32_t>(
      "flow_control.max_queue", K::kInteger, [](auto& o) -> auto& { return o.flow_control.max_queue; },
      {"0..1000000, 0 = no queue", "--max-queue",
       "flow control: requests that find the pool at max_in_flight wait in the pool's queue, up to this many, "
       "instead of getting 429 at once; they leave it as requests end, higher priority first (header "
       "x-prefix-router-priority, -10..10; negative = sheddable: never queued), fairly between tenants within a "
       "priority; no effect without max_in_flight or flow_control.saturation in-flight",
       "100", "1000001"}));
  s.push_back(Routing<uint64_t>(
      "flow_control.max_queue_bytes", K::kInteger,
      [](auto& o) -> auto& { return o.flow_control.max_queue_bytes; },
      {"0..68719476736, 0 = no byte bound", "",
       "flow control: bytes of the queued requests' bodies; a request that does not fit displaces the newest of "
       "lower priorities, else gets 429",
       "67108864", "68719476737"}));
  s.push_back(Routing<double>(
      "flow_control.max_queue_wait", K::kSeconds, [](auto& o) -> auto& { return o.flow_control.max_queue_wait; },
      {"(0, 3600]", "--max-queue-wait", "flow control: seconds a request may wait in the queue before 429", "2",
       "0"}));
  s.push_back(Routing<std::string>(
      "flow_control.objectives", K::kString, [](auto& o) -> auto& { return o.flow_control.objectives; },
      {"name=priority,... (names of A-Z a-z 0-9 . _ -, priorities -10..10), \"\" = none", "",
       "flow control: the priority of a request naming an objective in header x-gateway-inference-objective (as "
       "the Gateway API Inference Extension's InferenceObjective); x-prefix-router-priority, when also sent, "
       "wins; an objective not listed is priority 0",
       "interactive=1,batch=0,bulk=-1", "interactive=11"}));
  s.push_back(Routing<bool>(
      "flow_control.deadlines", K::kBoolean, [](auto& o) -> auto& { return o.flow_control.deadlines; },
      {"true | false", "",
       "flow control: within a tenant, a request with a time-to-first-token objective (header x-slo-ttft-ms, "
       "milliseconds) leaves by its deadline, earliest first while it can still be met; false = arrival order "
       "whatever the header says",
       "false", ""}));
  s.push_back(Routing<FlowSaturation>(
      "flow_control.saturation", K::kName, [](auto& o) -> auto& { return o.flow_control.saturation; },
      {"pool | in-flight", "",
       "flow control: when the pool is saturated, so that requests queue (or get 429 without a queue): pool, at "
       "max_in_flight only; in-flight, also when every instance the pool can use has concurrency_threshold "
       "requests in flight (the routing policy's notion of full), which bounds every engine's batch but sends "
       "a request let out wherever there is room, cached or not (docs/flow-control.md measures the cost)",
       "in-flight", ""}));
  s.push_back(Routing<uint32_t>(
      "flow_control.max_in_flight_per_tenant", K::kInteger,
      [](auto& o) -> auto& { return o.flow_control.max_in_flight_per_tenant; },
      {"0..1000000, 0 = no bound", "",
       "flow control: requests one tenant (as for fairness) may have in flight in the pool; more wait in the "
       "queue while the tenant's own requests run (with max_queue 0: 429), even when the pool has room, and the "
       "queue lets out other tenants' requests past them. It keeps room for every tenant within its bound, "
       "whatever another sends, at the cost of leaving capacity idle while a flood waits (docs/flow-control.md)",
       "64", "1000001"}));
  s.push_back(Routing<bool>(
      "flow_control.fairness", K::kBoolean, [](auto& o) -> auto& { return o.flow_control.fairness; },
      {"true | false", "",
       "flow control: within a priority, requests leave by virtual token counters per tenant (the client key's "
       "tenant, else the routing group, else header x-gateway-inference-fairness-id), so that a tenant "
       "sending more waits behind its own requests; false = arrival order",
       "false", ""}));
  {
    ConfigField f = Routing<Compatibility>(
        "compatibility", K::kName, [](auto& o) -> auto& { return o.compatibility; },
        {"none | sagemaker", "--compat",
         "a behaviour preset. sagemaker: the managed service's documented prefix-aware behaviour: when the "
         "prefix-selected instance has reached the concurrency threshold, that request alone goes to the instance "
         "with the fewest in-flight requests (no load bound, the key does not move); it fixes spill_mode "
         "least-loaded, balance_factor 0 and load_measure requests, and routing_strategy is random unless given "
         "(docs/strategies.md: Moving from SageMaker)",
         "sagemaker", ""});
    // Setting the preset sets what it fixes.
    f.set_routing = [](RoutingOptions& o, std::string_view text, const std::string& p) {
      Compatibility c = Compatibility::kNone;
      if (Status st = Codec<Compatibility>::Read(text, p, K::kName, c); !st.ok()) return st;
      ApplyCompatibility(c, o);
      return Status::Ok();
    };
    f.set = [set = f.set_routing](GatewayConfig& c, std::string_view text, const std::string& p) {
      return set(c.routing, text, p);
    };
    s.push_back(std::move(f));
  }
  s.push_back(Routing<uint32_t>(
      "cache_aware.block_bytes", K::kInteger, [](auto& o) -> auto& { return o.cache_aware.block_bytes; },
      {"16..65536", "", "cache-aware's (and kv-aware's, dynamo-kv's) block index: bytes of routing text per block",
       "512", "15"}));
  s.push_back(Routing<uint32_t>("cache_aware.max_blocks", K::kInteger,
                                [](auto& o) -> auto& { return o.cache_aware.max_blocks; },
                                {"1..65536", "", "blocks keyed per request", "1024", "65537"}));
  s.push_back(Routing<uint64_t>(
      "cache_aware.capacity_blocks", K::kInteger, [](auto& o) -> auto& { return o.cache_aware.capacity_blocks; },
      {"1..4294967296", "", "blocks remembered per instance; the least recently sent are forgotten", "51200", "0"}));
  s.push_back(Routing<uint64_t>(
      "cache_aware.max_index_bytes", K::kInteger, [](auto& o) -> auto& { return o.cache_aware.max_index_bytes; },
      {"1048576..68719476736 (1 MiB..64 GiB)", "", "memory bound of the whole index", "134217728", "1048575"}));
  s.push_back(
      Routing<double>("cache_aware.load_weight", K::kNumber, [](auto& o) -> auto& { return o.cache_aware.load_weight; },
                      {"0..100", "", "cost of an outstanding prompt token against an uncached one", "0.5", "101"}));
  s.push_back(Routing<bool>(
      "key_normalisation.canonical_json", K::kBoolean,
      [](auto& o) -> auto& { return o.key_normalisation.canonical_json; },
      {"true | false", "--canonical-json",
       "native API: key the canonical JSON of the body (sorted members, no whitespace, one escaping) instead "
       "of its raw bytes; non-JSON bodies keep raw bytes (docs/normalisation.md)",
       "true", ""}));
  s.push_back(Structure("routing.key_normalisation.exclude_fields", K::kList, kApplied,
                        "native API: JSON members left out of the canonical form, which they imply: name, a.b.c, "
                        "* = any one key",
                        "--exclude-field (repeatable)"));
  s.push_back(Structure("routing.key_normalisation.exclude_patterns", K::kList, kApplied,
                        "regular expressions (Perl syntax) whose matches are removed from the keyed text: "
                        "OpenAI message and prompt text, native string values",
                        "--exclude-pattern (repeatable)"));
  s.push_back(Structure("pools", K::kMap, kApplied,
                        "per served name (model or adapter): any field of `routing`, or a RoutingConfig block; a "
                        "field a pool does not set is routing's"));
  s.push_back(Structure("RoutingConfig", K::kMap, kApplied,
                        "the managed service's block (SageMaker ProductionVariantRoutingConfig), for the default "
                        "pool; also accepted inside pools.NAME. Each setting may be given under one name only "
                        "(RoutingStrategy or routing.routing_strategy, ...)"));
  s.push_back(Structure("RoutingConfig.RoutingStrategy", K::kName, kApplied,
                        "required: RANDOM | LEAST_OUTSTANDING_REQUESTS | PREFIX_AWARE (" +
                            std::string(StrategyName(Strategy::kRandom)) + ", " +
                            std::string(StrategyName(Strategy::kLeastOutstanding)) + ", " +
                            std::string(StrategyName(Strategy::kPrefixAware)) + ")"));
  s.push_back(Structure("RoutingConfig.PrefixAwareRoutingConfig.PrefixLength", K::kInteger, kApplied,
                        "1024..65536, required with PREFIX_AWARE (and the block only then): routing.prefix_length"));
  s.push_back(Structure("RoutingConfig.PrefixAwareRoutingConfig.ConcurrencyThreshold", K::kInteger, kApplied,
                        "1..1024, required with PREFIX_AWARE: routing.concurrency_threshold"));

  // ------------------------------------------------------------------------------- instances
  s.push_back(Structure("instances", K::kList, kApplied,
                        "the model servers; at least one (here or by --instance URL | NAME=URL | "
                        "NAME=URL;weight=N;models=a,b)",
                        "--instance (repeatable)"));
  s.push_back(Structure("instances[].name", K::kString, kApplied, "its name in metrics and logs; default host:port"));
  s.push_back(Structure("instances[].url", K::kString, kApplied, "http(s)://host[:port][/path]"));
  s.push_back(Structure("instances[].weight", K::kInteger, kApplied,
                        "1..10000: its share of keys and random picks against the others"));
  s.push_back(Structure("instances[].models", K::kList, kApplied,
                        "the served names (models, adapters) it serves; empty: discovered from its /v1/models"));
  s.push_back(Structure("instances[].discover_models", K::kBoolean, kApplied,
                        "poll its GET /v1/models for served names (default: discovery.models, else true when "
                        "it lists no models)"));
  s.push_back(Structure("instances[].resolve", K::kName, kApplied,
                        "none | all: all = one instance per address of the url's DNS name"));
  s.push_back(Structure("instances[].kv_events.endpoint", K::kString, kApplied,
                        "its KV cache event stream (vLLM --kv-events-config), for kv-aware: tcp://host:port"));
  s.push_back(Structure("instances[].kv_events.topic", K::kString, kApplied, "the stream's topic; \"\" = all"));
  s.push_back(
      Structure("instances[].kv_events.replay_endpoint", K::kString, kApplied, "where missed events are asked again"));
  s.push_back(Structure("instances[].upstream_tls.ca_file", K::kString, kApplied,
                        "for an https:// url: its PEM CA bundle (default: upstream_tls.ca_file)"));
  s.push_back(Structure("instances[].upstream_tls.verify", K::kBoolean, kApplied,
                        "check its chain and host name (default: upstream_tls.verify)"));
  s.push_back(Structure("instances[].authorization_file", K::kString, kApplied,
                        "a file holding the Authorization header value sent to it; never logged"));
  s.push_back(
      Structure("instances[].authorization_env", K::kString, kApplied, "the same from an environment variable"));

  // ---------------------------------------------------------------------------------- limits
  s.push_back(Scalar<uint64_t>("limits.max_request_body_bytes", K::kInteger, kRestart,
                               [](auto& c) -> auto& { return c.max_request_body_bytes; },
                               {"1024..1073741824 (1 KiB..1 GiB)", "--max-request-body-bytes",
                                "larger request bodies get 413", "1048576", "1023"}));
  s.push_back(Scalar<uint32_t>(
      "limits.max_header_bytes", K::kInteger, kRestart, [](auto& c) -> auto& { return c.max_header_bytes; },
      {"1024..1048576 (1 KiB..1 MiB)", "--max-header-bytes", "larger request headers get 431", "16384", "1048577"}));
  {
    // auto or a number: its own reader.
    ConfigField f;
    f.path = "limits.max_connections";
    f.kind = K::kInteger;
    f.reloadable = kRestart;
    f.range = "auto, or 0..1000000 (0 = no limit)";
    f.flag = "--max-connections";
    f.help =
        "open client connections beyond which a new one gets 503 and is closed; auto: half of the descriptor "
        "limit left after a reserve for listeners, health checks and scrapes (logged at start)";
    f.example = "1000";
    f.bad = "1000001";
    f.set = [](GatewayConfig& c, std::string_view text, const std::string& p) {
      if (text == "auto") {
        c.max_connections = kAutoMaxConnections;
        return Status::Ok();
      }
      return ParseUnsignedText(text, p, c.max_connections);
    };
    f.get = [](const GatewayConfig& c) {
      return c.max_connections == kAutoMaxConnections ? std::string("auto") : std::to_string(c.max_connections);
    };
    s.push_back(std::move(f));
  }
  s.push_back(Scalar<uint32_t>(
      "limits.max_connections_per_client", K::kInteger, kRestart,
      [](auto& c) -> auto& { return c.max_connections_per_client; },
      {"0..1000000, 0 = no limit", "--max-connections-per-client",
       "open connections from one client address beyond which a new one gets 429 "
       "(too_many_connections_from_client) and is closed; leave 0 behind a load balancer whose address every "
       "client shares",
       "64", "1000001"}));

  // --------------------------------------------------------------------------------- metrics
  s.push_back(Scalar<MetricsListener>(
      "metrics.listener", K::kName, kRestart, [](auto& c) -> auto& { return c.metrics.listener; },
      {"client | admin", "",
       "client: /metrics on the client listener (and the admin one, when on); admin: on the "
       "admin listener alone (needs `admin`)",
       "admin", ""}));
  s.push_back(Scalar<bool>(
      "metrics.require_key", K::kBoolean, kRestart, [](auto& c) -> auto& { return c.metrics.require_key; },
      {"true | false", "", "scrapers on the client listener need a client key (needs `clients`)", "true", ""}));

  // -------------------------------------------------------------------------------- timeouts
  struct Timeout {
    const char* key;
    double TimeoutsConfig::*member;
    const char* range;
    const char* flag;
    const char* help;
    const char* example;
    const char* bad;
  };
  for (const Timeout& t : {
           Timeout{"connect", &TimeoutsConfig::connect, "(0, 600]", "--connect-timeout", "upstream TCP connect", "2",
                   "601"},
           Timeout{"first_byte", &TimeoutsConfig::first_byte, "(0, 3600]", "--first-byte-timeout",
                   "upstream response headers after the request is sent (prefill can queue behind others)", "60", "0"},
           Timeout{"idle", &TimeoutsConfig::idle, "(0, 3600]", "--idle-timeout", "between upstream body chunks", "30",
                   "3601"},
           Timeout{"total", &TimeoutsConfig::total, "[0, 86400], 0 = no limit", "--total-timeout", "the whole exchange",
                   "600", "86401"},
           Timeout{"client_read", &TimeoutsConfig::client_read, "(0, 3600]", "--client-read-timeout",
                   "reading a client's request head and body", "10", "0"},
           Timeout{"client_write", &TimeoutsConfig::client_write, "(0, 3600]", "--client-write-timeout",
                   "one write to a slow client", "20", "3601"},
           Timeout{"client_idle", &TimeoutsConfig::client_idle, "(0, 3600]", "--client-idle-timeout",
                   "keep-alive wait for a client's next request", "20", "0"},
           Timeout{"drain", &TimeoutsConfig::drain, "[0, 3600]", "--drain-timeout",
                   "on SIGTERM, how long in-flight requests may finish", "10", "3601"},
           Timeout{"per_try_first_byte", &TimeoutsConfig::per_try_first_byte, "[0, 3600], 0 = off", "--per-try-timeout",
                   "an attempt with no response byte this long after dispatch (nothing sent to the client yet) "
                   "is cancelled and retried on the next instance",
                   "30", "3601"},
           Timeout{"tokenize", &TimeoutsConfig::tokenize, "(0, 600]", "",
                   "an instance's /tokenize answer (tokenizer: engine); later, the request is routed without "
                   "tokens",
                   "0.5", "0"},
           Timeout{"kv_events_silence", &TimeoutsConfig::kv_events_silence, "(0, 86400]", "",
                   "an instance's KV event stream silent this long is stale (kv-aware falls back)", "30", "0"},
       }) {
    const auto member = t.member;
    s.push_back(Scalar<double>(std::string("timeouts.") + t.key, K::kSeconds,
                               kRestart, [member](auto& c) -> auto& { return c.timeouts.*member; },
                               {t.range, t.flag, t.help, t.example, t.bad}));
  }

  s.push_back(Scalar<uint32_t>(
      "retries.max_retries", K::kInteger, kRestart, [](auto& c) -> auto& { return c.max_retries; },
      {"0..10", "--max-retries", "further instances tried, in preference order, before any byte reached the client",
       "1", "11"}));

  // ---------------------------------------------------------------------------------- health
  s.push_back(Scalar<std::string>("health.path", K::kString, kRestart, [](auto& c) -> auto& { return c.health.path; },
                                  {"a path starting with '/'", "--health-path",
                                   "active health check: GET this path, 2xx = success", "/ready", "ready"}));
  s.push_back(Scalar<double>("health.interval", K::kSeconds, kRestart,
                             [](auto& c) -> auto& { return c.health.interval; },
                             {"[0, 3600], 0 disables checks (and so passive ejection)", "--health-interval",
                              "seconds between checks of one instance", "10", "3601"}));
  s.push_back(Scalar<double>("health.timeout", K::kSeconds, kRestart, [](auto& c) -> auto& { return c.health.timeout; },
                             {"(0, 600]", "--health-timeout", "per check", "1", "0"}));
  s.push_back(Scalar<uint32_t>(
      "health.unhealthy_threshold", K::kInteger, kRestart,
      [](auto& c) -> auto& { return c.health.unhealthy_threshold; },
      {"1..100", "--unhealthy-threshold", "consecutive failed checks to eject an instance", "5", "0"}));
  s.push_back(Scalar<uint32_t>(
      "health.healthy_threshold", K::kInteger, kRestart, [](auto& c) -> auto& { return c.health.healthy_threshold; },
      {"1..100", "--healthy-threshold", "consecutive successful checks to readmit it", "3", "101"}));
  s.push_back(Scalar<uint32_t>("health.passive_failures", K::kInteger, kRestart,
                               [](auto& c) -> auto& { return c.health.passive_failures; },
                               {"0..100, 0 = off", "--passive-failures",
                                "consecutive connect failures of live traffic to eject an instance", "3", "101"}));

  // ------------------------------------------------------------------------------------- log
  s.push_back(Scalar<LogFormat>(
      "log.format", K::kName, kRestart, [](auto& c) -> auto& { return c.log.format; },
      {"text | json", "--log-format",
       "log lines as text, or as one JSON object per line (ts, level, msg and the event's fields)", "json", ""}));
  s.push_back(Scalar<bool>(
      "log.access_log", K::kBoolean, kRestart, [](auto& c) -> auto& { return c.log.access_log; },
      {"true | false", "--access-log / --no-access-log",
       "one log line per request (method, path, status, instance, decision, attempts, duration, time to first "
       "byte)",
       "true", ""}));

  // ------------------------------------------------------------------------------- discovery
  s.push_back(Scalar<std::optional<bool>>(
      "discovery.models", K::kBoolean, kRestart, [](auto& c) -> auto& { return c.discovery.models; },
      {"true | false; absent: each instance without `models` is polled", "",
       "default of instances[].discover_models: poll each instance's GET /v1/models for the names it serves "
       "(docs/discovery.md)",
       "true", ""}));
  s.push_back(Scalar<double>(
      "discovery.models_interval", K::kSeconds, kRestart, [](auto& c) -> auto& { return c.discovery.models_interval; },
      {"[1, 86400]", "", "seconds between two polls of one instance's GET /v1/models", "10", "0.5"}));
  s.push_back(
      Scalar<double>("discovery.resolve_interval", K::kSeconds, kRestart,
                     [](auto& c) -> auto& { return c.discovery.resolve_interval; },
                     {"[1, 86400]", "", "seconds between two resolutions of a `resolve: all` name", "10", "86401"}));
  s.push_back(Scalar<std::string>("discovery.hosts_file", K::kString, kRestart,
                                  [](auto& c) -> auto& { return c.discovery.hosts_file; },
                                  {"a readable file, or \"\" (the system resolver)", "",
                                   "resolve with this hosts(5) file", "/etc/hosts", "/nonexistent/hosts"}));
  s.push_back(Structure("discovery.kubernetes", K::kMap, kRestart,
                        "instances from the Kubernetes API: the Ready pods of an InferencePool or a label "
                        "selector, each at podIP:target_port, named NAME@POD (docs/discovery.md): present = on; "
                        "`instances` may then be empty"));
  s.push_back(Scalar<std::string>(
      "discovery.kubernetes.inference_pool", K::kString, kRestart,
      [](auto& c) -> auto& { return c.discovery.kubernetes.inference_pool; },
      {"an InferencePool's name; or selector and target_port", "",
       "follow this InferencePool (inference.networking.k8s.io/v1): its spec.selector.matchLabels and "
       "spec.targetPorts[0].number, watched",
       "vllm-pool", ""}));
  s.push_back(Structure("discovery.kubernetes.selector", K::kMap, kRestart,
                        "without inference_pool: the pods' labels (label: value, all must match)"));
  s.push_back(Scalar<uint32_t>("discovery.kubernetes.target_port", K::kInteger, kRestart,
                               [](auto& c) -> auto& { return c.discovery.kubernetes.target_port; },
                               {"1..65535, with selector", "", "the pods' port of the model server", "8000", "65536"}));
  s.push_back(Scalar<std::string>(
      "discovery.kubernetes.namespace", K::kString, kRestart,
      [](auto& c) -> auto& { return c.discovery.kubernetes.namespace_name; },
      {"a namespace, or \"\" (the service account's)", "", "where the pods (and the pool) are", "inference", ""}));
  s.push_back(Scalar<std::string>(
      "discovery.kubernetes.api_server", K::kString, kRestart,
      [](auto& c) -> auto& { return c.discovery.kubernetes.api_server; },
      {"http(s)://host:port, or \"\" (in-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)", "",
       "the API server; http:// is for tests", "https://10.96.0.1:443", ""}));
  s.push_back(Scalar<std::string>(
      "discovery.kubernetes.token_file", K::kString, kRestart,
      [](auto& c) -> auto& { return c.discovery.kubernetes.token_file; },
      {"a file, or \"\" (no token)", "",
       "the bearer token sent to the API server, re-read at each connection (tokens rotate)",
       "/run/secrets/k8s/token", ""}));
  s.push_back(Scalar<std::string>(
      "discovery.kubernetes.ca_file", K::kString, kRestart,
      [](auto& c) -> auto& { return c.discovery.kubernetes.ca_file; },
      {"a PEM CA bundle", "", "what the API server's certificate must lead to (https), re-read at each connection",
       "/run/secrets/k8s/ca.crt", ""}));
  s.push_back(Structure("discovery.kubernetes.instance", K::kMap, kRestart,
                        "each pod's instance: name (default: inference_pool, else kubernetes), weight, models, "
                        "discover_models, authorization_env, authorization_file"));

  // ---------------------------------------------------------------------------- upstream_tls
  s.push_back(Scalar<std::string>(
      "upstream_tls.ca_file", K::kString, kApplied, [](auto& c) -> auto& { return c.upstream_tls.ca_file; },
      {"a PEM file, or \"\" (the system store)", "", "CA bundle for instances with an https:// url (docs/tls.md)", "",
       "/nonexistent/ca.pem"}));
  s.push_back(Scalar<bool>(
      "upstream_tls.verify", K::kBoolean, kApplied, [](auto& c) -> auto& { return c.upstream_tls.verify; },
      {"true | false", "", "check the instance's chain and host name; false is logged as a warning", "false", ""}));

  // ----------------------------------------------------------------- sections present = on
  s.push_back(Scalar<std::string>(
      "admin.listen", K::kString, kRestart, [](auto& c) -> auto& { return c.admin.listen; },
      {"HOST:PORT, a port of its own; loopback unless a token is set", "",
       "the operations listener (docs/admin.md): present = on", "127.0.0.1:9091", "127.0.0.1:70000"}));
  s.push_back(Scalar<std::string>(
      "admin.token_file", K::kString, kRestart, [](auto& c) -> auto& { return c.admin.token_file; },
      {"a file of at least 16 visible characters", "", "bearer token the admin listener requires", "", ""}));
  s.push_back(
      Scalar<std::string>("admin.token_env", K::kString, kRestart, [](auto& c) -> auto& { return c.admin.token_env; },
                          {"an environment variable's name", "", "the same from an environment variable", "", ""}));
  s.push_back(Scalar<std::string>(
      "epp.listen", K::kString, kRestart, [](auto& c) -> auto& { return c.epp.listen; },
      {"HOST:PORT, a port of its own; \"\" = off", "--epp-listen",
       "the endpoint picker's gRPC listener (ext_proc for the Gateway API Inference Extension, "
       "docs/epp.md); with it, listen: \"\" turns the HTTP proxy off",
       "127.0.0.1:9002", "127.0.0.1:70000"}));
  s.push_back(Scalar<double>("engine_metrics.interval", K::kSeconds, kRestart,
                             [](auto& c) -> auto& { return c.engine_metrics.interval; },
                             {"[0.05, 3600]", "",
                              "scrape each instance's /metrics this often for the load and cache counters it reports: "
                              "present = on",
                              "2", "0.01"}));
  s.push_back(Scalar<std::string>(
      "engine_metrics.path", K::kString, kRestart, [](auto& c) -> auto& { return c.engine_metrics.path; },
      {"an absolute path without query", "", "the engines' metrics path", "/engine/metrics", "metrics"}));
  s.push_back(Scalar<std::string>("tls.cert_file", K::kString, kApplied,
                                  [](auto& c) -> auto& { return c.tls.cert_file; },
                                  {"a PEM certificate chain", "",
                                   "HTTPS on the client listener (docs/tls.md): present = on; a reload re-reads "
                                   "the files",
                                   "", ""}));
  s.push_back(Scalar<std::string>("tls.key_file", K::kString, kApplied, [](auto& c) -> auto& { return c.tls.key_file; },
                                  {"its PEM private key", "", "the certificate's key", "", ""}));
  s.push_back(Scalar<std::string>("clients.keys_file", K::kString, kApplied,
                                  [](auto& c) -> auto& { return c.clients.keys_file; },
                                  {"a file of \"TENANT KEY\" or \"KEY\" lines", "",
                                   "client API keys (docs/limits.md): present = the API routes need one", "", ""}));
  s.push_back(Structure("clients.keys", K::kList, kApplied, "keys as {tenant, key_env | key_file}"));
  s.push_back(Structure("clients.keys[].tenant", K::kString, kApplied, "the key's tenant"));
  s.push_back(Structure("clients.keys[].key_env", K::kString, kApplied, "the key from an environment variable"));
  s.push_back(Structure("clients.keys[].key_file", K::kString, kApplied, "the key from a file"));
  struct Limit {
    const char* key;
    uint64_t TenantLimits::*member;
    const char* help;
  };
  for (const Limit& l : {Limit{"requests_per_minute", &TenantLimits::requests_per_minute,
                               "requests a minute per tenant (docs/limits.md); 0 = no limit"},
                         Limit{"request_burst", &TenantLimits::request_burst, "0 = requests_per_minute"},
                         Limit{"tokens_per_minute", &TenantLimits::tokens_per_minute,
                               "estimated prompt tokens a minute per tenant; 0 = no limit"},
                         Limit{"token_burst", &TenantLimits::token_burst, "0 = tokens_per_minute"}}) {
    const auto member = l.member;
    const bool tokens = std::string_view(l.key).starts_with("token");
    s.push_back(Scalar<uint64_t>(
        std::string("rate_limits.") + l.key, K::kInteger,
        kApplied, [member](auto& c) -> auto& { return c.rate_limits.defaults.*member; },
        {tokens ? "0..1000000000000" : "0..1000000000", "", l.help, "6000", tokens ? "1000000000001" : "1000000001"}));
  }
  s.push_back(Scalar<uint32_t>(
      "rate_limits.max_tenants", K::kInteger, kApplied, [](auto& c) -> auto& { return c.rate_limits.max_tenants; },
      {std::to_string(kMinTenants) + ".." + std::to_string(kMaxTenants), "", "tenants tracked at once", "1024", "15"}));
  s.push_back(Structure("rate_limits.tenants", K::kMap, kApplied,
                        "per tenant: any of the four limits; a limit a tenant does not set is the section's"));
  return s;
}

}  // namespace

std::string_view FieldKindName(FieldKind kind) {
  switch (kind) {
    case FieldKind::kInteger: return "integer";
    case FieldKind::kSeconds: return "seconds";
    case FieldKind::kNumber: return "number";
    case FieldKind::kBoolean: return "boolean";
    case FieldKind::kString: return "string";
    case FieldKind::kName: return "name";
    case FieldKind::kList: return "list";
    case FieldKind::kMap: return "map";
  }
  return "?";
}

std::string_view ConfigField::section() const {
  const std::string_view p = path;
  const size_t dot = p.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : p.substr(0, dot);
}

std::string_view ConfigField::key() const {
  const std::string_view p = path;
  const size_t dot = p.rfind('.');
  return dot == std::string_view::npos ? p : p.substr(dot + 1);
}

const std::vector<ConfigField>& ConfigSchema() {
  static const std::vector<ConfigField> schema = BuildSchema();
  return schema;
}

const ConfigField* FindConfigField(std::string_view path) {
  for (const ConfigField& f : ConfigSchema()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

const ConfigField* FindRoutingField(std::string_view rel) {
  for (const ConfigField& f : ConfigSchema()) {
    if (f.routing() && f.rel == rel) return &f;
  }
  return nullptr;
}

std::string DefaultOf(const ConfigField& field) {
  static const GatewayConfig defaults;
  return field.scalar() ? field.get(defaults) : std::string();
}

std::string ConfigReferenceMarkdown() {
  std::string out =
      "# Configuration reference\n\n"
      "Generated from the gateway's configuration schema (src/gateway/config_schema.cc) by\n"
      "`prefix-router serve --config-reference`; CTest `config.reference` fails when this file differs.\n"
      "`examples/router.yaml` shows every field in context.\n\n"
      "Precedence: built-in defaults < the `--config` file < flags. Scalar fields without a named flag are\n"
      "set with `--set PATH=VALUE` (`--set timeouts.tokenize=0.5`); lists and maps are YAML only.\n"
      "A field of `routing` set by a flag or `--set` also applies to each pool that does not set it.\n"
      "**Reload** says whether SIGHUP and `POST /admin/reload` apply a change (`applied`), or answer it\n"
      "in `restart_required` and keep the running value (`restart`). `admin`, `engine_metrics`, `tls`\n"
      "and `clients` are turned on by their section being present; turning one on or off needs a restart,\n"
      "except `clients`.\n\n"
      "| field | type | default | allowed | flag | reload | what it does |\n"
      "|---|---|---|---|---|---|---|\n";
  auto cell = [](std::string s) {
    std::string o;
    for (char c : s) {
      if (c == '|')
        o += "\\|";
      else
        o += c;
    }
    return o;
  };
  for (const ConfigField& f : ConfigSchema()) {
    std::string def = f.scalar() ? DefaultOf(f) : std::string();
    if (f.scalar() && def.empty()) def = "\"\"";
    std::string flag = f.flag.empty() ? (f.scalar() ? "--set" : "YAML only") : f.flag;
    out += "| `" + f.path + "` | " + std::string(FieldKindName(f.kind)) + " | " +
           (def.empty() ? std::string() : "`" + cell(def) + "`") + " | " + cell(f.range) + " | " + cell(flag) + " | " +
           (f.reloadable ? "applied" : "restart") + " | " + cell(f.help) + " |\n";
  }
  return out;
}

}  // namespace prefix_router::gateway
