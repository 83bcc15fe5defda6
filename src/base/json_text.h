// JSON text output: the project's one JSON string escaper and number formatter.
//
// Bodies with structure are built with a library serializer (Boost.JSON in the gateway's admin
// and status bodies); these functions are for the hot paths and the small fixed bodies that are
// written as text (error bodies, log lines, request bodies of tens of KB in the load generator).
// JSON text is UTF-8 (RFC 8259 section 8.1), so malformed input becomes U+FFFD (base/utf8.h)
// and the output is valid JSON whatever the bytes.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace prefix_router::base {

// What AppendJsonEscaped does with bytes that are not well-formed UTF-8.
enum class InvalidUtf8 {
  kReplace,  // each byte that starts no well-formed sequence becomes U+FFFD: the output is valid
  kKeep,     // bytes >= 0x80 are copied as they are: for a valid string escaped in pieces cut at
             // byte offsets (a character split between two calls must not become two U+FFFD)
};

// Appends `s` to `out` as the contents of a JSON string, without the quotes: '"', '\\' and
// control characters are escaped (\n \r \t \b \f, others as \u00XX; RFC 8785's choice), and
// malformed UTF-8 is treated as `invalid` says. Plain ASCII is copied in runs (SWAR/SSE2 scan).
void AppendJsonEscaped(std::string& out, std::string_view s, InvalidUtf8 invalid = InvalidUtf8::kReplace);

// Appends `s` as a JSON string literal, quotes included.
void AppendJsonString(std::string& out, std::string_view s);

// `s` as a JSON string literal, quotes included.
std::string JsonString(std::string_view s);

// The shortest text that reads back as exactly `v` ("0.1", "2048", "1e-07"); "null" when `v` is
// not finite (JSON has no NaN or infinity).
std::string JsonNumber(double v);

}  // namespace prefix_router::base
