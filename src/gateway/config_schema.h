// The configuration's schema: one table of every field of the gateway's YAML file, from which
// the reader's scalar fields, the `serve` flags and their --help, `--set PATH=VALUE`, the
// reload's applied/restart_required verdict and docs/configuration.md all come.
//
//   const ConfigField* f = FindConfigField("timeouts.connect");
//   Status s = f->set(config, "2.5", f->path);   // strict: "2.5s" or "-1" is an error
//   std::string now = f->get(config);            // "2.5"
//
// Scalars (numbers, booleans, strings, names from a fixed list) have `set` and `get`. Lists and
// maps (instances, pools, clients.keys, rate_limits.tenants, ...) are in the table for the
// reference and the examples check, and are read by config.cc's own code: they stay YAML-only.
// Fields of `routing` are also fields of each `pools.NAME` (`set_routing`), which inherit the
// final `routing` value of every field they do not set.
//
// Ranges are enforced by ValidateConfig; the table's `range` says the same in words and `bad` is
// a value outside it, which config_schema_test sets through --set to check that they agree.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/policy.h"
#include "core/status.h"
#include "gateway/config.h"

namespace prefix_router::gateway {

enum class FieldKind { kInteger, kSeconds, kNumber, kBoolean, kString, kName, kList, kMap };

// "integer", "seconds", ...: the reference's type column.
std::string_view FieldKindName(FieldKind kind);

struct ConfigField {
  std::string path;  // YAML path: "timeouts.connect"; items of a list: "instances[].url"
  FieldKind kind = FieldKind::kString;
  std::string range;        // allowed values, in words ("(0, 600]", "true | false")
  std::string flag;         // the named flag ("--connect-timeout"); empty: --set only (or YAML only)
  std::string help;         // what it does, one or more sentences without the final period
  bool reloadable = false;  // SIGHUP and POST /admin/reload apply it; else a change needs a restart
  std::string example;      // a valid value other than the default (documentation and tests)
  std::string bad;          // a value of the right type outside `range` (empty: none exists)

  // Scalars only (null for lists and maps). `set` reads `text` strictly into the field; its
  // errors start with `error_path` (the YAML path, or "pools.NAME.x" for a pool).
  std::function<Status(GatewayConfig&, std::string_view text, const std::string& error_path)> set;
  // The value as text, as `set` reads it ("absent" for an unset optional).
  std::function<std::string(const GatewayConfig&)> get;
  // Fields of `routing` only: the same on one pool's options. `rel` is the path under routing.
  std::string rel;
  std::function<Status(RoutingOptions&, std::string_view text, const std::string& error_path)> set_routing;
  std::function<std::string(const RoutingOptions&)> get_routing;

  bool scalar() const { return static_cast<bool>(set); }
  bool routing() const { return static_cast<bool>(set_routing); }
  // The section it belongs to: "timeouts" for "timeouts.connect", "" at the top level.
  std::string_view section() const;
  std::string_view key() const;  // "connect"
};

// Every field, in the reference's order (the order of examples/router.yaml).
const std::vector<ConfigField>& ConfigSchema();

// The field at `path` ("timeouts.connect"), or null.
const ConfigField* FindConfigField(std::string_view path);

// The routing field at `rel` ("prefix_length", "cache_aware.block_bytes"), or null.
const ConfigField* FindRoutingField(std::string_view rel);

// The field's default, as text (from a default-constructed GatewayConfig).
std::string DefaultOf(const ConfigField& field);

// docs/configuration.md: every field with type, default, range, flag, reload and help.
std::string ConfigReferenceMarkdown();

}  // namespace prefix_router::gateway
