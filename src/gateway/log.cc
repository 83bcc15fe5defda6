#include "gateway/log.h"

#include <spdlog/pattern_formatter.h>

#include <atomic>
#include <cmath>
#include <ctime>

#include "api/error.h"
#include "base/json_text.h"

namespace prefix_router::gateway {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

// The fields of the LogEvent call in progress on this thread, for JsonLogFormatter.
thread_local std::span<const LogField> t_fields;

void AppendNumber(std::string& out, const LogField& f) {
  if (f.kind == LogField::Kind::kInteger) {
    out += std::to_string(f.integer);
  } else if (!std::isfinite(f.number)) {
    out += "null";  // JSON has no NaN or infinity
  } else {
    out += fmt::format("{:.6g}", f.number);
  }
}

void AppendJsonFields(std::string& out, std::span<const LogField> fields) {
  for (const LogField& f : fields) {
    out += ",\"";
    base::AppendJsonEscaped(out, f.key);
    out += "\":";
    if (f.kind == LogField::Kind::kText) {
      out += '"';
      base::AppendJsonEscaped(out, f.text);
      out += '"';
    } else {
      AppendNumber(out, f);
    }
  }
}

// A text value needs quotes when it is empty or could be misread: spaces, quotes, '=', or
// control characters (a newline would start a forged line).
bool NeedsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

}  // namespace

std::string FormatLogTimestamp(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
}

std::string FormatJsonLogLine(std::string_view ts, std::string_view level, std::string_view msg,
                              std::span<const LogField> fields) {
  std::string out = "{\"ts\":\"";
  base::AppendJsonEscaped(out, ts);
  out += "\",\"level\":\"";
  base::AppendJsonEscaped(out, level);
  out += "\",\"msg\":\"";
  base::AppendJsonEscaped(out, msg);
  out += '"';
  AppendJsonFields(out, fields);
  out += '}';
  return out;
}

std::string FormatTextLogLine(std::string_view msg, std::span<const LogField> fields) {
  std::string out(msg);
  for (const LogField& f : fields) {
    out += ' ';
    out += f.key;
    out += '=';
    if (f.kind != LogField::Kind::kText) {
      AppendNumber(out, f);
    } else if (NeedsQuotes(f.text)) {
      out += '"';
      base::AppendJsonEscaped(out, f.text);
      out += '"';
    } else {
      out += f.text;
    }
  }
  return out;
}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  std::string line = FormatJsonLogLine(FormatLogTimestamp(msg.time), std::string_view(level.data(), level.size()),
                                       std::string_view(msg.payload.data(), msg.payload.size()), t_fields);
  line += '\n';
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const { return std::make_unique<JsonLogFormatter>(); }

void ConfigureLogging(LogFormat format) {
  g_format.store(format);
  if (format == LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonLogFormatter>());
  } else {
    spdlog::set_formatter(std::make_unique<spdlog::pattern_formatter>());  // spdlog's default
  }
}

LogFormat CurrentLogFormat() { return g_format.load(std::memory_order_relaxed); }

void LogEvent(spdlog::level::level_enum level, std::string_view msg, std::span<const LogField> fields) {
  if (!spdlog::should_log(level)) return;
  if (CurrentLogFormat() == LogFormat::kText) {
    spdlog::log(level, "{}", FormatTextLogLine(msg, fields));
    return;
  }
  // Only the JSON formatter reads the fields, on this thread, within this call.
  t_fields = fields;
  spdlog::log(level, "{}", msg);
  t_fields = {};
}

}  // namespace prefix_router::gateway
