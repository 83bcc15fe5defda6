// GatewayConfig: everything `prefix-router serve` is told, from a YAML file and/or flags.
//
// Field names follow the managed service's vocabulary (RoutingStrategy, PrefixLength,
// ConcurrencyThreshold become routing_strategy, prefix_length, concurrency_threshold). The
// configuration is validated once, at load: an invalid value stops the gateway with a message
// that names the field (as a YAML path, e.g. "pools.llama.prefix_length") and the allowed range.
//
// YAML shape (every field optional except instances; defaults below):
//
//   listen: 127.0.0.1:8080          # host:port of the client listener
//   io_threads: 0                   # 0 = one per core
//   decision_headers: true          # x-prefix-router-instance/-decision/-rank on responses
//   unknown_path_status: 404        # the answer to a path the gateway does not route:
//                                   # 403, 404, 410, 421 or 501 (OpenAI-style JSON error)
//   routing:                        # the default pool's settings
//     routing_strategy: cache-aware # random | least-outstanding-requests | round-robin |
//                                   # prefix-aware | cache-aware | kv-aware | dynamo-kv
//                                   # (the default is kDefaultStrategy, core/policy.h; the
//                                   # managed service's is random)
//     prefix_length: 2048           # 1024..65536; bytes (native API) or characters (OpenAI API)
//     concurrency_threshold: 64     # 1..1024 in-flight requests per instance
//     spill_mode: next-preferred    # next-preferred | least-loaded
//     load_measure: requests        # what "least loaded" compares (least-outstanding-requests,
//                                   # least-loaded spill, saturated): requests in flight, or
//                                   # prompt-tokens: their estimated prompt tokens (body bytes / 4)
//                                   # plus one per request, or engine: the running + waiting
//                                   # requests each engine reports on /metrics (engine_metrics
//                                   # below) plus those sent since. Thresholds count requests.
//     balance_factor: 1.5           # prefix-aware bounded load: an instance is also full at
//                                   # F x its weight share of the pool's in-flight requests (at
//                                   # least 4) or, when the pool is busy, 5% over its share of
//                                   # recent requests; moved keys stay on their new instance.
//                                   # 0 = off (threshold only, the managed service's behaviour),
//                                   # else 1..100
//     max_in_flight: 0              # 0..1000000; while the pool has this many requests in flight
//                                   # (dispatched or retrying) a new one gets 429 with
//                                   # Retry-After: 1 (prefix_router_rejected_requests_total
//                                   # {reason="pool_in_flight"}); 0 = no ceiling
//     tokenizer: local              # kv-aware, dynamo-kv: where the prompt's token ids come from:
//                                   # local = the gateway's engine-compatible tokenizer (matches
//                                   # the emulator); engine = POST /tokenize on a routable instance
//                                   # of the pool (vLLM), one round trip per request
//                                   # (gateway/prompt_tokens.h)
//     cache_aware:                  # cache-aware's block index (core/policy.h)
//       block_bytes: 256            # routing text per block, 16..65536
//       max_blocks: 4096            # blocks per request, 1..65536 (block_bytes x max_blocks of
//                                   # text are keyed, at most 64 MiB)
//       capacity_blocks: 25600      # per instance, 1..2^32; least recently sent forgotten.
//                                   # 25,600 x 256 / 4 = 1.64M tokens: more than a Llama 70B
//                                   # engine on 8 x H100 caches (about 86,000 blocks of 16
//                                   # tokens, 1.38M); kv-aware and dynamo-kv hold as many
//                                   # tokens of reported blocks per instance
//       max_index_bytes: 301989888  # the whole index (288 MiB), 1 MiB..64 GiB: kv-aware's
//                                   # KvIndex gets 8/9, 160 bytes per engine block, enough
//                                   # for 16 instances of 102,400 blocks
//       load_weight: 0.1            # cost of an outstanding prompt token against an uncached
//                                   # one, 0..100
//     key_normalisation:            # what the key is computed over (docs/normalisation.md);
//                                   # a pool's setting replaces this one field by field
//       canonical_json: false       # native API: key the canonical JSON (sorted members, no
//                                   # whitespace, one escaping) instead of raw bytes
//       exclude_fields: []          # native API: members left out of the canonical form
//                                   # (implies it): name, a.b.c, * = any one key; at most 64
//       exclude_patterns: []        # regular expressions (Perl syntax) removed from the keyed
//                                   # text: OpenAI message/prompt text, native string values
//                                   # (implies the canonical form); at most 32
//   pools:                          # per served name (model or adapter): overrides of `routing`
//     llama-3-70b: {routing_strategy: prefix-aware, prefix_length: 4096}
//   instances:
//     - name: a                     # default: host:port of the url
//       url: http://127.0.0.1:8001
//       weight: 1                   # 1..10000
//       models: [llama-3-70b, my-lora]   # served names; empty/absent = serves every name
//       kv_events:                  # the engine's KV cache events (vLLM's ZMQ publisher)
//         endpoint: tcp://10.0.0.5:5557   # tcp://host:port, ipc://path or inproc://name
//         topic: ""                 # the publisher's topic (vLLM's default: empty)
//         replay_endpoint: tcp://10.0.0.5:5558   # optional: asked for batches missed in a gap
//   limits:
//     max_request_body_bytes: 33554432   # 1 KiB..1 GiB; larger bodies get 413
//     max_header_bytes: 65536            # 1 KiB..1 MiB; larger headers get 431
//     max_connections: auto              # auto or 0..1000000 open client connections; a
//                                        # connection beyond them gets 503 (Connection: close)
//                                        # and is closed (prefix_router_rejected_connections_total).
//                                        # auto: half of what the descriptor limit (RLIMIT_NOFILE,
//                                        # raised to its hard limit at start) leaves after a
//                                        # reserve for listeners, health checks and scrapes, so
//                                        # that every client connection can have its upstream
//                                        # one (gateway/connection_limit.h); 0 = no limit
//     max_connections_per_client: 0      # 0..1000000 open connections from one client address;
//                                        # beyond them 429 (too_many_connections_from_client);
//                                        # 0 = no limit (the default: behind a load balancer every
//                                        # client shares one address). limits.* need a restart.
//   timeouts:                       # seconds (fractions allowed)
//     connect: 5                    # upstream TCP connect, (0, 600]
//     first_byte: 300               # upstream response headers after the request is sent, (0, 3600]
//     idle: 120                     # between upstream body chunks, (0, 3600]
//     total: 0                      # whole exchange; 0 = no limit, else (0, 86400]
//     client_read: 30               # reading a client's request head and body, (0, 3600]
//     client_write: 60              # one write to a slow client, (0, 3600]
//     client_idle: 60               # keep-alive wait for a client's next request, (0, 3600]
//     drain: 30                     # SIGTERM: how long in-flight requests may finish, [0, 3600]
//     per_try_first_byte: 0         # 0 = off, else (0, 3600]: an attempt with no response byte
//                                   # this long after its dispatch (nothing sent to the client
//                                   # yet) is cancelled and retried on the next instance
//                                   # (reason "timeout"; the last attempt answers 504)
//     kv_events_silence: 60         # an instance's KV event stream silent this long is stale
//                                   # (kv-aware falls back until it resumes), (0, 86400]
//     tokenize: 1                   # an instance's /tokenize answer (tokenizer: engine), (0, 600];
//                                   # past it the request routes without tokens (cache-aware's view)
//   retries:
//     max_retries: 2                # 0..10 further instances tried before any byte reached the client
//   health:
//     path: /health                 # active check: GET this path, 2xx = success
//     interval: 5                   # seconds between checks of one instance, (0, 3600]; 0 disables
//     timeout: 2                    # per check, (0, 600]
//     unhealthy_threshold: 3        # consecutive failures (active) to eject, 1..100
//     healthy_threshold: 2          # consecutive successes to readmit, 1..100
//     passive_failures: 1           # consecutive connect failures of real traffic to eject; 0 = off
//   log:
//     format: text                  # text | json (one JSON object per line: ts, level, msg and
//                                   # the event's fields)
//     access_log: false             # one line per request: method, path, status, instance,
//                                   # decision, attempts, duration and time to first byte
//   metrics:                        # GET /metrics (docs/operations.md); restart to change
//     listener: client              # client: on the client listener (and the admin one, when
//                                   # on); admin: on the admin listener alone (needs `admin`)
//     require_key: false            # true (needs `clients`): /metrics on the client listener
//                                   # asks for a client key like the API routes
//   admin:                          # the operations listener (docs/admin.md); absent = off
//     listen: 127.0.0.1:9090        # host:port; must be loopback unless a token (16 characters
//                                   # at least) is set
//     token_file: /run/secrets/admin-token   # the bearer token is this file's content (trailing
//                                   # whitespace trimmed), or:
//     token_env: PREFIX_ROUTER_ADMIN_TOKEN   # the bearer token is this environment variable's
//                                   # value; at most one of token_file and token_env
//   epp:                            # the endpoint picker (docs/epp.md): gRPC ext_proc for the
//     listen: 0.0.0.0:9002          # Gateway API Inference Extension; "" = off (the default). With
//                                   # it set, `listen: ""` turns the HTTP proxy listener off
//   tls:                            # HTTPS on the client listener (docs/tls.md); absent = plain
//     cert_file: /etc/prefix-router/tls/cert.pem   # PEM chain, leaf first; TLS 1.2 at least
//     key_file: /etc/prefix-router/tls/key.pem     # PEM private key matching cert_file
//                                   # both read at validation (--check-config) and again by a
//                                   # reload (SIGHUP, POST /admin/reload): new connections get the
//                                   # new pair; a broken pair is rejected and the old one stays
//   upstream_tls:                   # for instances with url https://... (docs/tls.md)
//     ca_file: ""                   # PEM CA bundle the instances' chains must lead to; "" = the
//                                   # system store
//     verify: true                  # chain and host name (SANs) checked, SNI sent; false is
//                                   # logged as a warning at start
//   instances (further fields of each):
//     - url: https://10.0.0.7:8443  # https: TLS to the instance (pooled keep-alive as for http)
//       upstream_tls: {ca_file: /etc/ssl/fleet-ca.pem, verify: true}  # overrides, field by field
//       authorization_env: FLEET_TOKEN          # the Authorization header value (e.g. "Bearer
//       authorization_file: /run/secrets/fleet  # abc") sent to this instance on every request
//                                   # and health check, replacing the client's; at most one of
//                                   # the two; read at validation and re-read by a reload; held
//                                   # in a Secret (never logged, echoed or shown)
//
// Admin is off unless the `admin` section is present: a listener that can remove every
// instance should be asked for. With a token, every admin request must carry
// `Authorization: Bearer <token>`; without one, only a loopback listen address is accepted
// (127.0.0.0/8, ::1, localhost). The token is read at validation (so --check-config finds a
// missing file) and held in a Secret, which nothing prints: it appears in no log, error or dump.
//
//   clients:                        # client API keys (docs/limits.md); absent = no key asked
//     keys_file: /run/secrets/client-keys   # one key a line: "TENANT KEY" or "KEY" alone (its
//                                   # tenant is then key-<8 hex digits of a hash of it>); blank
//                                   # lines and lines starting with '#' are skipped
//     keys:                         # and/or one entry per key, never the key itself:
//       - {tenant: batch, key_env: BATCH_API_KEY}          # the variable's value
//       - {tenant: web, key_file: /run/secrets/web-key}    # the file's content, trimmed
//                                   # keys: visible ASCII, 8..4096 bytes, unique; tenants: 1..128
//                                   # of A-Z a-z 0-9 . _ - : @; at most 100000 keys in all
//   rate_limits:                    # per tenant (docs/limits.md); every field 0 = no limit
//     requests_per_minute: 0        # 0..1000000000, refilled continuously
//     request_burst: 0              # bucket size, 0..1000000000; 0 = requests_per_minute
//     tokens_per_minute: 0          # estimated prompt tokens (body bytes / 4), 0..1000000000000
//     token_burst: 0                # 0..1000000000000; 0 = tokens_per_minute; a request over it
//                                   # can never pass (413 request_too_large)
//     max_tenants: 65536            # 16..10000000 tenants remembered; the least recently seen
//                                   # is forgotten (it comes back with full buckets)
//     tenants:                      # overrides of the fields above, field by field
//       batch: {requests_per_minute: 6000, tokens_per_minute: 0}
//
// Client keys are off unless `clients` is present. Then the API routes (chat and text
// completions, responses, embeddings, invocations, tokenize, detokenize, /v1/models) need
// `Authorization: Bearer KEY` (or `x-api-key: KEY`), else 401 invalid_api_key; /health and
// /metrics stay open. The keys are read at validation and held in Secrets; the client's
// Authorization and x-api-key headers are not forwarded upstream. A tenant is the key's tenant
// when keys are on, else the request's routing group (prompt_cache_key or
// X-Amzn-SageMaker-Prefix-Aware-Id), else the shared tenant `anonymous`. Over a limit: 429
// rate_limit_exceeded with Retry-After. `clients` (keys re-read) and `rate_limits` apply on reload.
//
// Discovery (docs/discovery.md): served names learned from each instance's /v1/models, and
// instances given by a DNS name that resolves to several addresses.
//
//   discovery:
//     models: true                  # default of instances[].discover_models. Absent: every
//                                   # instance without `models` polls its GET /v1/models (one
//                                   # that has none keeps serving every name); instances with
//                                   # `models` keep them as their list. true: every instance,
//                                   # its `models` being the list until the first poll.
//     models_interval: 30           # seconds between polls of one instance's GET /v1/models,
//                                   # [1, 86400]; the poll's timeout is health.timeout
//     resolve_interval: 30          # seconds between resolutions of a `resolve: all` name,
//                                   # [1, 86400]
//     hosts_file: ""                # resolve `resolve: all` names with this hosts(5) file
//                                   # (re-read each time) instead of the system resolver
//     kubernetes:                   # instances = the Ready pods of a selector (present = on;
//                                   # `instances` may then be empty). Either:
//       inference_pool: vllm-pool   # an InferencePool (inference.networking.k8s.io/v1), watched:
//                                   # its spec.selector.matchLabels and targetPorts[0].number
//       # or: selector: {app: vllm}  and  target_port: 8000
//       namespace: ""               # "" = the service account's namespace file
//       api_server: ""              # http(s)://host:port; "" = https://$KUBERNETES_SERVICE_HOST:
//                                   # $KUBERNETES_SERVICE_PORT (http:// for tests only)
//       token_file: /var/run/secrets/kubernetes.io/serviceaccount/token  # re-read per connect
//       ca_file: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt    # re-read per connect
//       instance: {name: vllm, weight: 1, models: [], discover_models: true}  # each pod's
//                                   # instance NAME@POD at podIP:target_port (also
//                                   # authorization_env/_file); a watch or list error keeps them
//   engine_metrics:                 # scrape each instance's Prometheus /metrics for the load
//                                   # it reports (vllm:num_requests_running, ..._waiting,
//                                   # kv_cache_usage_perc): on when this section is present or
//                                   # a pool has load_measure: engine
//     interval: 1                   # seconds between scrapes, [0.05, 3600]; the scrape's timeout
//                                   # is health.timeout; a failed scrape forgets the report
//     path: /metrics
//   instances:
//     - url: http://vllm.internal:8000
//       discover_models: true       # served names = the ids of GET /v1/models (base models and
//                                   # LoRA adapters), at most 1,024; `models`, if set, is the
//                                   # list until the first successful poll. Set here (true),
//                                   # with no `models` the instance serves no name until then;
//                                   # left to discovery.models, it serves every name until
//                                   # then (and for good if it has no usable /v1/models).
//                                   # A failed poll keeps the last list.
//       resolve: all                # none | all. all: one instance per address of the url's
//                                   # DNS name (IPv4 and IPv6), named NAME@ADDRESS:PORT, same
//                                   # weight, models and Host header; re-resolved every
//                                   # resolve_interval; a failed or empty answer keeps the set.
//                                   # Needs a DNS name (not an address) in url.
//
// Run-time changes (admin API, `POST /admin/reload`, SIGHUP): `instances` (their credentials
// and upstream_tls overrides included), `routing`, `pools`, `clients`, `rate_limits`,
// `upstream_tls` and the files of `tls` take effect at once; every other field needs a restart
// and a reload reports it by name.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/policy.h"
#include "core/status.h"

