#include "gateway/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <random>
#include <system_error>
#include <utility>

#include <xxhash.h>

#include "api/key_normalisation.h"
#include "api/openai_request.h"
#include "api/redact.h"
#include "base/utf8.h"
#include "core/fleet.h"
#include "gateway/config_schema.h"
#include "http/tls.h"

namespace prefix_router::gateway {
namespace {

// ---------------------------------------------------------------------------------------------
// YAML reading. yaml-cpp reports problems with exceptions; every call that can throw is made
// under the try in ParseConfigYaml, and the readers below check node types before converting so
// that a wrong type becomes a message naming the field rather than yaml-cpp's BadConversion.

std::string Child(const std::string& path, std::string_view key) {
  std::string out = path;
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

std::string Index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// "'abc'", "a map", ...: what the user wrote, for "expected X, got Y".
std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Undefined: break;
  }
  return "an undefined value";
}

Status TypeError(const std::string& path, std::string_view expected, const YAML::Node& n) {
  return Status::InvalidArgument(path + ": expected " + std::string(expected) + ", got " + Describe(n));
}

// Replaces the leading "field: " of a message from the core (ParseStrategy, ParseSpillMode)
// with the full YAML path.
Status WithPath(const Status& s, const std::string& path) {
  const std::string& m = s.message();
  const size_t colon = m.find(": ");
  return Status(s.code(), path + ": " + (colon == std::string::npos ? m : m.substr(colon + 2)));
}

template <typename T>
Status ReadUnsigned(const YAML::Node& n, const std::string& path, T& out) {
  static_assert(std::is_unsigned_v<T>);
  if (!n.IsScalar()) return TypeError(path, "an integer", n);
  std::string_view s = n.Scalar();
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (!s.empty() && s.front() == '-' && s.size() > 1 &&
      std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::InvalidArgument(path + ": expected a non-negative integer, got '" + n.Scalar() + "'");
  }
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (s.empty() || ptr != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    return TypeError(path, "an integer", n);
  }
  if (ec == std::errc::result_out_of_range || v > std::numeric_limits<T>::max()) {
    return Status::InvalidArgument(path + ": " + n.Scalar() + " is too large (at most " +
                                   std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  out = static_cast<T>(v);
  return Status::Ok();
}

Status ReadBool(const YAML::Node& n, const std::string& path, bool& out) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") {
      out = true;
      return Status::Ok();
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      out = false;
      return Status::Ok();
    }
  }
  return TypeError(path, "true or false", n);
}

Status ReadString(const YAML::Node& n, const std::string& path, std::string& out) {
  if (!n.IsScalar()) return TypeError(path, "a string", n);
  out = n.Scalar();
  return Status::Ok();
}

using FieldFn = std::function<Status(const std::string& key, const YAML::Node& value, const std::string& field_path)>;

// Calls `fn` for each entry of the map at `path`, in document order. Unknown, duplicate and
// non-string keys are errors. A null node (a section written with nothing under it) is an empty
// map.
Status ForEachField(const YAML::Node& map, const std::string& path, const std::vector<std::string_view>& known,
                    const FieldFn& fn) {
  if (map.IsNull()) return Status::Ok();
  if (!map.IsMap()) return TypeError(path.empty() ? "config" : path, "a map", map);
  std::vector<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      return Status::InvalidArgument((path.empty() ? "config" : path) + ": field names must be strings, got " +
                                     Describe(it->first));
    }
    const std::string& key = it->first.Scalar();
    const std::string field_path = Child(path, key);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string msg = field_path + ": unknown field; expected one of ";
      bool first = true;
      for (std::string_view k : known) {
        if (!first) msg += ", ";
        msg += k;
        first = false;
      }
      return Status::InvalidArgument(msg);
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return Status::InvalidArgument(field_path + ": set more than once");
    }
    seen.push_back(key);
    if (Status s = fn(key, it->second, field_path); !s.ok()) return s;
  }
  return Status::Ok();
}

// The fields a `routing` or `pools.NAME` section sets. Pools apply theirs on top of the final
// `routing`, which is only known once the whole document has been read.
struct RoutingPatch {
  // Scalars of the schema's routing fields, as written (each was read once, so it reads again).
  std::vector<std::pair<const ConfigField*, std::string>> values;
  // key_normalisation's lists: a pool's list replaces the `routing` list.
  std::optional<std::vector<std::string>> exclude_fields;
  std::optional<std::vector<std::string>> exclude_patterns;

  // Whether the section sets the field at `rel`.
  bool Sets(std::string_view rel) const {
    return std::any_of(values.begin(), values.end(), [rel](const auto& v) { return v.first->rel == rel; });
  }

  // A preset (compatibility) first, so that a field the section also sets contradicts it in
  // Validate whatever their order in the file; with a preset and no strategy, the preset's
  // default strategy (sagemaker: random, as the managed service's).
  void ApplyTo(RoutingOptions& o) const {
    for (const auto& [field, text] : values) {
      if (field->rel == "compatibility") (void)field->set_routing(o, text, field->path);
    }
    if (Sets("compatibility") && !Sets("routing_strategy") && o.compatibility == Compatibility::kSageMaker) {
      o.strategy = Strategy::kRandom;
    }
    for (const auto& [field, text] : values) {
      if (field->rel != "compatibility") (void)field->set_routing(o, text, field->path);
    }
    if (exclude_fields) o.key_normalisation.exclude_fields = *exclude_fields;
    if (exclude_patterns) o.key_normalisation.exclude_patterns = *exclude_patterns;
  }
};

// The managed service's block, `RoutingConfig: {RoutingStrategy, PrefixAwareRoutingConfig:
// {PrefixLength, ConcurrencyThreshold}}` (SageMaker's ProductionVariantRoutingConfig), read into
// `out` as the routing fields it names. Its rules: RoutingStrategy required; the inner block only
// with PREFIX_AWARE, and then both its fields, with the service's ranges; errors name the
// service's field. A setting given here and under our name in the same scope (`scope`: the
// section holding ours) is refused.
Status ReadManagedRouting(const YAML::Node& n, const std::string& path, const RoutingPatch& ours,
                          const std::string& scope, RoutingPatch& out) {
  std::optional<std::string> strategy;
  std::optional<uint64_t> prefix_length, threshold;
  bool inner = false;
  const std::string inner_path = Child(path, "PrefixAwareRoutingConfig");
  Status s = ForEachField(
      n, path, {"RoutingStrategy", "PrefixAwareRoutingConfig"},
      [&](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
        if (key == "RoutingStrategy") {
          std::string name;
          if (Status st = ReadString(v, p, name); !st.ok()) return st;
          if (name == "RANDOM")
            strategy = std::string(StrategyName(Strategy::kRandom));
          else if (name == "LEAST_OUTSTANDING_REQUESTS")
            strategy = std::string(StrategyName(Strategy::kLeastOutstanding));
          else if (name == "PREFIX_AWARE")
            strategy = std::string(StrategyName(Strategy::kPrefixAware));
          else
            return Status::InvalidArgument(p + ": '" + name +
                                           "' is not one of RANDOM, LEAST_OUTSTANDING_REQUESTS, PREFIX_AWARE");
          return Status::Ok();
        }
        inner = true;
        return ForEachField(v, p, {"PrefixLength", "ConcurrencyThreshold"},
                            [&](const std::string& k, const YAML::Node& x, const std::string& xp) -> Status {
                              uint64_t value = 0;
                              if (Status st = ReadUnsigned(x, xp, value); !st.ok()) return st;
                              const bool length = k == "PrefixLength";
                              const uint64_t lo = length ? kMinPrefixLength : kMinConcurrencyThreshold;
                              const uint64_t hi = length ? kMaxPrefixLength : kMaxConcurrencyThreshold;
                              if (value < lo || value > hi) {
                                return Status::InvalidArgument(xp + ": " + std::to_string(value) +
                                                               " is outside the allowed range " + std::to_string(lo) +
                                                               ".." + std::to_string(hi));
                              }
                              (length ? prefix_length : threshold) = value;
                              return Status::Ok();
                            });
      });
  if (!s.ok()) return s;
  if (!strategy) return Status::InvalidArgument(Child(path, "RoutingStrategy") + ": required");
  const bool prefix_aware = *strategy == StrategyName(Strategy::kPrefixAware);
  if (inner && !prefix_aware) {
    return Status::InvalidArgument(inner_path + ": only with RoutingStrategy PREFIX_AWARE");
  }
  if (prefix_aware && !prefix_length) {
    return Status::InvalidArgument(Child(inner_path, "PrefixLength") + ": required with RoutingStrategy PREFIX_AWARE");
  }
  if (prefix_aware && !threshold) {
    return Status::InvalidArgument(Child(inner_path, "ConcurrencyThreshold") +
                                   ": required with RoutingStrategy PREFIX_AWARE");
  }
  struct Setting {
    const char* theirs;
    const char* rel;
    std::optional<std::string> value;
  };
  for (const Setting& set : {Setting{"RoutingStrategy", "routing_strategy", strategy},
                             Setting{"PrefixAwareRoutingConfig.PrefixLength", "prefix_length",
                                     prefix_length ? std::optional(std::to_string(*prefix_length)) : std::nullopt},
                             Setting{"PrefixAwareRoutingConfig.ConcurrencyThreshold", "concurrency_threshold",
                                     threshold ? std::optional(std::to_string(*threshold)) : std::nullopt}}) {
    if (!set.value) continue;
    if (ours.Sets(set.rel)) {
      return Status::InvalidArgument(Child(path, set.theirs) + " and " + Child(scope, set.rel) +
                                     " set the same thing: give one of them");
    }
    out.values.emplace_back(FindRoutingField(set.rel), *set.value);
  }
  return Status::Ok();
}

