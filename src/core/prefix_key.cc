#include "core/prefix_key.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace prefix_router {
namespace {

// Fixed seeds: changing them moves every key, so they are part of the wire contract between
// router replicas of the same version.
constexpr uint64_t kPrefixSeed = 0x7072656669783031ULL;  // "prefix01"
constexpr uint64_t kGroupSeed = 0x67726f7570303031ULL;   // "group001"

inline bool IsLeadByte(unsigned char c) { return (c & 0xC0) != 0x80; }

}  // namespace

std::string PrefixKey::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(high >> (4 * i)) & 0xF];
    out[31 - i] = kDigits[(low >> (4 * i)) & 0xF];
  }
  return out;
}

PrefixKey CombineWithGroup(XXH128_hash_t prefix_hash, std::string_view group) {
  if (group.empty()) return PrefixKey{prefix_hash.low64, prefix_hash.high64};
  // Mix the group into the key with a second hash over (prefix hash, group bytes).
  unsigned char buf[16 + kMaxRoutingGroupLength * 16];
  XXH128_hash_t h;
  if (group.size() <= sizeof(buf) - 16) {
    std::memcpy(buf, &prefix_hash.low64, 8);
    std::memcpy(buf + 8, &prefix_hash.high64, 8);
    std::memcpy(buf + 16, group.data(), group.size());
    h = XXH3_128bits_withSeed(buf, 16 + group.size(), kGroupSeed);
  } else {
    XXH128_hash_t g = XXH3_128bits_withSeed(group.data(), group.size(), kGroupSeed);
    uint64_t words[4] = {prefix_hash.low64, prefix_hash.high64, g.low64, g.high64};
    h = XXH3_128bits_withSeed(words, sizeof(words), kGroupSeed);
  }
  return PrefixKey{h.low64, h.high64};
}

PrefixKey NativePrefixKey(std::string_view body, size_t prefix_length, std::string_view group) {
  size_t n = std::min(body.size(), prefix_length);
  return CombineWithGroup(XXH3_128bits_withSeed(body.data(), n, kPrefixSeed), group);
}

size_t CountCodePoints(std::string_view s) {
  // A code point starts at every byte that is not a continuation byte (0x80..0xBF, which are
  // -128..-65 as signed chars).
  const auto* p = reinterpret_cast<const signed char*>(s.data());
  const size_t n = s.size();
  size_t count = 0;
  size_t i = 0;
#if defined(__SSE2__)
  // 16 bytes per step: compare gives -1 per lead byte; byte lanes accumulate up to 255 steps,
  // then psadbw sums them. About 0.2 instructions per byte, baseline x86-64 only.
  const __m128i threshold = _mm_set1_epi8(-65);
  while (n - i >= 16) {
    __m128i acc = _mm_setzero_si128();
    const size_t steps = std::min<size_t>((n - i) / 16, 255);
    for (size_t k = 0; k < steps; ++k, i += 16) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
      acc = _mm_sub_epi8(acc, _mm_cmpgt_epi8(v, threshold));
    }
    __m128i sums = _mm_sad_epu8(acc, _mm_setzero_si128());
    count += static_cast<size_t>(_mm_cvtsi128_si64(sums)) +
             static_cast<size_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  }
#endif
  for (; i < n; ++i) count += p[i] > -65;
  return count;
}

size_t Utf8PrefixBytes(std::string_view s, size_t max_chars, size_t* chars) {
  if (s.size() <= max_chars) {  // fewer bytes than the budget: the whole piece fits
    *chars = CountCodePoints(s);
    return s.size();
  }
  // Skip whole blocks while they fit, then walk the last block byte by byte.
  constexpr size_t kBlock = 256;
  size_t pos = 0;
  size_t count = 0;
  while (s.size() - pos > kBlock) {
    size_t c = CountCodePoints(s.substr(pos, kBlock));
    if (count + c > max_chars) break;
    count += c;
    pos += kBlock;
  }
  for (; pos < s.size(); ++pos) {
    if (IsLeadByte(static_cast<unsigned char>(s[pos]))) {
      if (count == max_chars) break;  // the next character would exceed the budget
      ++count;
    }
  }
  *chars = count;
  return pos;
}

TextPrefixHasher::TextPrefixHasher(size_t max_chars, std::string* record) : max_chars_(max_chars), record_(record) {
  // Required before the first reset_withSeed of a state not made by XXH3_createState(): that
  // reset skips deriving the secret when the old state's seed field already equals the seed,
  // so uninitialised memory could leave a stale secret and give a wrong, unstable key.
  XXH3_INITSTATE(&state_);
  XXH3_128bits_reset_withSeed(&state_, kPrefixSeed);
  if (record_) record_->clear();
}

bool TextPrefixHasher::Append(std::string_view utf8) {
  if (full()) return false;
  size_t chars = 0;
  size_t n = Utf8PrefixBytes(utf8, max_chars_ - chars_, &chars);
  XXH3_128bits_update(&state_, utf8.data(), n);
  if (record_) record_->append(utf8.data(), n);
  chars_ += chars;
  bytes_ += n;
  return !full();
}

PrefixKey TextPrefixHasher::Finish(std::string_view group) {
  return CombineWithGroup(XXH3_128bits_digest(&state_), group);
}

}  // namespace prefix_router
