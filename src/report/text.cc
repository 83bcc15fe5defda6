#include "report/text.h"

#include <cmath>

#include <fmt/format.h>

namespace prefix_router::report {
namespace {

bool Continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the well-formed UTF-8 sequence at s[i], or 0 if there is none.
size_t SequenceLength(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (at(1) < lo || at(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (!Continuation(at(k))) return 0;
  }
  return n;
}

}  // namespace

void AppendValidUtf8(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
}

void AppendJsonString(std::string& out, std::string_view s) {
  std::string valid;
  AppendValidUtf8(valid, s);
  out += '"';
  for (char ch : valid) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string HtmlEscape(std::string_view s) {
  std::string valid;
  AppendValidUtf8(valid, s);
  std::string out;
  out.reserve(valid.size());
  for (char ch : valid) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters other than tab and newline are not allowed in HTML text.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n') {
          out += ' ';
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{}", v);
}

std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (std::fabs(s) < 0.001 && s != 0) return fmt::format("{:.2f} ms", s * 1000);
  if (std::fabs(s) >= 10) return fmt::format("{:.1f} s", s);
  return fmt::format("{:.3f} s", s);
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  return fmt::format("{:.1f}%", fraction * 100);
}

std::string FormatHitRate(double fraction) {
  if (std::isnan(fraction)) return "n/a";
  return FormatPercent(fraction);
}

std::string FormatChange(double change) {
  if (!std::isfinite(change)) return "";
  const double pct = change * 100;
  // "-0.0%" would read as a change; a change that rounds to zero is shown as +0.0%.
  if (std::fabs(pct) < 0.05) return "+0.0%";
  return fmt::format("{:+.1f}%", pct);
}

std::string FormatValue(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf");
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{:.6g}", v);
}

}  // namespace prefix_router::report