// What a scalar of `kind` is called in a type error.
std::string_view Expectation(FieldKind kind) {
  switch (kind) {
    case FieldKind::kInteger: return "an integer";
    case FieldKind::kSeconds: return "a number of seconds";
    case FieldKind::kNumber: return "a number";
    case FieldKind::kBoolean: return "true or false";
    default: return "a string";
  }
}

// One scalar field of the schema, read from YAML into `config`.
Status ReadField(const ConfigField& field, const YAML::Node& n, const std::string& path, GatewayConfig& config) {
  if (!n.IsScalar()) return TypeError(path, Expectation(field.kind), n);
  return field.set(config, n.Scalar(), path);
}

// The scalar fields the schema lists under `section` ("timeouts"), read through the schema.
Status ReadSection(const YAML::Node& n, const std::string& section, GatewayConfig& config) {
  std::vector<std::string_view> known;
  for (const ConfigField& f : ConfigSchema()) {
    if (f.scalar() && !f.routing() && f.section() == section) known.push_back(f.key());
  }
  return ForEachField(n, section, known, [&config](const std::string&, const YAML::Node& v, const std::string& p) {
    return ReadField(*FindConfigField(p), v, p, config);
  });
}

Status ReadStrings(const YAML::Node& n, const std::string& path, std::vector<std::string>& out) {
  out.clear();
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) return TypeError(path, "a list of strings", n);
  for (size_t i = 0; i < n.size(); ++i) {
    std::string item;
    if (Status s = ReadString(n[i], Index(path, i), item); !s.ok()) return s;
    out.push_back(std::move(item));
  }
  return Status::Ok();
}

// The routing fields under `prefix` ("", "cache_aware.", "key_normalisation.") of a `routing`
// or `pools.NAME` section at `path`, read through the schema into `out`.
Status ReadRoutingLevel(const YAML::Node& n, const std::string& path, const std::string& prefix, RoutingPatch& out,
                        std::optional<YAML::Node>* managed = nullptr) {
  std::vector<std::string_view> known;
  for (const ConfigField& f : ConfigSchema()) {
    if (!f.path.starts_with("routing.")) continue;
    const std::string_view rel = std::string_view(f.path).substr(8);
    if (!rel.starts_with(prefix)) continue;
    const std::string_view key = rel.substr(prefix.size(), rel.find('.', prefix.size()) - prefix.size());
    if (std::find(known.begin(), known.end(), key) == known.end()) known.push_back(key);
  }
  if (managed != nullptr) known.push_back("RoutingConfig");
  return ForEachField(
      n, path, known,
      [&out, &prefix, managed](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
        const std::string rel = prefix + key;
        if (rel == "RoutingConfig") {  // read once the section's own fields are known
          managed->emplace(v);
          return Status::Ok();
        }
        if (rel == "key_normalisation" && !v.IsMap()) {
          return TypeError(p, "a map with canonical_json, exclude_fields and/or exclude_patterns", v);
        }
        if (rel == "cache_aware" || rel == "key_normalisation" || rel == "flow_control") {
          return ReadRoutingLevel(v, p, rel + ".", out);
        }
        if (rel == "key_normalisation.exclude_fields" || rel == "key_normalisation.exclude_patterns") {
          std::vector<std::string> list;
          if (Status s = ReadStrings(v, p, list); !s.ok()) return s;
          (key == "exclude_fields" ? out.exclude_fields : out.exclude_patterns) = std::move(list);
          return Status::Ok();
        }
        const ConfigField* field = FindRoutingField(rel);
        if (!v.IsScalar()) return TypeError(p, Expectation(field->kind), v);
        RoutingOptions scratch;
        if (Status s = field->set_routing(scratch, v.Scalar(), p); !s.ok()) return s;
        out.values.emplace_back(field, v.Scalar());
        return Status::Ok();
      });
}

// `routing`, or a pool (`pool`: which may also hold the managed service's RoutingConfig block).
Status ReadRouting(const YAML::Node& n, const std::string& path, RoutingPatch& out, bool pool = false) {
  std::optional<YAML::Node> managed;
  if (Status s = ReadRoutingLevel(n, path, "", out, pool ? &managed : nullptr); !s.ok()) return s;
  if (!managed) return Status::Ok();
  return ReadManagedRouting(*managed, Child(path, "RoutingConfig"), out, path, out);
}

Status ReadModels(const YAML::Node& n, const std::string& path, std::vector<std::string>& out) {
  out.clear();
  if (n.IsNull()) return Status::Ok();
  if (n.IsScalar()) {  // `models: llama` for a single name
    out.push_back(n.Scalar());
    return Status::Ok();
  }
  if (!n.IsSequence()) return TypeError(path, "a list of names", n);
  for (size_t i = 0; i < n.size(); ++i) {
    std::string name;
    if (Status s = ReadString(n[i], Index(path, i), name); !s.ok()) return s;
    out.push_back(std::move(name));
  }
  return Status::Ok();
}

// An instance's `upstream_tls`: each field present overrides the global one.
Status ReadInstanceTls(const YAML::Node& n, const std::string& path, InstanceConfig& out) {
  return ForEachField(n, path, {"ca_file", "verify"},
                      [&out](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
                        if (key == "ca_file") {
                          std::string file;
                          if (Status s = ReadString(v, p, file); !s.ok()) return s;
                          out.tls_ca_file = std::move(file);
                          return Status::Ok();
                        }
                        bool verify = true;
                        if (Status s = ReadBool(v, p, verify); !s.ok()) return s;
                        out.tls_verify = verify;
                        return Status::Ok();
                      });
}

Status ReadKvEvents(const YAML::Node& n, const std::string& path, KvEventsConfig& out) {
  return ForEachField(
      n, path, {"endpoint", "topic", "replay_endpoint"},
      [&out](const std::string& key, const YAML::Node& v, const std::string& p) {
        return ReadString(v, p, key == "endpoint" ? out.endpoint : key == "topic" ? out.topic : out.replay_endpoint);
      });
}

Status ReadInstance(const YAML::Node& n, const std::string& path, InstanceConfig& out) {
  if (!n.IsMap()) return TypeError(path, "a map with url (and optionally name, weight, models)", n);
  return ForEachField(n, path,
                      {"name", "url", "weight", "models", "discover_models", "resolve", "upstream_tls",
                       "authorization_env", "authorization_file", "kv_events"},
                      [&out](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
                        if (key == "name") return ReadString(v, p, out.name);
                        if (key == "url") return ReadString(v, p, out.url);
                        if (key == "weight") return ReadUnsigned(v, p, out.weight);
                        if (key == "discover_models") {
                          bool b = false;
                          if (Status s = ReadBool(v, p, b); !s.ok()) return s;
                          out.discover_models = b;
                          return Status::Ok();
                        }
                        if (key == "resolve") {
                          std::string mode;
                          if (Status s = ReadString(v, p, mode); !s.ok()) return s;
                          Result<ResolveMode> r = ParseResolveMode(mode);
                          if (!r.ok()) return WithPath(r.status(), p);
                          out.resolve = *r;
                          return Status::Ok();
                        }
                        if (key == "upstream_tls") return ReadInstanceTls(v, p, out);
                        if (key == "authorization_env") return ReadString(v, p, out.authorization_env);
                        if (key == "authorization_file") return ReadString(v, p, out.authorization_file);
                        if (key == "kv_events") return ReadKvEvents(v, p, out.kv_events);
                        return ReadModels(v, p, out.models);
                      });
}

// `discovery.kubernetes`: its scalars through the schema, `selector` (label: value) and the
// `instance` template (the instance fields that make sense for a pod).
Status ReadKubernetes(const YAML::Node& n, const std::string& path, GatewayConfig& config) {
  KubernetesDiscoveryConfig& k = config.discovery.kubernetes;
  k.enabled = true;
  std::vector<std::string_view> known = {"selector", "instance"};
  for (const ConfigField& f : ConfigSchema()) {
    if (f.scalar() && f.section() == path) known.push_back(f.key());
  }
  return ForEachField(n, path, known, [&](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
    if (key == "selector") {
      k.selector.clear();
      if (v.IsNull()) return Status::Ok();
      if (!v.IsMap()) return TypeError(p, "a map of label to value", v);
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it->first.IsScalar() || !it->second.IsScalar()) {
          return Status::InvalidArgument(p + ": labels and values must be strings");
        }
        k.selector[it->first.Scalar()] = it->second.Scalar();
      }
      return Status::Ok();
    }
    if (key == "instance") {
      if (!v.IsMap() && !v.IsNull()) return TypeError(p, "a map of instance fields", v);
      Status s = ForEachField(v, p,
                              {"name", "weight", "models", "discover_models", "authorization_env",
                               "authorization_file"},
                              [](const std::string&, const YAML::Node&, const std::string&) { return Status::Ok(); });
      if (!s.ok()) return s;
      k.instance = InstanceConfig{};
      return v.IsNull() ? Status::Ok() : ReadInstance(v, p, k.instance);
    }
    return ReadField(*FindConfigField(p), v, p, config);
  });
}

