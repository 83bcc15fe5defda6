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

// Flag values are read by the schema's strict readers, not CLI11's converters (which accept octal
// and hex, and wrap "-1" around for 64-bit unsigned targets): a flag reads like the YAML field it
// sets. --instance's weight reads the same way (base-10 digits only).

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

// "Sets <field>: <what>. Default: <default>. Range: <range>."
std::string Help(const std::string& field, const std::string& what, const std::string& default_value,
                 const std::string& range) {
  return "Sets " + field + ": " + what + ". Default: " + default_value + ". Range: " + range + ".";
}

std::string Help(const ConfigField& f) {
  const std::string d = DefaultOf(f);
  return Help(f.path, f.help, d.empty() ? "\"\"" : d, f.range);
}

// The value placeholder of a field's flag in --help.
std::string TypeName(const ConfigField& f) {
  switch (f.kind) {
    case FieldKind::kSeconds: return "SECONDS";
    case FieldKind::kNumber: return "F";
    case FieldKind::kBoolean: return "true|false";
    case FieldKind::kName: return "NAME";
    case FieldKind::kInteger:
      if (f.path == "limits.max_connections") return "N|auto";
      return f.path.ends_with("_bytes") ? "BYTES" : "N";
    default:
      if (f.key().ends_with("listen")) return "HOST:PORT";
      return f.key().ends_with("path") ? "PATH" : "TEXT";
  }
}

// Reads `value` once with the field's schema (so that a malformed value fails the parse, named
// by `origin`: the flag, or "--set PATH") and records it.
void Record(ConfigFlags& flags, const ConfigField& f, const std::string& value, const std::string& origin) {
  GatewayConfig scratch;
  if (Status s = f.set(scratch, value, origin); !s.ok()) throw CLI::ConversionError(s.message());
  flags.values.emplace_back(&f, value);
}

// ---------------------------------------------------------------------------------------------
// BuildConfig helpers.

// The file's pools were resolved against the file's `routing`. A routing flag changes that
// final `routing`, so each pool field the file leaves unset takes the flag's value, exactly as
// if the flag were written in the file's `routing` section. Which fields a pool sets is only in
// the YAML, so it is read again (it parsed a moment ago; this is startup, not a hot path).
using Values = std::vector<std::pair<const ConfigField*, std::string>>;