namespace prefix_router::gateway {

// A credential. It can be compared (in constant time) but never printed: there is no accessor
// that returns it and no stream operator, so it cannot end up in a log line or an error.
class Secret {
 public:
  Secret() = default;
  explicit Secret(std::string value) : value_(std::move(value)) {}
  bool empty() const { return value_.empty(); }
  // Its length in bytes (a policy on strength may look at it; the bytes stay hidden).
  size_t size() const { return value_.size(); }
  // True when `candidate` equals the secret; the time taken does not depend on where they
  // differ (only on the candidate's length).
  bool Matches(std::string_view candidate) const;
  // Two empty secrets are the same (none configured twice); Matches never accepts an empty one.
  bool SameAs(const Secret& other) const { return empty() ? other.empty() : Matches(other.value_); }
  // The ways out, for upstream credentials: sets header `name` of an outgoing message (a Beast
  // request) to the secret, or appends the header line "name: secret\r\n" to a serialized
  // head. Nothing else reads the value.
  template <class Message>
  void SetHeaderOn(Message& message, std::string_view name) const {
    message.set(name, value_);
  }
  void AppendHeaderLine(std::string& head, std::string_view name) const {
    head.append(name);
    head.append(": ");
    head.append(value_);
    head.append("\r\n");
  }
  // A seeded 64-bit hash (XXH3) of the secret, to index secrets without holding them in the
  // clear a second time. With a random seed it says nothing about the secret; with a fixed one
  // (a fingerprint that names a key) a few bits of it say nothing usable about a long key.
  uint64_t Hash(uint64_t seed) const;