// `discovery`: scalars through the schema, and `kubernetes`.
Status ReadDiscovery(const YAML::Node& n, const std::string& path, GatewayConfig& config) {
  std::vector<std::string_view> known = {"kubernetes"};
  for (const ConfigField& f : ConfigSchema()) {
    if (f.scalar() && f.section() == path) known.push_back(f.key());
  }
  return ForEachField(n, path, known, [&config](const std::string& key, const YAML::Node& v, const std::string& p) {
    if (key == "kubernetes") return ReadKubernetes(v, p, config);
    return ReadField(*FindConfigField(p), v, p, config);
  });
}

Status ReadInstances(const YAML::Node& n, const std::string& path, std::vector<InstanceConfig>& out) {
  out.clear();
  if (n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) return TypeError(path, "a list of instances", n);
  for (size_t i = 0; i < n.size(); ++i) {
    InstanceConfig instance;
    if (Status s = ReadInstance(n[i], Index(path, i), instance); !s.ok()) return s;
    out.push_back(std::move(instance));
  }
  return Status::Ok();
}

Status ReadPools(const YAML::Node& n, const std::string& path, std::vector<std::pair<std::string, RoutingPatch>>& out) {
  out.clear();
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return TypeError(path, "a map of served name to routing settings", n);
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar() || it->first.Scalar().empty()) {
      return Status::InvalidArgument(path + ": pool names must be non-empty strings, got " + Describe(it->first));
    }
    const std::string& name = it->first.Scalar();
    const std::string pool_path = Child(path, name);
    for (const auto& [existing, patch] : out) {
      if (existing == name) return Status::InvalidArgument(pool_path + ": set more than once");
    }
    if (!it->second.IsMap() && !it->second.IsNull()) {
      return TypeError(pool_path, "a map of routing settings", it->second);
    }
    RoutingPatch patch;
    if (Status s = ReadRouting(it->second, pool_path, patch, /*pool=*/true); !s.ok()) return s;
    out.emplace_back(name, patch);
  }
  return Status::Ok();
}

// `clients: {keys_file, keys: [{tenant, key_env | key_file}]}`; present = keys required.
Status ReadClients(const YAML::Node& n, const std::string& path, GatewayConfig& config) {
  ClientsConfig& out = config.clients;
  out.enabled = true;
  return ForEachField(
      n, path, {"keys_file", "keys"}, [&](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
        if (key == "keys_file") return ReadField(*FindConfigField(p), v, p, config);
        out.keys.clear();
        if (v.IsNull()) return Status::Ok();
        if (!v.IsSequence()) return TypeError(p, "a list of {tenant, key_env | key_file}", v);
        for (size_t i = 0; i < v.size(); ++i) {
          const std::string item = Index(p, i);
          if (!v[i].IsMap()) return TypeError(item, "a map with tenant and key_env or key_file", v[i]);
          ClientKeySource source;
          Status s = ForEachField(v[i], item, {"tenant", "key_env", "key_file"},
                                  [&source](const std::string& k, const YAML::Node& x, const std::string& xp) {
                                    if (k == "tenant") return ReadString(x, xp, source.tenant);
                                    if (k == "key_env") return ReadString(x, xp, source.key_env);
                                    return ReadString(x, xp, source.key_file);
                                  });
          if (!s.ok()) return s;
          out.keys.push_back(std::move(source));
        }
        return Status::Ok();
      });
}

// The fields a `rate_limits` section or one of its `tenants` sets; tenants apply theirs over the
// final defaults, like pools over `routing`.
struct TenantLimitsPatch {
  std::optional<uint64_t> requests_per_minute;
  std::optional<uint64_t> request_burst;
  std::optional<uint64_t> tokens_per_minute;
  std::optional<uint64_t> token_burst;

  void ApplyTo(TenantLimits& l) const {
    if (requests_per_minute) l.requests_per_minute = *requests_per_minute;
    if (request_burst) l.request_burst = *request_burst;
    if (tokens_per_minute) l.tokens_per_minute = *tokens_per_minute;
    if (token_burst) l.token_burst = *token_burst;
  }
};

Status ReadLimitField(const std::string& key, const YAML::Node& v, const std::string& p, TenantLimitsPatch& out) {
  uint64_t value = 0;
  if (Status s = ReadUnsigned(v, p, value); !s.ok()) return s;
  (key == "requests_per_minute" ? out.requests_per_minute
   : key == "request_burst"     ? out.request_burst
   : key == "tokens_per_minute" ? out.tokens_per_minute
                                : out.token_burst) = value;
  return Status::Ok();
}

// A `rate_limits` section's tenants; its own limits are read straight into the configuration.
struct RateLimitsPatch {
  bool tenants_set = false;
  std::vector<std::pair<std::string, TenantLimitsPatch>> tenants;
};

Status ReadRateLimits(const YAML::Node& n, const std::string& path, GatewayConfig& config, RateLimitsPatch& out) {
  return ForEachField(
      n, path, {"requests_per_minute", "request_burst", "tokens_per_minute", "token_burst", "max_tenants", "tenants"},
      [&](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
        if (key != "tenants") return ReadField(*FindConfigField(p), v, p, config);
        out.tenants_set = true;
        out.tenants.clear();
        if (v.IsNull()) return Status::Ok();
        if (!v.IsMap()) return TypeError(p, "a map of tenant name to limits", v);
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (!it->first.IsScalar() || it->first.Scalar().empty()) {
            return Status::InvalidArgument(p + ": tenant names must be non-empty strings, got " + Describe(it->first));
          }
          const std::string& name = it->first.Scalar();
          const std::string tenant_path = Child(p, name);
          for (const auto& [existing, patch] : out.tenants) {
            if (existing == name) return Status::InvalidArgument(tenant_path + ": set more than once");
          }
          if (!it->second.IsMap() && !it->second.IsNull()) {
            return TypeError(tenant_path, "a map of limits", it->second);
          }
          TenantLimitsPatch patch;
          Status s = ForEachField(it->second, tenant_path,
                                  {"requests_per_minute", "request_burst", "tokens_per_minute", "token_burst"},
                                  [&patch](const std::string& k, const YAML::Node& x, const std::string& xp) {
                                    return ReadLimitField(k, x, xp, patch);
                                  });
          if (!s.ok()) return s;
          out.tenants.emplace_back(name, patch);
        }
        return Status::Ok();
      });
}

Status ReadDocument(const YAML::Node& root, GatewayConfig& config) {
  if (!root.IsMap() && !root.IsNull()) {
    return Status::InvalidArgument("config: the top level must be a map of fields, got " + Describe(root));
  }
  RoutingPatch routing;
  bool pools_set = false;
  std::vector<std::pair<std::string, RoutingPatch>> pools;
  RateLimitsPatch rate_limits;
  std::optional<YAML::Node> managed;  // the managed service's RoutingConfig block
  Status s = ForEachField(root, "",
                          {"listen",
                           "io_threads",
                           "decision_headers",
                           "routing",
                           "pools",
                           "instances",
                           "limits",
                           "timeouts",
                           "retries",
                           "health",
                           "log",
                           "admin",
                           "epp",
                           "unknown_path_status",
                           "clients",
                           "rate_limits",
                           "discovery",
                           "engine_metrics",
                           "tls",
                           "upstream_tls",
                           "metrics",
                           "RoutingConfig"},
                          [&](const std::string& key, const YAML::Node& v, const std::string& p) -> Status {
                            if (key == "RoutingConfig") {  // read once `routing` is known
                              managed.emplace(v);
                              return Status::Ok();
                            }
                            if (key == "clients") return ReadClients(v, p, config);
                            if (key == "rate_limits") return ReadRateLimits(v, p, config, rate_limits);
                            if (key == "routing") return ReadRouting(v, p, routing);
                            if (key == "pools") {
                              pools_set = true;
                              return ReadPools(v, p, pools);
                            }
                            if (key == "instances") return ReadInstances(v, p, config.instances);
                            if (key == "discovery") return ReadDiscovery(v, p, config);
                            if (const ConfigField* field = FindConfigField(key); field != nullptr && field->scalar()) {
                              return ReadField(*field, v, p, config);  // listen, io_threads, ...
                            }
                            // The sections that turn a feature on by being present (even when empty: then the
                            // missing fields are named by the validation).
                            if (key == "admin") config.admin.enabled = true;
                            if (key == "engine_metrics") config.engine_metrics.enabled = true;
                            if (key == "tls") config.tls.enabled = true;
                            return ReadSection(v, p, config);  // limits, timeouts, retries, health, log, ...
                          });
  if (!s.ok()) return s;
  if (managed) {
    if (Status m = ReadManagedRouting(*managed, "RoutingConfig", routing, "routing", routing); !m.ok()) return m;
  }

  routing.ApplyTo(config.routing);
  if (pools_set) {  // a `pools` section replaces the base's pools
    config.pools.clear();
    for (const auto& [name, patch] : pools) {
      RoutingOptions options = config.routing;
      patch.ApplyTo(options);
      config.pools[name] = options;
    }
  }
  // Overrides inherit from the defaults as patched here (like pools from `routing`); a `tenants`
  // section replaces the base's overrides.
  RateLimitsConfig& rl = config.rate_limits;
  if (rate_limits.tenants_set) {
    rl.tenants.clear();
    for (const auto& [name, patch] : rate_limits.tenants) {
      TenantLimits limits = rl.defaults;
      patch.ApplyTo(limits);
      rl.tenants[name] = limits;
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Validation helpers.

std::string FormatNumber(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

Status OutOfRange(const std::string& path, const std::string& value, const std::string& range) {
  return Status::InvalidArgument(path + ": " + value + " is outside the allowed range " + range);
}

Status CheckCount(const std::string& path, uint64_t v, uint64_t lo, uint64_t hi, const std::string& note = "") {
  if (v >= lo && v <= hi) return Status::Ok();
  return OutOfRange(path, std::to_string(v), std::to_string(lo) + ".." + std::to_string(hi) + note);
}

// (0, hi] seconds; written so that NaN fails.
Status CheckPositiveSeconds(const std::string& path, double v, double hi) {
  if (v > 0 && v <= hi) return Status::Ok();
  return OutOfRange(path, FormatNumber(v), "(0, " + FormatNumber(hi) + "]");
}

// [lo, hi] seconds; written so that NaN fails.
Status CheckSecondsRange(const std::string& path, double v, double lo, double hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return OutOfRange(path, FormatNumber(v), "[" + FormatNumber(lo) + ", " + FormatNumber(hi) + "]");
}

// a.b.c.d with decimal parts: an address, not a name to resolve.
bool IsIPv4Literal(std::string_view s) {
  int dots = 0;
  for (char c : s) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

// [0, hi] seconds, where 0 has a meaning of its own (`note`).
Status CheckSecondsOrZero(const std::string& path, double v, double hi, const std::string& note) {
  if (v >= 0 && v <= hi) return Status::Ok();
  return OutOfRange(path, FormatNumber(v), "[0, " + FormatNumber(hi) + "]" + note);
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// IPv4 addresses and DNS names (letters, digits, '-', '.', '_' for container names).
bool IsHostName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_';
  });
}

// The inside of [...]: hex digits, ':' and '.' (IPv4-mapped tails), then an optional
// "%zone" (fe80::1%eth0).
bool IsIPv6(std::string_view s) {
  const size_t percent = s.find('%');
  const std::string_view address = s.substr(0, percent);
  const std::string_view zone = percent == std::string_view::npos ? std::string_view("z") : s.substr(percent + 1);
  return address.find(':') != std::string_view::npos &&
         std::all_of(address.begin(), address.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; }) &&
         IsHostName(zone);
}

struct HostPort {
  std::string host;  // without brackets for IPv6
  std::optional<uint64_t> port;
  bool ipv6 = false;
};

// host[:port], [ipv6][:port]. Returns nullopt when the form is wrong; the port's range is the
// caller's (listen allows 0, instances do not).
std::optional<HostPort> SplitHostPort(std::string_view s) {
  HostPort out;
  std::string_view rest;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view inside = s.substr(1, close - 1);
    if (!IsIPv6(inside)) return std::nullopt;
    out.host = std::string(inside);
    out.ipv6 = true;
    rest = s.substr(close + 1);
  } else {
    const size_t colon = s.find(':');
    const std::string_view host = s.substr(0, colon);
    if (!IsHostName(host)) return std::nullopt;
    out.host = std::string(host);
    rest = colon == std::string_view::npos ? std::string_view() : s.substr(colon);
  }
  if (rest.empty()) return out;
  if (rest.front() != ':') return std::nullopt;
  rest.remove_prefix(1);
  if (!IsDigits(rest) || rest.size() > 10) return std::nullopt;
  uint64_t port = 0;
  std::from_chars(rest.data(), rest.data() + rest.size(), port);
  out.port = port;
  return out;
}

std::string JoinHostPort(const std::string& host, uint16_t port, bool ipv6) {
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), s.begin(), [](char p, char c) {
           return std::tolower(static_cast<unsigned char>(c)) == p;
         });
}

