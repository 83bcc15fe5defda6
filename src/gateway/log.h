// Logging of `prefix-router serve`: spdlog's default logger, as text lines or as JSON lines.
//
// Plain spdlog calls (`spdlog::info("...")`) stay as they are everywhere. In JSON mode
// (log.format: json, --log-format json) a formatter turns each into one object per line,
// {"ts":"2026-01-02T03:04:05.678Z","level":"info","msg":"..."}. Events with fields (health
// changes, failed requests, access log lines) go through LogEvent: in text mode the fields
// follow the message as ` key=value` (a value with spaces, quotes, '=' or control characters is
// quoted and escaped, so that a client's bytes cannot forge a line); in JSON mode they are
// members of the object, after ts, level and msg.
//
// Secrets never reach these functions: the admin token lives in a Secret (gateway/config.h),
// which has no accessor, and request logging records the path without its query string and no
// header at all (a client's Authorization header is forwarded upstream, never logged).
//
// Thread-safety: LogEvent may be called from any thread. The fields reach the JSON formatter
// through a thread-local pointer for the duration of the spdlog call, which is why the default
// logger must stay synchronous (spdlog formats on the calling thread; an async logger would
// not). ConfigureLogging is called once, before the I/O threads start.
#pragma once

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "gateway/config.h"

namespace prefix_router::gateway {

// One named value of a log event. Views: the strings must outlive the LogEvent call.
struct LogField {
  enum class Kind { kText, kInteger, kNumber };
  LogField(std::string_view k, std::string_view v) : key(k), kind(Kind::kText), text(v) {}
  LogField(std::string_view k, const std::string& v) : key(k), kind(Kind::kText), text(v) {}
  LogField(std::string_view k, const char* v) : key(k), kind(Kind::kText), text(v) {}
  LogField(std::string_view k, int64_t v) : key(k), kind(Kind::kInteger), integer(v) {}
  LogField(std::string_view k, int v) : key(k), kind(Kind::kInteger), integer(v) {}
  LogField(std::string_view k, uint32_t v) : key(k), kind(Kind::kInteger), integer(v) {}
  LogField(std::string_view k, uint64_t v) : key(k), kind(Kind::kInteger), integer(static_cast<int64_t>(v)) {}
  LogField(std::string_view k, double v) : key(k), kind(Kind::kNumber), number(v) {}

  std::string_view key;
  Kind kind;
  std::string_view text;
  int64_t integer = 0;
  double number = 0;
};

// Makes the default logger write `format` (text keeps spdlog's usual pattern).
// REQUIRES: called before other threads log.
void ConfigureLogging(LogFormat format);
LogFormat CurrentLogFormat();

// Logs `msg` with `fields` at `level` (nothing is formatted when the level is off).
void LogEvent(spdlog::level::level_enum level, std::string_view msg, std::span<const LogField> fields);
inline void LogEvent(spdlog::level::level_enum level, std::string_view msg, std::initializer_list<LogField> fields) {
  LogEvent(level, msg, std::span<const LogField>(fields.begin(), fields.size()));
}

// The pure formatting, for the formatter and the tests. `ts` is already formatted.
// One JSON object, without the newline: {"ts":...,"level":...,"msg":...,<fields>}.
std::string FormatJsonLogLine(std::string_view ts, std::string_view level, std::string_view msg,
                              std::span<const LogField> fields);
// `msg` followed by ` key=value` for each field.
std::string FormatTextLogLine(std::string_view msg, std::span<const LogField> fields);
// RFC 3339 UTC with milliseconds: 2026-01-02T03:04:05.678Z.
std::string FormatLogTimestamp(std::chrono::system_clock::time_point t);

// spdlog formatter of the JSON mode (one object and a newline per message).
class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace prefix_router::gateway
