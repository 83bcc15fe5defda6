// Command-line flags of `prefix-router serve`: the short form without a file, and overrides of a
// file's fields.
//
//   prefix-router serve --listen 127.0.0.1:8080 --instance http://127.0.0.1:8001
//       --instance b=http://127.0.0.1:8002 --strategy prefix-aware --prefix-length 1024
//       --concurrency-threshold 8
//
// Precedence: built-in defaults < the --config file < flags. The flags come from the
// configuration schema (gateway/config_schema.h): each field with a named flag has it (its help
// text names the YAML field, the default and the range), and every scalar field can be set with
// `--set PATH=VALUE` (--set timeouts.tokenize=0.5). A field given twice (by its flag and by
// --set, or by two --set) is an error. Flags that set a field of `routing` set the default
// pool, and pools of the file that do not set that field inherit the flag's value, as if the
// flag were written in the file's `routing` section. --instance flags, when any are given,
// replace the file's instances.
//
// Flags convert their values strictly while parsing (the schema's readers: base-10 integers, no
// negative values for counts, finite seconds and factors); ranges are checked afterwards by
// ValidateConfig, so a range error reads the same whether the value came from the file or a flag.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/policy.h"
#include "core/status.h"
#include "gateway/config.h"
#include "gateway/config_schema.h"

namespace prefix_router::gateway {

// What the flags said.
struct ConfigFlags {
  std::string config_file;  // --config
  // Scalar fields given by their named flag (--prefix-length 4096) or by --set PATH=VALUE, in
  // the order CLI11 reports them; each value was read once by the field's schema, strictly.
  std::vector<std::pair<const ConfigField*, std::string>> values;
  // routing.key_normalisation's lists: --exclude-field, --exclude-pattern, repeatable.
  std::vector<std::string> exclude_fields;
  std::vector<std::string> exclude_patterns;
  // --instance, repeatable: URL | NAME=URL | NAME=URL;weight=N;models=a,b
  std::vector<std::string> instances;
};

// Registers the flags on `cmd` (the `serve` subcommand); parsing fills `flags`, which must
// outlive the parse. A malformed value (not a number, an unknown strategy) fails the parse with a
// CLI::ParseError naming the flag.
void AddConfigFlags(CLI::App& cmd, ConfigFlags& flags);

// One --instance value: URL, NAME=URL, or NAME=URL;weight=N;models=a,b (models separated by
// commas). The URL is checked later, by ValidateConfig. Errors name the flag and the value.
Result<InstanceConfig> ParseInstanceFlag(std::string_view spec);

// The configuration the flags describe: the --config file if any, then the flags on top, then
// ValidateConfig. Returns the first error.
Result<GatewayConfig> BuildConfig(const ConfigFlags& flags);

}  // namespace prefix_router::gateway