// Names travel in response headers (x-prefix-router-instance): visible ASCII only.
bool IsHeaderSafe(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

Status ValidateEpp(EppConfig& epp) {
  epp.listen_host.clear();
  epp.listen_port = 0;
  if (epp.listen.empty()) return Status::Ok();
  const std::optional<HostPort> hp = SplitHostPort(epp.listen);
  if (!hp || !hp->port) {
    return Status::InvalidArgument("epp.listen: '" + epp.listen + "' is not host:port (e.g. 0.0.0.0:9002)");
  }
  if (*hp->port > 65535) {
    return OutOfRange("epp.listen", "port " + std::to_string(*hp->port), "0..65535 (0 = any free port)");
  }
  epp.listen_host = hp->host;
  epp.listen_port = static_cast<uint16_t>(*hp->port);
  return Status::Ok();
}

Status ValidateListen(GatewayConfig& config) {
  if (config.listen.empty() && !config.epp.listen.empty()) {  // the endpoint picker alone
    config.listen_host.clear();
    config.listen_port = 0;
    return Status::Ok();
  }
  const std::optional<HostPort> hp = SplitHostPort(config.listen);
  if (!hp || !hp->port) {
    return Status::InvalidArgument("listen: '" + config.listen +
                                   "' is not host:port (an IPv4 address, a host name or [IPv6], e.g. 127.0.0.1:8080)");
  }
  if (*hp->port > 65535) {
    return OutOfRange("listen", "port " + std::to_string(*hp->port), "0..65535 (0 = any free port)");
  }
  config.listen_host = hp->host;
  config.listen_port = static_cast<uint16_t>(*hp->port);
  return Status::Ok();
}

// 127.0.0.0/8, ::1 and "localhost". Anything else, including names that may resolve to
// loopback, counts as reachable from elsewhere.
bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1") return true;
  if (!host.starts_with("127.")) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

// The token's content: a file's (trailing whitespace trimmed: files usually end in a newline)
// or an environment variable's. Messages name the file or variable, never the content.
Status LoadAdminToken(AdminConfig& admin) {
  std::string value;
  if (!admin.token_file.empty()) {
    const std::string field = "admin.token_file: '" + admin.token_file + "'";
    std::FILE* f = std::fopen(admin.token_file.c_str(), "rb");
    if (f == nullptr) {
      return Status::InvalidArgument(field + ": cannot open: " + std::strerror(errno));
    }
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && value.size() <= 4096) value.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) return Status::InvalidArgument(field + ": cannot read");
    if (value.size() > 4096) return Status::InvalidArgument(field + ": longer than 4096 bytes");
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    if (value.empty()) return Status::InvalidArgument(field + ": the file is empty");
  } else if (!admin.token_env.empty()) {
    const char* env = std::getenv(admin.token_env.c_str());
    if (env == nullptr || *env == '\0') {
      return Status::InvalidArgument("admin.token_env: the environment variable " + admin.token_env +
                                     " is not set or empty");
    }
    value = env;
  }
  // Sent in a header: visible ASCII only (a stray control character would never match).
  if (!IsHeaderSafe(value)) {
    return Status::InvalidArgument(std::string(admin.token_file.empty() ? "admin.token_env" : "admin.token_file") +
                                   ": the token must be visible ASCII without spaces");
  }
  admin.token = Secret(std::move(value));
  return Status::Ok();
}

// An instance's credential: the whole Authorization header value, from a file (trailing
// whitespace trimmed) or an environment variable. Messages name the field, the file or the
// variable, never the content.
Status LoadInstanceAuthorization(InstanceConfig& instance, const std::string& path) {
  if (!instance.authorization_file.empty() && !instance.authorization_env.empty()) {
    return Status::InvalidArgument(path + ": set authorization_file or authorization_env, not both");
  }
  std::string value;
  std::string field;
  if (!instance.authorization_file.empty()) {
    field = path + ".authorization_file";
    const std::string where = field + ": '" + instance.authorization_file + "'";
    std::FILE* f = std::fopen(instance.authorization_file.c_str(), "rb");
    if (f == nullptr) return Status::InvalidArgument(where + ": cannot open: " + std::strerror(errno));
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && value.size() <= 8192) value.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) return Status::InvalidArgument(where + ": cannot read");
    if (value.size() > 8192) return Status::InvalidArgument(where + ": longer than 8192 bytes");
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    if (value.empty()) return Status::InvalidArgument(where + ": the file is empty");
  } else if (!instance.authorization_env.empty()) {
    field = path + ".authorization_env";
    const char* env = std::getenv(instance.authorization_env.c_str());
    if (env == nullptr || *env == '\0') {
      return Status::InvalidArgument(field + ": the environment variable " + instance.authorization_env +
                                     " is not set or empty");
    }
    value = env;
    if (value.size() > 8192) return Status::InvalidArgument(field + ": longer than 8192 bytes");
  } else {
    instance.authorization = Secret();
    return Status::Ok();
  }
  // A header value ("Bearer abc"): visible ASCII and inner spaces; no control characters, which
  // could split the header.
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) {
      return Status::InvalidArgument(field + ": the value must be printable ASCII (a header value)");
    }
  }
  instance.authorization = Secret(std::move(value));
  return Status::Ok();
}

Status ValidateListenerTls(const ListenerTlsConfig& tls) {
  if (!tls.enabled) return Status::Ok();
  if (tls.cert_file.empty()) return Status::InvalidArgument("tls.cert_file: is required (a PEM certificate chain)");
  if (tls.key_file.empty()) return Status::InvalidArgument("tls.key_file: is required (a PEM private key)");
  // Loaded now, so that a missing file or a key of another certificate stops the start (and
  // --check-config), not the first client.
  auto ctx = http::MakeServerTlsContext(tls.cert_file, tls.key_file, "tls");
  return ctx.ok() ? Status::Ok() : ctx.status();
}