 private:
  std::string value_;
};

// TLS to https instances: the global `upstream_tls`, or an instance's with its overrides.
struct UpstreamTlsConfig {
  std::string ca_file;  // PEM CA bundle; empty = the system store
  bool verify = true;
  bool operator==(const UpstreamTlsConfig&) const = default;
};

// How an instance's url host becomes addresses (docs/discovery.md).
enum class ResolveMode {
  kNone,  // one instance; the host is resolved when a connection is made
  kAll,   // one instance per address the name resolves to, re-resolved every resolve_interval
};

// An instance's KV cache event stream (vLLM's --kv-events-config; gateway/kv_events.h): the
// gateway's SUB socket connects to `endpoint` (the engine binds it, e.g. tcp://*:5557) and, on a
// sequence gap, asks `replay_endpoint` (the engine's ROUTER) for the missing batches.
struct KvEventsConfig {
  std::string endpoint;         // tcp://host:port, ipc://path or inproc://name; "" = none
  std::string topic;            // the publisher's topic; "" = vLLM's default
  std::string replay_endpoint;  // "" = no replay
  bool operator==(const KvEventsConfig&) const = default;
};

// The entries of an instance's /v1/models answer as the engine sent them, by id
// (gateway/discovery.h): each a JSON object, minified, with every member the engine gave
// (object, created, owned_by, root, parent, max_model_len, permission, ...) except `instances`,
// the member the gateway's own /v1/models adds. Bounded by the answer (4 MiB) and 1,024 ids.
using ModelEntries = std::map<std::string, std::string, std::less<>>;

struct InstanceConfig {
  std::string name;  // defaults to host:port of url
  std::string url;   // http(s)://host:port[/base-path]
  uint32_t weight = 1;
  std::vector<std::string> models;  // served names; empty = every name
  // Poll GET /v1/models; absent = discovery.models (DiscoversModels). Set to true, the instance
  // is known to have /v1/models: until it answers, it serves its configured `models` only (none
  // if none); left absent, it serves what it would without discovery until it answers a list.
  std::optional<bool> discover_models;
  ResolveMode resolve = ResolveMode::kNone;
  std::optional<std::string> tls_ca_file;  // the instance's `upstream_tls` overrides
  std::optional<bool> tls_verify;
  std::string authorization_env;  // at most one of the two
  std::string authorization_file;
  KvEventsConfig kv_events;  // `kv_events: {endpoint, topic, replay_endpoint}`
  // Parsed from url by validation:
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // prefix added to proxied paths ("" or "/v2")
  bool https = false;
  // Set by the gateway on the instances it derives (never read from YAML): the Host header
  // (the template's host:port; empty = host:port), and `models` being the whole list of served
  // names even when it is empty (discovered names).
  std::string host_header;
  std::string tls_name;  // https: the name verified and sent as SNI (the template's); empty = host
  bool models_only_listed = false;
  // Set by the gateway with discovered `models`: the instance's /v1/models entries, by id.
  std::shared_ptr<const ModelEntries> model_entries;
  bool models_polled = false;  // set by the gateway: DiscoversModels of the configured instance
  // Filled by validation: the effective TLS settings (upstream_tls with the overrides) and the
  // credential (empty = none; the client's Authorization header then passes through).
  UpstreamTlsConfig tls;
  Secret authorization;
};

// HTTPS on the client listener. Validation loads both files (and checks that they match).
struct ListenerTlsConfig {
  bool enabled = false;  // the YAML has a `tls` section
  std::string cert_file;
  std::string key_file;
};

// Instances from the Kubernetes API (gateway/kubernetes_discovery.h, docs/discovery.md): the
// Ready pods a label selector picks, from an InferencePool or configured.
inline constexpr std::string_view kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";
struct KubernetesDiscoveryConfig {
  bool enabled = false;    // the YAML has discovery.kubernetes
  std::string api_server;  // http(s)://host:port; "" = in-cluster (KUBERNETES_SERVICE_HOST/_PORT)
  std::string token_file = std::string(kServiceAccountDir) + "/token";  // "" = no token
  std::string ca_file = std::string(kServiceAccountDir) + "/ca.crt";    // https api_server
  std::string namespace_name;  // `namespace`; "" = the service account's (kServiceAccountDir/namespace)
  std::string inference_pool;  // the InferencePool to follow; or selector and target_port:
  std::map<std::string, std::string> selector;
  uint32_t target_port = 0;
  // The template of each pod's instance: name (default: inference_pool, else "kubernetes"),
  // weight, models, discover_models, authorization_env/_file. Its url is the pod's.
  InstanceConfig instance;
  // Filled by validation:
  std::string api_host;
  uint16_t api_port = 0;
  bool api_https = false;
  std::string resolved_namespace;
};

// Discovery of served names and of instances by DNS (docs/discovery.md). Read at start: a
// reload that changes this section needs a restart.
struct DiscoveryConfig {
  // Default of instances[].discover_models; absent = true for instances without `models`
  // (DiscoversModels).
  std::optional<bool> models;
  double models_interval = 30;   // seconds between two polls of one instance's /v1/models
  double resolve_interval = 30;  // seconds between two resolutions of a `resolve: all` name
  std::string hosts_file;        // resolve names with this hosts(5) file, not the system's
  KubernetesDiscoveryConfig kubernetes;
};

// Whether discovery polls `ic`'s GET /v1/models: its own discover_models, else discovery.models,
// else (the default) when it lists no `models`: a configured list stays the instance's list
// unless discovery is asked for, and a bare instance serves the names its engine lists.
inline bool DiscoversModels(const InstanceConfig& ic, const DiscoveryConfig& d) {
  return ic.discover_models.value_or(d.models.value_or(ic.models.empty()));
}

struct EngineMetricsConfig {
  bool enabled = false;  // the section is present (a pool with load_measure: engine also turns it on)
  double interval = 1;   // seconds between two scrapes of one instance
  std::string path = "/metrics";
};

struct TimeoutsConfig {
  double connect = 5;
  double first_byte = 300;
  double idle = 120;
  double total = 0;
  double client_read = 30;
  double client_write = 60;
  double client_idle = 60;
  double drain = 30;
  // Per try: an attempt that has sent the client nothing and gets no response byte from its
  // instance within this many seconds of its dispatch is cancelled and retried on the next
  // instance of the request's preference order (Envoy's per_try_timeout, HAProxy's retry-on
  // response-timeout); 0 = off (the default), else (0, 3600]. The last attempt then ends with 504.
  double per_try_first_byte = 0;
  // An instance's KV event stream silent for longer is stale (gateway/kv_events.h), (0, 86400].
  double kv_events_silence = 60;
  // A /tokenize answer (routing.tokenizer: engine), (0, 600]; later, the request routes without
  // the tokens.
  double tokenize = 1;
};

struct HealthConfig {
  std::string path = "/health";
  double interval = 5;
  double timeout = 2;
  uint32_t unhealthy_threshold = 3;
  uint32_t healthy_threshold = 2;
  uint32_t passive_failures = 1;
};

enum class LogFormat { kText, kJson };

struct LogConfig {
  LogFormat format = LogFormat::kText;
  bool access_log = false;
};

// Served names (configured `models`, discovered ids) per instance, and the bytes of one name.
inline constexpr size_t kMaxServedNames = 1024;
inline constexpr size_t kMaxServedNameBytes = 1024;
// A served name's rules (non-empty, at most kMaxServedNameBytes, valid UTF-8); the message
// does not name the field.
Status CheckServedName(std::string_view name);
// "none" | "all"; the message ("resolve: '...' is not one of none, all") names the values.
Result<ResolveMode> ParseResolveMode(std::string_view name);

// "text" | "json"; an error names the allowed values.
Result<LogFormat> ParseLogFormat(std::string_view name);
std::string_view LogFormatName(LogFormat format);

// Where GET /metrics is served (docs/operations.md): on the client listener (and the admin one,
// when on), or on the admin listener alone.
enum class MetricsListener { kClient, kAdmin };
Result<MetricsListener> ParseMetricsListener(std::string_view name);

struct MetricsConfig {
  MetricsListener listener = MetricsListener::kClient;
  bool require_key = false;  // with `clients`: /metrics on the client listener needs a client key
  bool operator==(const MetricsConfig&) const = default;
};

// An admin token on a listener reachable from other hosts is at least this long.
inline constexpr size_t kMinRemoteAdminTokenBytes = 16;

// The endpoint picker (docs/epp.md): gRPC ext_proc for the Gateway API Inference Extension,
// beside (or, with `listen: ""`, instead of) the HTTP proxy listener.
struct EppConfig {
  std::string listen;  // HOST:PORT; empty = off
  // Filled by validation:
  std::string listen_host;
  uint16_t listen_port = 0;
  bool operator==(const EppConfig&) const = default;
};

struct AdminConfig {
  bool enabled = false;  // the YAML has an `admin` section
  std::string listen = "127.0.0.1:9090";
  std::string token_file;  // at most one of token_file and token_env
  std::string token_env;
  // Filled by validation:
  std::string listen_host;
  uint16_t listen_port = 0;
  Secret token;  // empty = no authentication (loopback only)
};

// Client API keys, as validation loads them: key -> tenant. Immutable once built and shared by
// configurations and the gateway. Lookups hash the candidate with a per-process random seed to
// find the entry and then compare it in constant time (Secret::Matches), so a client learns
// nothing from the answer's timing but whether its key is right.
class ClientKeySet {
 public:
  ClientKeySet();
  // Errors (InvalidArgument) name `origin` ("clients.keys_file line 3"), never the key: the
  // same key given twice.
  Status Add(std::string tenant, Secret key, std::string origin);
  // The tenant of `candidate`, or nullptr when it is no key of the set.
  const std::string* Find(std::string_view candidate) const;
  size_t size() const { return entries_.size(); }
  size_t tenant_count() const;
  bool HasTenant(std::string_view tenant) const;
  bool SameAs(const ClientKeySet& other) const;