// Whether the routing section `section` (a map: `routing` or a pool) sets `rel`
// ("cache_aware.block_bytes"), under our name or in its RoutingConfig block (for a pool's, the
// managed service's names).
bool SectionSets(const YAML::Node& section, std::string_view rel) {
  // (A missing key of a const node is an invalid node: test it before asking its type.)
  if (!section || !section.IsMap()) return false;
  if (const YAML::Node managed = section["RoutingConfig"]; managed && managed.IsMap()) {
    if (rel == "routing_strategy" && managed["RoutingStrategy"]) return true;
    const YAML::Node inner = managed["PrefixAwareRoutingConfig"];
    if (rel == "prefix_length" && inner && inner.IsMap() && inner["PrefixLength"]) return true;
    if (rel == "concurrency_threshold" && inner && inner.IsMap() && inner["ConcurrencyThreshold"]) return true;
  }
  YAML::Node n = YAML::Clone(section);
  for (size_t start = 0;;) {
    const size_t dot = rel.find('.', start);
    const std::string key(rel.substr(start, dot - start));
    if (!n.IsMap() || !n[key]) return false;
    n = n[key];
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

Result<YAML::Node> ReadAgain(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Status::InvalidArgument(file + ": cannot read the configuration file again");
  try {
    return YAML::Load(text.str());
  } catch (const std::exception& e) {
    return Status::InvalidArgument(file + ": " + e.what());
  }
}

Status InheritRoutingFlags(const ConfigFlags& flags, const Values& values, GatewayConfig& config) {
  const bool any = !flags.exclude_fields.empty() || !flags.exclude_patterns.empty() ||
                   std::any_of(values.begin(), values.end(), [](const auto& v) { return v.first->routing(); });
  if (config.pools.empty() || !any) return Status::Ok();
  Result<YAML::Node> root = ReadAgain(flags.config_file);
  if (!root.ok()) return root.status();
  const YAML::Node pools = (*root)["pools"];
  for (auto& [name, options] : config.pools) {
    const YAML::Node pool = pools && pools.IsMap() ? pools[name] : YAML::Node();
    for (const auto& [field, value] : values) {
      if (!field->routing() || SectionSets(pool, field->rel)) continue;
      (void)field->set_routing(options, value, field->path);  // read once already
    }
    KeyNormalisation& k = options.key_normalisation;
    if (!flags.exclude_fields.empty() && !SectionSets(pool, "key_normalisation.exclude_fields")) {
      k.exclude_fields = flags.exclude_fields;
    }
    if (!flags.exclude_patterns.empty() && !SectionSets(pool, "key_normalisation.exclude_patterns")) {
      k.exclude_patterns = flags.exclude_patterns;
    }
  }
  return Status::Ok();
}

}  // namespace

void AddConfigFlags(CLI::App& cmd, ConfigFlags& flags) {
  cmd.add_option("--config", flags.config_file,
                 "YAML configuration file (docs/configuration.md lists every field, examples/router.yaml shows "
                 "them); flags given with it override its fields. Default: none (built-in defaults and flags "
                 "only).")
      ->type_name("FILE");
  for (const ConfigField& f : ConfigSchema()) {
    if (!f.scalar() || f.flag.empty()) continue;
    if (f.path == "log.access_log") {  // a switch, not a valued flag
      cmd.add_flag_function(
          "--access-log,!--no-access-log",
          [&flags, &f](int64_t count) { Record(flags, f, count > 0 ? "true" : "false", "--access-log"); },
          Help(f.path, f.help, DefaultOf(f), "--access-log (true) | --no-access-log (false)"));
      continue;
    }
    cmd.add_option_function<std::string>(
           f.flag, [&flags, &f](const std::string& value) { Record(flags, f, value, f.flag); }, Help(f))
        ->type_name(TypeName(f));
  }
  cmd.add_option_function<std::vector<std::string>>(
         "--set",
         [&flags](const std::vector<std::string>& assignments) {
           for (const std::string& a : assignments) {
             const size_t eq = a.find('=');
             const std::string path = a.substr(0, eq);
             if (eq == std::string::npos || path.empty()) {
               throw CLI::ConversionError("--set " + Quote(a) + ": expected PATH=VALUE (--set timeouts.tokenize=0.5)");
             }
             const ConfigField* f = FindConfigField(path);
             if (f == nullptr) {
               throw CLI::ConversionError("--set " + Quote(a) + ": no field " + Quote(path) +
                                          " (docs/configuration.md lists them)");
             }
             if (!f->scalar()) {
               throw CLI::ConversionError("--set " + Quote(a) + ": " + path + " is a " +
                                          std::string(FieldKindName(f->kind)) + ", set in the YAML file only");
             }
             Record(flags, *f, a.substr(eq + 1), "--set " + path);
           }
         },
         "Sets any scalar field of the configuration by its YAML path (repeatable): --set "
         "timeouts.tokenize=0.5 --set routing.cache_aware.load_weight=0.2. docs/configuration.md lists the "
         "fields, their defaults and ranges; lists and maps (instances, pools, clients, rate_limits.tenants) "
         "are YAML only. A field given by its flag and by --set is an error. Default: none. Range: the scalar "
         "fields of docs/configuration.md.")
      ->type_name("PATH=VALUE");

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
                 "models = discovered from its /v1/models. Range: weight 1.." +
                     std::to_string(kMaxInstanceWeight) + ".")
      ->type_name("SPEC")
      ->allow_extra_args(false);
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
    const std::string_view value = aeq == std::string_view::npos ? std::string_view() : attr.substr(aeq + 1);
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
  for (size_t i = 0; i < flags.values.size(); ++i) {
    const ConfigField* f = flags.values[i].first;
    for (size_t j = 0; j < i; ++j) {
      if (flags.values[j].first == f) {
        return Status::InvalidArgument(f->path + ": given twice on the command line (by " +
                                       (f->flag.empty() ? std::string("--set") : f->flag + " or --set") + ")");
      }
    }
  }
  // A preset first, so that a field also given contradicts it in validation whatever the order
  // of the flags; with a preset and no strategy (flag or file), the preset's default strategy,
  // as if given by a flag (pools that set none inherit it too).
  Values values = flags.values;
  std::stable_partition(values.begin(), values.end(),
                        [](const auto& v) { return v.first->path == "routing.compatibility"; });
  const auto given = [&values](std::string_view path) {
    return std::any_of(values.begin(), values.end(), [path](const auto& v) { return v.first->path == path; });
  };
  if (given("routing.compatibility") && !given("routing.routing_strategy")) {
    bool file_sets = false;
    if (!flags.config_file.empty()) {
      Result<YAML::Node> root = ReadAgain(flags.config_file);
      if (!root.ok()) return root.status();
      file_sets = SectionSets((*root)["routing"], "routing_strategy") || (*root)["RoutingConfig"];
    }
    RoutingOptions preset;
    (void)values.front().first->set_routing(preset, values.front().second, "");
    if (!file_sets && preset.compatibility == Compatibility::kSageMaker) {
      values.insert(values.begin() + 1,
                    {FindConfigField("routing.routing_strategy"), std::string(StrategyName(Strategy::kRandom))});
    }
  }

  GatewayConfig config;
  if (!flags.config_file.empty()) {
    Result<GatewayConfig> loaded = LoadConfigFile(flags.config_file);
    if (!loaded.ok()) return loaded.status();
    config = std::move(loaded).value();
    if (Status s = InheritRoutingFlags(flags, values, config); !s.ok()) return s;
  }
  for (const auto& [f, text] : values) {
    if (Status s = f->set(config, text, f->path); !s.ok()) return s;
  }
  if (!flags.exclude_fields.empty()) config.routing.key_normalisation.exclude_fields = flags.exclude_fields;
  if (!flags.exclude_patterns.empty()) config.routing.key_normalisation.exclude_patterns = flags.exclude_patterns;

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