Status ValidateAdmin(AdminConfig& admin) {
  if (!admin.enabled) return Status::Ok();
  const std::optional<HostPort> hp = SplitHostPort(admin.listen);
  if (!hp || !hp->port) {
    return Status::InvalidArgument("admin.listen: '" + admin.listen + "' is not host:port (e.g. 127.0.0.1:9090)");
  }
  if (*hp->port > 65535) {
    return OutOfRange("admin.listen", "port " + std::to_string(*hp->port), "0..65535 (0 = any free port)");
  }
  if (!admin.token_file.empty() && !admin.token_env.empty()) {
    return Status::InvalidArgument("admin: set token_file or token_env, not both");
  }
  if (Status s = LoadAdminToken(admin); !s.ok()) return s;
  if (!admin.token.empty() && admin.token.size() < kMinRemoteAdminTokenBytes && !IsLoopbackHost(hp->host)) {
    return Status::InvalidArgument("admin.listen: '" + admin.listen +
                                   "' is not a loopback address, and the admin token is shorter than " +
                                   std::to_string(kMinRemoteAdminTokenBytes) +
                                   " characters; use a long random token there (e.g. openssl rand -hex 32)");
  }
  if (admin.token.empty() && !IsLoopbackHost(hp->host)) {
    return Status::InvalidArgument(
        "admin.listen: '" + admin.listen +
        "' is not a loopback address; an admin listener reachable from other hosts needs a token "
        "(admin.token_file or admin.token_env)");
  }
  admin.listen_host = hp->host;
  admin.listen_port = static_cast<uint16_t>(*hp->port);
  return Status::Ok();
}

// ----------------------------------------------------------------------------- client keys

constexpr size_t kMinClientKeyBytes = 8;
constexpr size_t kMaxClientKeyBytes = 4096;
constexpr size_t kMaxClientKeys = 100'000;
constexpr size_t kMaxKeysFileBytes = 16u << 20;
constexpr size_t kMaxTenantNameBytes = 128;

// Tenant names appear in logs, error messages and rate_limits.tenants: a short, plain alphabet.
bool IsTenantName(std::string_view s) {
  return !s.empty() && s.size() <= kMaxTenantNameBytes && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-' || c == ':' || c == '@';
  });
}

Status CheckTenantName(const std::string& field, const std::string& name) {
  if (IsTenantName(name)) return Status::Ok();
  return Status::InvalidArgument(field + ": '" + name + "' is not a tenant name (1..128 of A-Z a-z 0-9 . _ - : @)");
}

// Messages say where the key came from and what is wrong with it, never what it is.
Status CheckClientKey(const std::string& where, std::string_view key) {
  if (key.size() < kMinClientKeyBytes || key.size() > kMaxClientKeyBytes) {
    return Status::InvalidArgument(where + ": a key must be " + std::to_string(kMinClientKeyBytes) + ".." +
                                   std::to_string(kMaxClientKeyBytes) + " bytes long (got " +
                                   std::to_string(key.size()) + ")");
  }
  if (!IsHeaderSafe(key)) {
    return Status::InvalidArgument(where + ": a key must be visible ASCII without spaces");
  }
  return Status::Ok();
}

// A whole small file (at most `max_bytes`); `field` names it in messages.
Status ReadWholeFile(const std::string& field, const std::string& file, size_t max_bytes, std::string& out) {
  out.clear();
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) return Status::InvalidArgument(field + ": '" + file + "': cannot open: " + std::strerror(errno));
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && out.size() <= max_bytes) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::InvalidArgument(field + ": '" + file + "': cannot read");
  if (out.size() > max_bytes) {
    return Status::InvalidArgument(field + ": '" + file + "': longer than " + std::to_string(max_bytes) + " bytes");
  }
  return Status::Ok();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A key given alone is named by a fingerprint, stable across restarts and file edits.
std::string FingerprintTenant(const Secret& key) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(key.Hash(0) >> 32));
  return std::string("key-") + buf;
}

// keys_file: one key a line, "TENANT KEY" or "KEY"; blank lines and # comments skipped.
Status LoadKeysFile(const std::string& file, ClientKeySet& set) {
  std::string text;
  if (Status s = ReadWholeFile("clients.keys_file", file, kMaxKeysFileBytes, text); !s.ok()) return s;
  std::string_view rest = text;
  for (size_t line_no = 1; !rest.empty(); ++line_no) {
    const size_t eol = rest.find('\n');
    const std::string_view line = Trim(rest.substr(0, eol));
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = "clients.keys_file: '" + file + "' line " + std::to_string(line_no);
    std::vector<std::string_view> words;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      const size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      if (i > start) words.push_back(line.substr(start, i - start));
    }
    if (words.size() > 2) return Status::InvalidArgument(where + ": expected 'TENANT KEY' or 'KEY'");
    const std::string_view key = words.back();
    if (Status s = CheckClientKey(where, key); !s.ok()) return s;
    Secret secret{std::string(key)};
    std::string tenant = words.size() == 2 ? std::string(words[0]) : FingerprintTenant(secret);
    if (Status s = CheckTenantName(where, tenant); !s.ok()) return s;
    if (Status s = set.Add(std::move(tenant), std::move(secret), where); !s.ok()) return s;
    if (set.size() > kMaxClientKeys) {
      return Status::InvalidArgument("clients: more than " + std::to_string(kMaxClientKeys) + " keys");
    }
  }
  return Status::Ok();
}

Status LoadKeySource(const ClientKeySource& source, const std::string& path, ClientKeySet& set) {
  if (Status s = CheckTenantName(path + ".tenant", source.tenant); !s.ok()) {
    return source.tenant.empty() ? Status::InvalidArgument(path + ".tenant: is required") : s;
  }
  if (source.key_env.empty() == source.key_file.empty()) {
    return Status::InvalidArgument(path + ": set exactly one of key_env and key_file");
  }
  std::string value;
  std::string where;
  if (!source.key_env.empty()) {
    where = path + ".key_env: " + source.key_env;
    const char* env = std::getenv(source.key_env.c_str());
    if (env == nullptr || *env == '\0') {
      return Status::InvalidArgument(path + ".key_env: the environment variable " + source.key_env +
                                     " is not set or empty");
    }
    value = env;
  } else {
    where = path + ".key_file: '" + source.key_file + "'";
    if (Status s = ReadWholeFile(path + ".key_file", source.key_file, kMaxClientKeyBytes + 64, value); !s.ok()) {
      return s;
    }
    value = std::string(Trim(value));
  }
  if (Status s = CheckClientKey(where, value); !s.ok()) return s;
  return set.Add(source.tenant, Secret(std::move(value)), where);
}

Status ValidateClients(ClientsConfig& clients) {
  clients.key_set = nullptr;
  if (!clients.enabled) return Status::Ok();
  auto set = std::make_shared<ClientKeySet>();
  if (!clients.keys_file.empty()) {
    if (Status s = LoadKeysFile(clients.keys_file, *set); !s.ok()) return s;
  }
  for (size_t i = 0; i < clients.keys.size(); ++i) {
    if (Status s = LoadKeySource(clients.keys[i], Index("clients.keys", i), *set); !s.ok()) return s;
  }
  if (set->size() == 0) {
    return Status::InvalidArgument(
        "clients: no keys (set keys_file and/or keys; remove the section to serve without keys)");
  }
  if (set->size() > kMaxClientKeys) {
    return Status::InvalidArgument("clients: more than " + std::to_string(kMaxClientKeys) + " keys");
  }
  clients.key_set = std::move(set);
  return Status::Ok();
}

Status ValidateTenantLimits(const TenantLimits& l, const std::string& path) {
  struct Bound {
    const char* field;
    uint64_t value;
    uint64_t max;
    const char* note;
  };
  for (const Bound& b : {Bound{"requests_per_minute", l.requests_per_minute, kMaxRequestsPerMinute, " (0 = no limit)"},
                         Bound{"request_burst", l.request_burst, kMaxRequestsPerMinute, " (0 = requests_per_minute)"},
                         Bound{"tokens_per_minute", l.tokens_per_minute, kMaxTokensPerMinute, " (0 = no limit)"},
                         Bound{"token_burst", l.token_burst, kMaxTokensPerMinute, " (0 = tokens_per_minute)"}}) {
    if (Status s = CheckCount(Child(path, b.field), b.value, 0, b.max, b.note); !s.ok()) return s;
  }
  return Status::Ok();
}

// With client keys on, a tenant is a key's: an override for any other name can never apply
// (a typo, or a key that was removed).
Status ValidateRateLimits(const RateLimitsConfig& rl, const ClientsConfig& clients) {
  if (Status s = ValidateTenantLimits(rl.defaults, "rate_limits"); !s.ok()) return s;
  if (Status s = CheckCount("rate_limits.max_tenants", rl.max_tenants, kMinTenants, kMaxTenants); !s.ok()) return s;
  for (const auto& [name, limits] : rl.tenants) {
    const std::string path = Child("rate_limits.tenants", name);
    if (clients.key_set) {
      if (Status s = CheckTenantName("rate_limits.tenants", name); !s.ok()) return s;
      if (!clients.key_set->HasTenant(name)) {
        return Status::InvalidArgument(path + ": no client key has tenant '" + name +
                                       "' (with clients on, tenants are the keys' tenants)");
      }
    } else if (name.size() > api::kMaxPromptCacheKeyBytes) {
      return Status::InvalidArgument("rate_limits.tenants: a tenant name is longer than " +
                                     std::to_string(api::kMaxPromptCacheKeyBytes) +
                                     " bytes (routing groups are at most that long)");
    }
    if (Status s = ValidateTenantLimits(limits, path); !s.ok()) return s;
  }
  return Status::Ok();
}

