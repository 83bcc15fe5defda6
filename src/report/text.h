// Text helpers shared by the results writers and the report (internal to the report library):
// HTML escaping and the number formats used on screen (JSON text and UTF-8 repair: base/).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace prefix_router::report {

// `s` escaped for HTML text and attribute values (& < > " ').
std::string HtmlEscape(std::string_view s);

// Human formats. Seconds: "0.412 s" (three decimals), "12.3 s" from 10 s, "0.42 ms" below 1 ms.
std::string FormatSeconds(double s);
// A fraction as a percentage with one decimal: 0.931 -> "93.1%".
std::string FormatPercent(double fraction);
// A hit rate as FormatPercent; "n/a" when not known (NaN: no response carried a cached-token
// count, RunResult::hit_rate), which must not read as 0%.
std::string FormatHitRate(double fraction);
// A signed relative change with one decimal: -0.828 -> "-82.8%", 0.136 -> "+13.6%".
std::string FormatChange(double change);
// A setting or extra value: integers without decimals, otherwise up to six significant digits.
std::string FormatValue(double v);

}  // namespace prefix_router::report
