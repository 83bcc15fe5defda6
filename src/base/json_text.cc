#include "base/json_text.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>

#include "base/utf8.h"

namespace prefix_router::base {
namespace {

uint64_t Load8(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

// Non-zero when any of the 8 bytes in `x` is a control character, '"', '\\' or non-ASCII (the
// classic SWAR byte tests: a byte is below n when (b - n) borrows into its high bit).
uint64_t AttentionMask(uint64_t x) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  const auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  const uint64_t below_space = (x - kOnes * 0x20) & ~x & kHigh;
  return (x & kHigh) | below_space | has_zero(x ^ (kOnes * '"')) | has_zero(x ^ (kOnes * '\\'));
}

#if defined(__SSE2__)
// Whether the 16 bytes at `p` are all plain ASCII (0x20..0x7f) other than '"' and '\\'. A signed
// compare below 0x20 also catches bytes >= 0x80, which are negative as signed chars.
bool PlainBlock16(const char* p) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i bad =
      _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                   _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
  return _mm_movemask_epi8(bad) == 0;
}
#endif

}  // namespace

void AppendJsonEscaped(std::string& out, std::string_view s, InvalidUtf8 invalid) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t run = 0;  // start of the pending run of bytes copied as they are
  size_t i = 0;
  const auto flush = [&](size_t end) { out.append(s.data() + run, end - run); };
  while (i < s.size()) {
    // Skip plain ASCII in blocks: generated prompts are tens of KB of it.
#if defined(__SSE2__)
    while (i + 16 <= s.size() && PlainBlock16(s.data() + i)) i += 16;
#endif
    while (i + 8 <= s.size() && AttentionMask(Load8(s.data() + i)) == 0) i += 8;
    if (i >= s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (invalid == InvalidUtf8::kKeep) {
        ++i;
        continue;
      }
      const size_t len = Utf8Length(s, i);
      if (len > 0) {
        i += len;
        continue;
      }
      flush(i);
      out += "\xEF\xBF\xBD";
      run = ++i;
      continue;
    }
    flush(i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
    }
    run = ++i;
  }
  flush(i);
}

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  AppendJsonEscaped(out, s);
  out += '"';
}

std::string JsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  AppendJsonString(out, s);
  return out;
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{}", v);
}

}  // namespace prefix_router::base