// Two listeners that would bind the same port on overlapping addresses (the same host, or either
// a wildcard: 0.0.0.0 and :: take every address); port 0 (any free port) never clashes. Names are
// compared as written, except that localhost counts as the loopback addresses.
bool ListenersClash(const std::string& host_a, uint16_t port_a, const std::string& host_b, uint16_t port_b) {
  if (port_a == 0 || port_a != port_b) return false;
  auto wildcard = [](const std::string& h) { return h.empty() || h == "0.0.0.0" || h == "::"; };
  auto canonical = [](const std::string& h) -> std::string { return h == "localhost" ? "127.0.0.1" : h; };
  return wildcard(host_a) || wildcard(host_b) || canonical(host_a) == canonical(host_b);
}

// http(s)://host[:port][/path] -> host, port, base_path, https.
Status ParseInstanceUrl(InstanceConfig& instance, const std::string& path, bool& ipv6) {
  const std::string form = "' is not http(s)://host[:port][/path]";
  const std::string& url = instance.url;
  // Quoted redacted: a URL with user information carries a password, which must not reach the
  // terminal, the journal or a reload's answer.
  const std::string shown = api::RedactUrl(url);
  if (url.empty()) return Status::InvalidArgument(path + ": is required (http(s)://host[:port][/path])");
  const bool https = StartsWithNoCase(url, "https://");
  if (!https && !StartsWithNoCase(url, "http://")) return Status::InvalidArgument(path + ": '" + shown + form);
  std::string_view rest = std::string_view(url).substr(https ? 8 : 7);
  if (rest.find_first_of("?#") != std::string_view::npos || !IsHeaderSafe(rest)) {
    return Status::InvalidArgument(path + ": '" + shown + form + " (no query, fragment, spaces or control characters)");
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string_view base = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument(path + ": '" + shown +
                                   "' carries credentials (user information): not allowed in a URL; "
                                   "give the credential with `authorization_file` or `authorization_env` instead");
  }
  const std::optional<HostPort> hp = SplitHostPort(authority);
  if (!hp) return Status::InvalidArgument(path + ": '" + shown + form);
  const uint64_t port = hp->port.value_or(https ? 443 : 80);
  if (port < 1 || port > 65535) return OutOfRange(path, "port " + std::to_string(port), "1..65535");
  while (!base.empty() && base.back() == '/') base.remove_suffix(1);
  instance.host = hp->host;
  instance.port = static_cast<uint16_t>(port);
  instance.base_path = std::string(base);
  instance.https = https;
  ipv6 = hp->ipv6;
  return Status::Ok();
}

// A ZMQ endpoint the gateway connects to: tcp://host:port (no wildcard: it names the engine),
// ipc://path or inproc://name, visible ASCII.
Status CheckKvEndpoint(const std::string& field, const std::string& e) {
  auto bad = [&](std::string_view why) { return Status::InvalidArgument(field + ": '" + e + "' " + std::string(why)); };
  if (e.size() > 1024 || !IsHeaderSafe(e)) return bad("must be visible ASCII, at most 1024 bytes");
  if (e.starts_with("ipc://") || e.starts_with("inproc://")) {
    if (e == "ipc://" || e == "inproc://") return bad("needs a name");
    return Status::Ok();
  }
  if (!e.starts_with("tcp://")) return bad("must be tcp://host:port, ipc://path or inproc://name");
  const std::string hostport = e.substr(6);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("must be tcp://host:port");
  const std::string port = hostport.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port) < 1 || std::stoul(port) > 65535) {
    return bad("needs a port in 1..65535");
  }
  if (hostport.find('*') != std::string::npos) {
    return bad("names the engine to connect to: no wildcard (the engine binds tcp://*:port)");
  }
  return Status::Ok();
}

Status ValidateKvEvents(const KvEventsConfig& k, const std::string& path) {
  if (k.endpoint.empty()) {
    if (!k.replay_endpoint.empty() || !k.topic.empty()) {
      return Status::InvalidArgument(path + ".endpoint: required with topic or replay_endpoint");
    }
    return Status::Ok();
  }
  if (Status s = CheckKvEndpoint(path + ".endpoint", k.endpoint); !s.ok()) return s;
  if (k.topic.size() > 1024) return Status::InvalidArgument(path + ".topic: at most 1024 bytes");
  if (!k.replay_endpoint.empty()) {
    if (Status s = CheckKvEndpoint(path + ".replay_endpoint", k.replay_endpoint); !s.ok()) return s;
  }
  return Status::Ok();
}

Status ValidateInstances(GatewayConfig& config) {
  if (config.instances.empty() && !config.discovery.kubernetes.enabled) {
    return Status::InvalidArgument("instances: at least one instance is required (or discovery.kubernetes)");
  }
  for (size_t i = 0; i < config.instances.size(); ++i) {
    InstanceConfig& instance = config.instances[i];
    const std::string path = Index("instances", i);
    bool ipv6 = false;
    if (Status s = ParseInstanceUrl(instance, path + ".url", ipv6); !s.ok()) return s;
    if (instance.name.empty()) instance.name = JoinHostPort(instance.host, instance.port, ipv6);
    if (!IsHeaderSafe(instance.name)) {
      return Status::InvalidArgument(path + ".name: '" + instance.name +
                                     "' must be visible ASCII without spaces (it is sent in "
                                     "response headers)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (config.instances[j].name == instance.name) {
        return Status::InvalidArgument(path + ".name: '" + instance.name + "' is also the name of instances[" +
                                       std::to_string(j) + "]; instance names must be unique");
      }
    }
    if (Status s = CheckCount(path + ".weight", instance.weight, 1, kMaxInstanceWeight); !s.ok()) {
      return s;
    }
    instance.tls = config.upstream_tls;
    if (instance.tls_ca_file) instance.tls.ca_file = *instance.tls_ca_file;
    if (instance.tls_verify) instance.tls.verify = *instance.tls_verify;
    if (instance.https && instance.tls_ca_file) {
      // The global CA file is checked once (ValidateUpstreamTls); an instance's own here.
      auto ctx = http::MakeClientTlsContext(instance.tls.ca_file, instance.tls.verify, path + ".upstream_tls");
      if (!ctx.ok()) return ctx.status();
    } else if (!instance.https && (instance.tls_ca_file || instance.tls_verify)) {
      return Status::InvalidArgument(path + ".upstream_tls: applies to an https:// url only");
    }
    if (Status s = LoadInstanceAuthorization(instance, path); !s.ok()) return s;
    if (Status s = ValidateKvEvents(instance.kv_events, path + ".kv_events"); !s.ok()) return s;
    for (size_t m = 0; m < instance.models.size(); ++m) {
      if (Status s = CheckServedName(instance.models[m]); !s.ok()) {
        return Status(s.code(), Index(path + ".models", m) + ": " + s.message());
      }
    }
    if (instance.models.size() > kMaxServedNames) {
      return CheckCount(path + ".models", instance.models.size(), 0, kMaxServedNames, " names");
    }
    if (instance.resolve == ResolveMode::kAll) {
      if (ipv6 || IsIPv4Literal(instance.host)) {
        return Status::InvalidArgument(path + ".resolve: 'all' needs a DNS name in url, not the address '" +
                                       instance.host + "'");
      }
    }
  }
  // Derived instances are named NAME@ADDRESS:PORT: beside them, a configured name with '@'
  // could collide with one.
  const bool derives = config.discovery.kubernetes.enabled ||
                       std::any_of(config.instances.begin(), config.instances.end(),
                                   [](const InstanceConfig& in) { return in.resolve == ResolveMode::kAll; });
  for (size_t i = 0; derives && i < config.instances.size(); ++i) {
    if (config.instances[i].name.find('@') != std::string::npos) {
      return Status::InvalidArgument(Index("instances", i) + ".name: '" + config.instances[i].name +
                                     "' must not contain '@' when an instance has resolve: all "
                                     "or discovery.kubernetes is on (their instances are named "
                                     "NAME@ADDRESS:PORT, NAME@POD)");
    }
  }
  return Status::Ok();
}

Status ValidateDiscovery(const DiscoveryConfig& d) {
  if (Status s = CheckSecondsRange("discovery.models_interval", d.models_interval, 1, 86400); !s.ok()) {
    return s;
  }
  if (Status s = CheckSecondsRange("discovery.resolve_interval", d.resolve_interval, 1, 86400); !s.ok()) {
    return s;
  }
  if (!d.hosts_file.empty()) {
    std::FILE* f = std::fopen(d.hosts_file.c_str(), "rb");
    if (f == nullptr) {
      return Status::InvalidArgument("discovery.hosts_file: '" + d.hosts_file +
                                     "' cannot be opened: " + std::strerror(errno));
    }
    std::fclose(f);
  }
  return Status::Ok();
}

