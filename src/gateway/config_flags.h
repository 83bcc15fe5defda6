// Command-line flags of `prefix-router serve`: the short form without a file, and overrides of a
// file's fields.
//
//   prefix-router serve --listen 127.0.0.1:8080 --instance http://127.0.0.1:8001
//       --instance b=http://127.0.0.1:8002 --strategy prefix-aware --prefix-length 1024
//       --concurrency-threshold 8
//
// Precedence: built-in defaults < the --config file < flags. Each flag sets one field of
// GatewayConfig (its help text names the YAML field, the default and the range); --strategy,
// --prefix-length, --concurrency-threshold, --spill-mode, --balance-factor, --max-in-flight,
// --canonical-json, --exclude-field and --exclude-pattern set the default
// `routing`, and pools
// of the file that do not set a field inherit the flag's value, as if the flag were written in
// the file's `routing` section. --instance flags, when any are given, replace the file's
// instances.
//
// Flags convert their values strictly (base-10 integers, no negative values for counts, finite
// seconds and factors) while parsing; ranges are checked afterwards by ValidateConfig, so a range error
// reads the same whether the value came from the file or a flag.
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

namespace prefix_router::gateway {

// What the flags said; an empty optional means the flag was not given.
struct ConfigFlags {
  std::string config_file;                 // --config
  std::optional<std::string> listen;       // --listen
  std::optional<uint32_t> io_threads;      // --io-threads
  std::optional<bool> decision_headers;    // --decision-headers
  std::optional<uint32_t> unknown_path_status;  // --unknown-path-status
  // The default pool (`routing`).
  std::optional<Strategy> strategy;                 // --strategy
  std::optional<uint32_t> prefix_length;            // --prefix-length
  std::optional<uint32_t> concurrency_threshold;    // --concurrency-threshold
  std::optional<SpillMode> spill_mode;              // --spill-mode
  std::optional<LoadMeasure> load_measure;          // --load-measure
  std::optional<TokenizerSource> tokenizer;         // --tokenizer
  std::optional<double> balance_factor;             // --balance-factor
  std::optional<uint32_t> max_in_flight;            // --max-in-flight
  // routing.key_normalisation
  std::optional<bool> canonical_json;               // --canonical-json
  std::vector<std::string> exclude_fields;          // --exclude-field, repeatable
  std::vector<std::string> exclude_patterns;        // --exclude-pattern, repeatable
  // --instance, repeatable: URL | NAME=URL | NAME=URL;weight=N;models=a,b
  std::vector<std::string> instances;
  std::optional<uint64_t> max_request_body_bytes;   // --max-request-body-bytes
  std::optional<uint32_t> max_header_bytes;         // --max-header-bytes
  std::optional<uint32_t> max_connections;          // --max-connections (auto: kAutoMaxConnections)
  std::optional<uint32_t> max_connections_per_client;  // --max-connections-per-client
  std::optional<double> connect_timeout;            // --connect-timeout
  std::optional<double> first_byte_timeout;         // --first-byte-timeout
  std::optional<double> idle_timeout;               // --idle-timeout
  std::optional<double> total_timeout;              // --total-timeout
  std::optional<double> client_read_timeout;        // --client-read-timeout
  std::optional<double> client_write_timeout;       // --client-write-timeout
  std::optional<double> client_idle_timeout;        // --client-idle-timeout
  std::optional<double> drain_timeout;              // --drain-timeout
  std::optional<double> per_try_first_byte_timeout; // --per-try-timeout
  std::optional<uint32_t> max_retries;              // --max-retries
  std::optional<std::string> health_path;           // --health-path
  std::optional<double> health_interval;            // --health-interval
  std::optional<double> health_timeout;             // --health-timeout
  std::optional<uint32_t> unhealthy_threshold;      // --unhealthy-threshold
  std::optional<uint32_t> healthy_threshold;        // --healthy-threshold
  std::optional<uint32_t> passive_failures;         // --passive-failures
  std::optional<LogFormat> log_format;              // --log-format
  std::optional<bool> access_log;                   // --access-log / --no-access-log
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
