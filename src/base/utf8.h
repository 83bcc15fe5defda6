// Strict UTF-8 (RFC 3629): no overlong forms, surrogates or code points above U+10FFFF. The
// project's one UTF-8 validator: every check and repair of text in src/ goes through Utf8Length.
//
//   base::Utf8Length("é…", 0) == 2;  base::Utf8Length("\xC3", 0) == 0 (cut short)
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace prefix_router::base {

// The length of the well-formed UTF-8 sequence that starts at s[i] (1 to 4), or 0 when the bytes
// there are not one (an invalid lead byte, a bad or missing continuation byte, an overlong form,
// a surrogate, a code point above U+10FFFF). REQUIRES: i < s.size().
inline size_t Utf8Length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 1;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 2;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 3;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() - i <= n) return 0;
  for (size_t k = 1; k <= n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n + 1;
}

// The length of the longest prefix of `s` that is well-formed UTF-8.
inline size_t ValidUtf8Prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = Utf8Length(s, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

inline bool IsValidUtf8(std::string_view s) { return ValidUtf8Prefix(s) == s.size(); }

// Appends `s` to `out` with each byte that starts no well-formed sequence replaced by U+FFFD,
// the replacement character, so that what is written is always valid UTF-8.
inline void AppendValidUtf8(std::string& out, std::string_view s) {
  size_t i = ValidUtf8Prefix(s);
  out.append(s.substr(0, i));
  while (i < s.size()) {
    const size_t n = Utf8Length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
}

// `s` without a sequence cut short at its end (a prefix taken at a byte count may end inside a
// character): for display; the bytes before are left as they are.
inline std::string_view TrimPartialUtf8(std::string_view s) {
  // A sequence is at most 4 bytes: look back over at most 3 continuation bytes for its lead.
  size_t lead = s.size();
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) != 0x80) {
      lead = s.size() - back;
      break;
    }
  }
  if (lead == s.size()) return s;  // ends with ASCII... or 4+ continuation bytes: nothing to trim
  const auto c = static_cast<unsigned char>(s[lead]);
  const size_t want = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return s.size() - lead < want ? s.substr(0, lead) : s;
}

}  // namespace prefix_router::base
