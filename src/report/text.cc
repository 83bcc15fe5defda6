#include "report/text.h"

#include <cmath>

#include <fmt/format.h>

#include "base/utf8.h"

namespace prefix_router::report {

std::string HtmlEscape(std::string_view s) {
  std::string valid;
  base::AppendValidUtf8(valid, s);
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