 private:
  struct Entry {
    std::string tenant;
    Secret key;
    std::string origin;
  };
  uint64_t seed_;
  std::vector<Entry> entries_;
  std::unordered_multimap<uint64_t, size_t> index_;  // seeded hash of the key -> entries_ index
};

struct ClientKeySource {
  std::string tenant;
  std::string key_env;  // exactly one of key_env and key_file
  std::string key_file;
};

struct ClientsConfig {
  bool enabled = false;  // the YAML has a `clients` section
  std::string keys_file;
  std::vector<ClientKeySource> keys;
  // Filled by validation (null while clients are off):
  std::shared_ptr<const ClientKeySet> key_set;
};

// One tenant's limits; 0 = no limit. A burst of 0 is one minute's worth.
struct TenantLimits {
  uint64_t requests_per_minute = 0;
  uint64_t request_burst = 0;
  uint64_t tokens_per_minute = 0;
  uint64_t token_burst = 0;
  bool any() const { return requests_per_minute > 0 || tokens_per_minute > 0; }
  bool operator==(const TenantLimits&) const = default;
};

inline constexpr uint64_t kMaxRequestsPerMinute = 1'000'000'000;
inline constexpr uint64_t kMaxTokensPerMinute = 1'000'000'000'000;
inline constexpr uint32_t kMinTenants = 16;
inline constexpr uint32_t kMaxTenants = 10'000'000;
inline constexpr std::string_view kAnonymousTenant = "anonymous";

struct RateLimitsConfig {
  TenantLimits defaults;
  std::map<std::string, TenantLimits, std::less<>> tenants;  // resolved over `defaults`
  uint32_t max_tenants = 65536;
  bool enabled() const;
  // The limits of `tenant`: its override, else the defaults.
  const TenantLimits& For(std::string_view tenant) const;
  bool operator==(const RateLimitsConfig&) const = default;
};

// What an unknown path may be answered with: not found, forbidden (hide what exists), gone,
// misdirected (a front proxy should try elsewhere), not implemented.
inline constexpr uint32_t kUnknownPathStatuses[] = {403, 404, 410, 421, 501};

// limits.max_connections: `auto`, the default.
inline constexpr uint32_t kAutoMaxConnections = std::numeric_limits<uint32_t>::max();

struct GatewayConfig {
  std::string listen = "127.0.0.1:8080";
  std::string listen_host;  // parsed from listen by validation
  uint16_t listen_port = 0;
  uint32_t io_threads = 0;
  bool decision_headers = true;
  uint32_t unknown_path_status = 404;                        // one of kUnknownPathStatuses
  RoutingOptions routing = DefaultPoolRouting();             // default pool (strategy kDefaultStrategy)
  std::map<std::string, RoutingOptions, std::less<>> pools;  // served name -> settings
  std::vector<InstanceConfig> instances;
  uint64_t max_request_body_bytes = 32ull << 20;
  uint32_t max_header_bytes = 64u << 10;
  // Open client connections; kAutoMaxConnections (the default, YAML `auto`) derives the limit
  // from the descriptor limit (AutoMaxConnections); 0 = no limit.
  uint32_t max_connections = kAutoMaxConnections;
  // Open client connections from one address; 0 = no limit (the default: behind a load balancer
  // or an ingress every client shares its address).
  uint32_t max_connections_per_client = 0;
  TimeoutsConfig timeouts;
  uint32_t max_retries = 2;
  HealthConfig health;
  LogConfig log;
  AdminConfig admin;
  EppConfig epp;
  ClientsConfig clients;
  RateLimitsConfig rate_limits;
  DiscoveryConfig discovery;
  EngineMetricsConfig engine_metrics;
  MetricsConfig metrics;
  ListenerTlsConfig tls;
  UpstreamTlsConfig upstream_tls;

  // The settings for a served name: its pool's, else the default.
  const RoutingOptions& RoutingFor(std::string_view served_name) const;
};

// Parses YAML text (the shape above) into `base` (fields absent from the YAML keep their value
// in `base`). Unknown keys are errors (typos must not pass silently). Does not validate ranges.
Result<GatewayConfig> ParseConfigYaml(const std::string& yaml_text, GatewayConfig base = {});
Result<GatewayConfig> LoadConfigFile(const std::string& path, GatewayConfig base = {});

// Checks every range and cross-field rule, fills the parsed fields (listen_host/port, instance
// host/port/base_path, default instance names), and rejects duplicate instance names.
// The message names the field as a YAML path and the allowed range or form.
Status ValidateConfig(GatewayConfig& config);

// What a valid configuration probably does not mean to do, one sentence each (empty: nothing):
// a pool whose strategy learns from the engines' KV event streams (kv-aware, dynamo-kv) while no
// instance has `kv_events`. `serve` logs each at start and after a reload, `--check-config`
// prints them.
std::vector<std::string> ConfigWarnings(const GatewayConfig& config);

}  // namespace prefix_router::gateway