Status ValidateKubernetes(GatewayConfig& config) {
  KubernetesDiscoveryConfig& k = config.discovery.kubernetes;
  const std::string path = "discovery.kubernetes";
  if (Status s = CheckCount(path + ".target_port", k.target_port, 0, 65535, " (0 = unset)"); !s.ok()) return s;
  if (!k.enabled) return Status::Ok();
  if (k.inference_pool.empty()) {
    if (k.selector.empty() || k.target_port == 0) {
      return Status::InvalidArgument(path + ": give inference_pool, or selector and target_port (1..65535)");
    }
  } else if (!k.selector.empty() || k.target_port != 0) {
    return Status::InvalidArgument(path + ": inference_pool gives the selector and the port; do not set selector or "
                                          "target_port beside it");
  }
  for (const auto& [label, value] : k.selector) {
    if (label.empty() || !IsHeaderSafe(label) || !IsHeaderSafe(value) ||
        label.find_first_of(",=!()") != std::string::npos || value.find_first_of(",=!()") != std::string::npos) {
      return Status::InvalidArgument(path + ".selector: '" + label + "': labels and values are plain words "
                                                                     "(no spaces, commas, '=', '!' or parentheses)");
    }
  }
  InstanceConfig api;
  api.url = k.api_server;
  std::string api_path = path + ".api_server";
  if (api.url.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || *host == '\0') {
      return Status::InvalidArgument(api_path +
                                     ": not set, and KUBERNETES_SERVICE_HOST is not either (not in a pod?): give "
                                     "the API server's url");
    }
    const bool v6 = std::string_view(host).find(':') != std::string_view::npos;
    api.url = std::string("https://") + (v6 ? "[" : "") + host + (v6 ? "]" : "") + ":" +
              (port != nullptr && *port != '\0' ? port : "443");
    api_path += " (from KUBERNETES_SERVICE_HOST/_PORT)";
  }
  bool ipv6 = false;
  if (Status s = ParseInstanceUrl(api, api_path, ipv6); !s.ok()) return s;
  if (!api.base_path.empty()) return Status::InvalidArgument(api_path + ": the API server's url takes no path");
  k.api_host = api.host;
  k.api_port = api.port;
  k.api_https = api.https;
  if (k.api_https) {
    auto ctx = http::MakeClientTlsContext(k.ca_file, true, path + ".ca_file");
    if (!ctx.ok()) return ctx.status();
  }
  if (!k.namespace_name.empty()) {
    k.resolved_namespace = k.namespace_name;
  } else if (k.resolved_namespace.empty()) {
    const std::string file = std::string(kServiceAccountDir) + "/namespace";
    std::FILE* f = std::fopen(file.c_str(), "rb");
    char buf[256];
    const size_t n = f ? std::fread(buf, 1, sizeof(buf), f) : 0;
    if (f) std::fclose(f);
    std::string ns(buf, n);
    while (!ns.empty() && std::isspace(static_cast<unsigned char>(ns.back()))) ns.pop_back();
    if (ns.empty()) {
      return Status::InvalidArgument(path + ".namespace: not set, and " + file + " cannot be read (not in a pod?)");
    }
    k.resolved_namespace = ns;
  }
  const bool dns_label = !k.resolved_namespace.empty() && k.resolved_namespace.size() <= 63 &&
                         std::all_of(k.resolved_namespace.begin(), k.resolved_namespace.end(),
                                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
  if (!dns_label) {
    return Status::InvalidArgument(path + ".namespace: '" + k.resolved_namespace + "' is not a namespace name");
  }
  InstanceConfig& t = k.instance;
  const std::string tpath = path + ".instance";
  if (t.name.empty()) t.name = k.inference_pool.empty() ? "kubernetes" : k.inference_pool;
  if (!IsHeaderSafe(t.name) || t.name.find('@') != std::string::npos) {
    return Status::InvalidArgument(tpath + ".name: '" + t.name + "' must be visible ASCII without spaces or '@'");
  }
  for (const InstanceConfig& other : config.instances) {
    if (other.name == t.name) {
      return Status::InvalidArgument(tpath + ".name: '" + t.name + "' is also a configured instance's name");
    }
  }
  if (Status s = CheckCount(tpath + ".weight", t.weight, 1, kMaxInstanceWeight); !s.ok()) return s;
  for (size_t m = 0; m < t.models.size(); ++m) {
    if (Status s = CheckServedName(t.models[m]); !s.ok()) {
      return Status(s.code(), Index(tpath + ".models", m) + ": " + s.message());
    }
  }
  return LoadInstanceAuthorization(t, tpath);
}

Status ValidateEngineMetrics(const EngineMetricsConfig& m) {
  if (Status s = CheckSecondsRange("engine_metrics.interval", m.interval, 0.05, 3600); !s.ok()) return s;
  if (m.path.empty() || m.path.front() != '/' || m.path.find_first_of(" \t\r\n?#") != std::string::npos) {
    return Status::InvalidArgument("engine_metrics.path: '" + m.path +
                                   "' must be an absolute path without spaces, query or fragment");
  }
  return Status::Ok();
}

// One pool's routing settings (`path` is "routing" or "pools.NAME"). The balance factor is a
// fractional number, which the core's message would print as "0.500000"; it is checked here
// first so that its message reads like every other range error. The rest is the core's.
Status ValidateRouting(const RoutingOptions& options, const std::string& path) {
  const double f = options.balance_factor;
  if (f != 0 && !(f >= kMinBalanceFactor && f <= kMaxBalanceFactor)) {  // NaN fails too
    return OutOfRange(Child(path, "balance_factor"), FormatNumber(f),
                      FormatNumber(kMinBalanceFactor) + ".." + FormatNumber(kMaxBalanceFactor) + " (or 0 = off)");
  }
  if (Status s = options.Validate(); !s.ok()) return Status(s.code(), path + "." + s.message());
  if (auto n = api::KeyNormaliser::Create(options.key_normalisation); !n.ok()) {
    return Status(n.status().code(), path + ".key_normalisation." + n.status().message());
  }
  return Status::Ok();
}

Status ValidatePools(const GatewayConfig& config) {
  // Not a structured binding: clang before 16 cannot capture one in the lambda below.
  for (const auto& pool : config.pools) {
    const std::string& name = pool.first;
    const RoutingOptions& options = pool.second;
    const std::string path = Child("pools", name);
    if (name.empty()) return Status::InvalidArgument("pools: pool names must not be empty");
    if (!base::IsValidUtf8(name)) return Status::InvalidArgument("pools: pool names must be valid UTF-8");
    if (Status s = ValidateRouting(options, path); !s.ok()) return s;
    const auto serves = [&name](const InstanceConfig& in) {
      return in.models.empty() || std::find(in.models.begin(), in.models.end(), name) != in.models.end();
    };
    const bool served = std::any_of(config.instances.begin(), config.instances.end(), serves) ||
                        (config.discovery.kubernetes.enabled && serves(config.discovery.kubernetes.instance));
    if (!served) return Status::InvalidArgument(path + ": no instance serves '" + name + "'");
  }
  return Status::Ok();
}

Status ValidateTimeouts(const TimeoutsConfig& t) {
  struct Bound {
    const char* field;
    double value;
    double max;
  };
  for (const Bound& b : {Bound{"connect", t.connect, 600}, Bound{"first_byte", t.first_byte, 3600},
                         Bound{"idle", t.idle, 3600}, Bound{"client_read", t.client_read, 3600},
                         Bound{"client_write", t.client_write, 3600}, Bound{"client_idle", t.client_idle, 3600},
                         Bound{"kv_events_silence", t.kv_events_silence, 86400}, Bound{"tokenize", t.tokenize, 600}}) {
    if (Status s = CheckPositiveSeconds(Child("timeouts", b.field), b.value, b.max); !s.ok()) {
      return s;
    }
  }
  if (Status s = CheckSecondsOrZero("timeouts.total", t.total, 86400, " (0 = no limit)"); !s.ok()) {
    return s;
  }
  if (Status s = CheckSecondsOrZero("timeouts.per_try_first_byte", t.per_try_first_byte, 3600, " (0 = off)"); !s.ok()) {
    return s;
  }
  return CheckSecondsOrZero("timeouts.drain", t.drain, 3600, "");
}

Status ValidateHealth(const HealthConfig& h) {
  if (h.path.empty() || h.path.front() != '/' || !IsHeaderSafe(h.path)) {
    return Status::InvalidArgument("health.path: '" + h.path + "' must start with '/' (and contain no spaces)");
  }
  if (Status s = CheckSecondsOrZero("health.interval", h.interval, 3600, " (0 disables checks)"); !s.ok()) {
    return s;
  }
  if (Status s = CheckPositiveSeconds("health.timeout", h.timeout, 600); !s.ok()) return s;
  if (Status s = CheckCount("health.unhealthy_threshold", h.unhealthy_threshold, 1, 100); !s.ok()) {
    return s;
  }
  if (Status s = CheckCount("health.healthy_threshold", h.healthy_threshold, 1, 100); !s.ok()) {
    return s;
  }
  return CheckCount("health.passive_failures", h.passive_failures, 0, 100, " (0 = off)");
}

}  // namespace

bool Secret::Matches(std::string_view candidate) const {
  // Every byte of the candidate is compared (against the secret's bytes, cycled), so the time
  // depends on the candidate's length only, not on how much of it is right.
  unsigned diff = candidate.size() != value_.size() || value_.empty();
  for (size_t i = 0; i < candidate.size(); ++i) {
    const char expected = value_.empty() ? '\0' : value_[i % value_.size()];
    diff |= static_cast<unsigned char>(candidate[i] ^ expected);
  }
  return diff == 0;
}

uint64_t Secret::Hash(uint64_t seed) const { return XXH3_64bits_withSeed(value_.data(), value_.size(), seed); }

