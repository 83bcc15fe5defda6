// Text helpers shared by the results writers and the report (internal to the report library):
// UTF-8 repair, JSON and HTML escaping, and the number formats used on screen.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace prefix_router::report {

// Appends `s` to `out` with every byte sequence that is not well-formed UTF-8 (RFC 3629: no
// overlong forms, surrogates or code points above U+10FFFF) replaced by U+FFFD, so that what we
// write is always valid JSON and HTML text.
void AppendValidUtf8(std::string& out, std::string_view s);

// `s` as a JSON string literal, quotes included.
void AppendJsonString(std::string& out, std::string_view s);

// `s` escaped for HTML text and attribute values (& < > " ').
std::string HtmlEscape(std::string_view s);

// The shortest text that reads back as exactly `v` ("0.1", "2048", "1e-07"); "null" when `v` is
// not finite (JSON has no NaN or infinity).
std::string JsonNumber(double v);

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