ClientKeySet::ClientKeySet() : seed_((uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {}

Status ClientKeySet::Add(std::string tenant, Secret key, std::string origin) {
  const uint64_t h = key.Hash(seed_);
  auto [begin, end] = index_.equal_range(h);
  for (auto it = begin; it != end; ++it) {
    if (entries_[it->second].key.SameAs(key)) {
      return Status::InvalidArgument(origin + ": the same key as " + entries_[it->second].origin +
                                     "; every key must be unique");
    }
  }
  index_.emplace(h, entries_.size());
  entries_.push_back(Entry{std::move(tenant), std::move(key), std::move(origin)});
  return Status::Ok();
}

const std::string* ClientKeySet::Find(std::string_view candidate) const {
  auto [begin, end] = index_.equal_range(XXH3_64bits_withSeed(candidate.data(), candidate.size(), seed_));
  for (auto it = begin; it != end; ++it) {
    if (entries_[it->second].key.Matches(candidate)) return &entries_[it->second].tenant;
  }
  return nullptr;
}

size_t ClientKeySet::tenant_count() const {
  std::vector<std::string_view> names;
  for (const auto& e : entries_) names.push_back(e.tenant);
  std::sort(names.begin(), names.end());
  return static_cast<size_t>(std::unique(names.begin(), names.end()) - names.begin());
}

bool ClientKeySet::HasTenant(std::string_view tenant) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.tenant == tenant; });
}

bool ClientKeySet::SameAs(const ClientKeySet& other) const {
  if (entries_.size() != other.entries_.size()) return false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].tenant != other.entries_[i].tenant || !entries_[i].key.SameAs(other.entries_[i].key)) {
      return false;
    }
  }
  return true;
}

bool RateLimitsConfig::enabled() const {
  return defaults.any() || std::any_of(tenants.begin(), tenants.end(), [](const auto& t) { return t.second.any(); });
}

const TenantLimits& RateLimitsConfig::For(std::string_view tenant) const {
  auto it = tenants.find(tenant);
  return it == tenants.end() ? defaults : it->second;
}

Status CheckServedName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("must not be empty");
  if (name.size() > kMaxServedNameBytes) {
    return Status::InvalidArgument("longer than " + std::to_string(kMaxServedNameBytes) + " bytes");
  }
  // Served names are compared with a request's `model` (always valid UTF-8: the request parser
  // checks it) and listed in /v1/models JSON, so invalid bytes could never match and would break
  // that JSON. yaml-cpp passes a file's invalid UTF-8 bytes through unchecked.
  if (!base::IsValidUtf8(name)) return Status::InvalidArgument("must be valid UTF-8");
  return Status::Ok();
}

Result<ResolveMode> ParseResolveMode(std::string_view name) {
  if (name == "none") return ResolveMode::kNone;
  if (name == "all") return ResolveMode::kAll;
  return Status::InvalidArgument("resolve: '" + std::string(name) + "' is not one of none, all");
}

Result<MetricsListener> ParseMetricsListener(std::string_view name) {
  if (name == "client") return MetricsListener::kClient;
  if (name == "admin") return MetricsListener::kAdmin;
  return Status::InvalidArgument("'" + std::string(name) + "' is not one of client, admin");
}

Result<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return Status::InvalidArgument("log.format: '" + std::string(name) + "' is not one of text, json");
}

std::string_view LogFormatName(LogFormat format) { return format == LogFormat::kJson ? "json" : "text"; }

const RoutingOptions& GatewayConfig::RoutingFor(std::string_view served_name) const {
  auto it = pools.find(served_name);  // transparent: no temporary string
  return it == pools.end() ? routing : it->second;
}

Result<GatewayConfig> ParseConfigYaml(const std::string& yaml_text, GatewayConfig base) {
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (Status s = ReadDocument(root, base); !s.ok()) return s;
    return base;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("invalid YAML: " + std::string(e.what()));
  } catch (const std::exception& e) {
    return Status::Internal("config: " + std::string(e.what()));
  }
}

Result<GatewayConfig> LoadConfigFile(const std::string& path, GatewayConfig base) {
  // Configuration files are small; the cap keeps a wrong path (a device, a log) from being read
  // whole into memory.
  constexpr size_t kMaxConfigBytes = 16u << 20;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = path + ": cannot open the configuration file: " + std::strerror(err);
    return err == ENOENT ? Status::NotFound(msg) : Status::InvalidArgument(msg);
  }
  std::string text;
  char buf[8192];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() <= kMaxConfigBytes) {
    text.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) {
    return Status::InvalidArgument(path + ": cannot read the configuration file: " + std::strerror(err));
  }
  if (text.size() > kMaxConfigBytes) {
    return Status::InvalidArgument(path + ": larger than 16 MiB; not a configuration file?");
  }
  Result<GatewayConfig> r = ParseConfigYaml(text, std::move(base));
  if (!r.ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

Status ValidateConfig(GatewayConfig& config) {
  if (Status s = ValidateEpp(config.epp); !s.ok()) return s;
  if (Status s = ValidateListen(config); !s.ok()) return s;
  if (Status s = CheckCount("io_threads", config.io_threads, 0, 256, " (0 = one per core)"); !s.ok()) {
    return s;
  }
  if (Status s = ValidateAdmin(config.admin); !s.ok()) return s;
  if (Status s = ValidateClients(config.clients); !s.ok()) return s;
  if (Status s = ValidateRateLimits(config.rate_limits, config.clients); !s.ok()) return s;
  if (Status s = ValidateListenerTls(config.tls); !s.ok()) return s;
  if (!config.upstream_tls.ca_file.empty()) {
    auto ctx = http::MakeClientTlsContext(config.upstream_tls.ca_file, config.upstream_tls.verify);
    if (!ctx.ok()) return ctx.status();
  }
  if (std::find(std::begin(kUnknownPathStatuses), std::end(kUnknownPathStatuses), config.unknown_path_status) ==
      std::end(kUnknownPathStatuses)) {
    return Status::InvalidArgument("unknown_path_status: " + std::to_string(config.unknown_path_status) +
                                   " is not one of 403, 404, 410, 421, 501");
  }
  if (Status s = ValidateRouting(config.routing, "routing"); !s.ok()) return s;
  if (Status s = ValidateInstances(config); !s.ok()) return s;
  if (Status s = ValidatePools(config); !s.ok()) return s;
  if (Status s = CheckCount("limits.max_request_body_bytes", config.max_request_body_bytes, 1u << 10, 1u << 30,
                            " (1 KiB..1 GiB)");
      !s.ok()) {
    return s;
  }
  if (Status s = CheckCount("limits.max_header_bytes", config.max_header_bytes, 1u << 10, 1u << 20, " (1 KiB..1 MiB)");
      !s.ok()) {
    return s;
  }
  if (config.max_connections != kAutoMaxConnections) {
    if (Status s =
            CheckCount("limits.max_connections", config.max_connections, 0, 1'000'000, " or auto (0 = no limit)");
        !s.ok()) {
      return s;
    }
  }
  if (Status s = CheckCount("limits.max_connections_per_client", config.max_connections_per_client, 0, 1'000'000,
                            " (0 = no limit)");
      !s.ok()) {
    return s;
  }
  if (config.admin.enabled &&
      ListenersClash(config.listen_host, config.listen_port, config.admin.listen_host, config.admin.listen_port)) {
    return Status::InvalidArgument("admin.listen: '" + config.admin.listen + "' is the address of listen ('" +
                                   config.listen + "'): the admin listener needs a port of its own");
  }
  if (!config.epp.listen.empty() && !config.listen.empty() && config.epp.listen_port != 0 &&
      ListenersClash(config.listen_host, config.listen_port, config.epp.listen_host, config.epp.listen_port)) {
    return Status::InvalidArgument("epp.listen: '" + config.epp.listen + "' is the address of listen ('" +
                                   config.listen + "'): the endpoint picker needs a port of its own");
  }
  if (config.admin.enabled && !config.epp.listen.empty() && config.epp.listen_port != 0 &&
      ListenersClash(config.admin.listen_host, config.admin.listen_port, config.epp.listen_host,
                     config.epp.listen_port)) {
    return Status::InvalidArgument("epp.listen: '" + config.epp.listen + "' is the address of admin.listen ('" +
                                   config.admin.listen + "'): the endpoint picker needs a port of its own");
  }
  if (config.metrics.listener == MetricsListener::kAdmin && !config.admin.enabled) {
    return Status::InvalidArgument("metrics.listener: admin needs an `admin` section (the admin listener)");
  }
  if (config.metrics.require_key && !config.clients.enabled) {
    return Status::InvalidArgument("metrics.require_key: true needs a `clients` section (client API keys)");
  }
  if (Status s = ValidateTimeouts(config.timeouts); !s.ok()) return s;
  if (Status s = CheckCount("retries.max_retries", config.max_retries, 0, 10); !s.ok()) return s;
  if (Status s = ValidateDiscovery(config.discovery); !s.ok()) return s;
  if (Status s = ValidateKubernetes(config); !s.ok()) return s;
  if (Status s = ValidateEngineMetrics(config.engine_metrics); !s.ok()) return s;
  return ValidateHealth(config.health);
}

std::vector<std::string> ConfigWarnings(const GatewayConfig& config) {
  std::vector<std::string> out;
  const bool any_stream = std::any_of(config.instances.begin(), config.instances.end(),
                                      [](const InstanceConfig& i) { return !i.kv_events.endpoint.empty(); });
  if (any_stream) return out;
  auto check = [&](const std::string& field, const RoutingOptions& r) {
    if (!UsesKvEvents(r.strategy)) return;
    out.push_back(field + ": " + std::string(StrategyName(r.strategy)) +
                  " learns from the engines' KV event streams, and no instance has kv_events: " +
                  (r.strategy == Strategy::kKvAware
                       ? "it routes on the gateway's own view of the caches (as cache-aware)"
                       : "it sees no cached block and routes on load alone") +
                  " until one has");
  };
  check("routing.routing_strategy", config.routing);
  for (const auto& [name, r] : config.pools) check("pools." + name + ".routing_strategy", r);
  return out;
}

}  // namespace prefix_router::gateway
