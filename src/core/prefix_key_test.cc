#include "core/prefix_key.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"

namespace prefix_router {
namespace {

// The tests spell multibyte characters directly; make sure the compiler keeps them UTF-8.
static_assert(std::string_view("é").size() == 2);
static_assert(std::string_view("日").size() == 3);
static_assert(std::string_view("😀").size() == 4);

std::string Repeat(std::string_view piece, size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (size_t i = 0; i < times; ++i) out.append(piece);
  return out;
}

// Byte length of the UTF-8 sequence a lead byte starts.
size_t SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  return 4;
}

// Reference splitter: the code points of valid UTF-8 `s`, one string each.
std::vector<std::string> CodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < s.size();) {
    const size_t n = SequenceLength(static_cast<unsigned char>(s[pos]));
    out.emplace_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

// Structural UTF-8 check: every sequence is a lead byte followed by the right number of
// continuation bytes, and nothing is cut short.
bool IsValidUtf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const auto lead = static_cast<unsigned char>(s[pos]);
    if ((lead & 0xC0) == 0x80 || lead >= 0xF8) return false;
    const size_t n = SequenceLength(lead);
    if (pos + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[pos + k]) & 0xC0) != 0x80) return false;
    }
    pos += n;
  }
  return true;
}

std::string EncodeUtf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Deterministic valid UTF-8 text of `chars` code points mixing 1- to 4-byte sequences.
std::string RandomUtf8(Rng& rng, size_t chars) {
  std::string out;
  for (size_t i = 0; i < chars; ++i) {
    switch (rng.Uniform(4)) {
      case 0: out += EncodeUtf8(0x20 + rng.Uniform(0x5F)); break;
      case 1: out += EncodeUtf8(0x80 + rng.Uniform(0x800 - 0x80)); break;
      case 2: out += EncodeUtf8(0xE000 + rng.Uniform(0x10000 - 0xE000)); break;  // no surrogates
      default: out += EncodeUtf8(0x10000 + rng.Uniform(0x110000 - 0x10000)); break;
    }
  }
  return out;
}

// Reference for Utf8PrefixBytes: whole code points, at most `max_chars` of them.
size_t ReferencePrefixBytes(std::string_view s, size_t max_chars, size_t* chars) {
  size_t bytes = 0;
  size_t count = 0;
  for (const std::string& cp : CodePoints(s)) {
    if (count == max_chars) break;
    bytes += cp.size();
    ++count;
  }
  *chars = count;
  return bytes;
}

// Keys `text` in one Append call; `record` receives the keyed text.
PrefixKey TextKey(std::string_view text, size_t max_chars, std::string_view group = "", std::string* record = nullptr) {
  TextPrefixHasher hasher(max_chars, record);
  hasher.Append(text);
  return hasher.Finish(group);
}

// Keys `pieces` appended in order.
PrefixKey TextKeyOfPieces(const std::vector<std::string>& pieces, size_t max_chars, std::string* record = nullptr) {
  TextPrefixHasher hasher(max_chars, record);
  for (const auto& p : pieces) hasher.Append(p);
  return hasher.Finish("");
}

// Splits `text` on code point boundaries into pieces of `sizes[k % sizes.size()]` code points.
std::vector<std::string> SplitIntoPieces(std::string_view text, const std::vector<size_t>& sizes) {
  std::vector<std::string> cps = CodePoints(text);
  std::vector<std::string> pieces;
  size_t k = 0;
  for (size_t pos = 0; pos < cps.size(); ++k) {
    std::string piece;
    for (size_t n = 0; n < sizes[k % sizes.size()] && pos < cps.size(); ++n) piece += cps[pos++];
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

// ---------------------------------------------------------------------------------------------
// Native invoke API: bytes.

// Bodies that agree on the first prefix_length bytes and differ afterwards share a key.
TEST(PrefixKeyTest, NativeKeyIgnoresBytesAfterPrefixLength) {
  const std::string common = Repeat("0123456789abcdef", 64);  // 1024 bytes
  const std::string a = common + "A tail";
  const std::string b = common + "B tail, and a longer one";
  EXPECT_EQ(NativePrefixKey(a, 1024, ""), NativePrefixKey(b, 1024, ""));
  EXPECT_EQ(NativePrefixKey(a, 1024, "tenant"), NativePrefixKey(b, 1024, "tenant"));
  EXPECT_NE(NativePrefixKey(a, 1025, ""), NativePrefixKey(b, 1025, ""));
}

// A difference anywhere inside the first prefix_length bytes gives a different key.
TEST(PrefixKeyTest, NativeKeyChangesWhenBytesWithinPrefixDiffer) {
  const std::string base = Repeat("x", 3000);
  const PrefixKey base_key = NativePrefixKey(base, 2048, "");
  for (size_t pos : {size_t{0}, size_t{1}, size_t{1000}, size_t{2047}}) {
    std::string changed = base;
    changed[pos] = 'y';
    EXPECT_NE(NativePrefixKey(changed, 2048, ""), base_key) << "byte " << pos;
  }
  std::string after = base;
  after[2048] = 'y';
  EXPECT_EQ(NativePrefixKey(after, 2048, ""), base_key);
}

// A body shorter than prefix_length is keyed on all of its bytes.
TEST(PrefixKeyTest, NativeKeyOfShortBodyCoversWholeBody) {
  const std::string body = "{\"inputs\":\"short\"}";
  EXPECT_EQ(NativePrefixKey(body, 2048, ""), NativePrefixKey(body, body.size(), ""));
  EXPECT_EQ(NativePrefixKey(body, 2048, ""), NativePrefixKey(body, 65536, ""));
  EXPECT_NE(NativePrefixKey(body, 2048, ""), NativePrefixKey(body, body.size() - 1, ""));
  // A body that is a strict prefix of another is not confused with it.
  EXPECT_NE(NativePrefixKey(body, 2048, ""), NativePrefixKey(body + " ", 2048, ""));
  EXPECT_NE(NativePrefixKey("", 2048, ""), NativePrefixKey(" ", 2048, ""));
}

// The native cut counts bytes and may fall inside a multibyte character (bodies are raw bytes).
TEST(PrefixKeyTest, NativeKeyCutIsByteBasedInsideMultibyteCharacter) {
  // "日本" (e6 97 a5 e6 9c ac) and "日木" (e6 97 a5 e6 9c a8) share 5 bytes, differ in the 6th.
  EXPECT_EQ(NativePrefixKey("日本", 4, ""), NativePrefixKey("日木", 4, ""));
  EXPECT_EQ(NativePrefixKey("日本", 5, ""), NativePrefixKey("日木", 5, ""));
  EXPECT_NE(NativePrefixKey("日本", 6, ""), NativePrefixKey("日木", 6, ""));
  EXPECT_NE(NativePrefixKey("日本", 4, ""), NativePrefixKey("日X", 4, ""));
}

// ---------------------------------------------------------------------------------------------
// UTF-8 helpers.

// CountCodePoints counts characters, not bytes, for 1- to 4-byte sequences.
TEST(PrefixKeyTest, CountCodePointsEdgeCases) {
  EXPECT_EQ(CountCodePoints(""), 0u);
  EXPECT_EQ(CountCodePoints("abc"), 3u);
  EXPECT_EQ(CountCodePoints("é"), 1u);
  EXPECT_EQ(CountCodePoints("日"), 1u);
  EXPECT_EQ(CountCodePoints("😀"), 1u);
  EXPECT_EQ(CountCodePoints("aé日😀"), 4u);
  EXPECT_EQ(CountCodePoints(Repeat("😀", 300)), 300u);      // 1200 bytes
  EXPECT_EQ(CountCodePoints(Repeat("aé日😀", 100)), 400u);  // 1000 bytes
}

// Utf8PrefixBytes: empty input, zero budget, exact fit and a budget larger than the text.
TEST(PrefixKeyTest, Utf8PrefixBytesEdgeCases) {
  size_t chars = 99;
  EXPECT_EQ(Utf8PrefixBytes("", 0, &chars), 0u);
  EXPECT_EQ(chars, 0u);
  chars = 99;
  EXPECT_EQ(Utf8PrefixBytes("", 5, &chars), 0u);
  EXPECT_EQ(chars, 0u);

  EXPECT_EQ(Utf8PrefixBytes("a日😀", 0, &chars), 0u);
  EXPECT_EQ(chars, 0u);
  EXPECT_EQ(Utf8PrefixBytes("a日😀", 1, &chars), 1u);
  EXPECT_EQ(chars, 1u);
  EXPECT_EQ(Utf8PrefixBytes("a日😀", 2, &chars), 4u);
  EXPECT_EQ(chars, 2u);
  EXPECT_EQ(Utf8PrefixBytes("a日😀", 3, &chars), 8u);  // exact fit
  EXPECT_EQ(chars, 3u);
  EXPECT_EQ(Utf8PrefixBytes("a日😀", 4, &chars), 8u);
  EXPECT_EQ(chars, 3u);
  EXPECT_EQ(Utf8PrefixBytes("a日😀", 1000, &chars), 8u);
  EXPECT_EQ(chars, 3u);

  const std::string ascii = Repeat("a", 1000);
  EXPECT_EQ(Utf8PrefixBytes(ascii, 1000, &chars), 1000u);  // exact fit, bytes == chars
  EXPECT_EQ(chars, 1000u);
  EXPECT_EQ(Utf8PrefixBytes(ascii, 999, &chars), 999u);
  EXPECT_EQ(chars, 999u);
}

// A cut inside a long run of 4-byte characters (longer than one 256-byte block) ends on a
// character boundary, including cuts at and around block boundaries.
TEST(PrefixKeyTest, Utf8PrefixBytesInsideLongRunOfFourByteCharacters) {
  const std::string run = Repeat("😀", 200);  // 800 bytes
  for (size_t max_chars : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{128}, size_t{129},
                           size_t{199}, size_t{200}}) {
    size_t chars = 0;
    EXPECT_EQ(Utf8PrefixBytes(run, max_chars, &chars), 4 * max_chars) << max_chars;
    EXPECT_EQ(chars, max_chars);
  }
  size_t chars = 0;
  EXPECT_EQ(Utf8PrefixBytes(run, 250, &chars), 800u);
  EXPECT_EQ(chars, 200u);

  // Shifted by one byte, every 4-byte character straddles the 256-byte block boundaries.
  const std::string shifted = "a" + run;
  for (size_t max_chars = 0; max_chars <= 202; ++max_chars) {
    size_t expected_chars = 0;
    const size_t expected = ReferencePrefixBytes(shifted, max_chars, &expected_chars);
    EXPECT_EQ(Utf8PrefixBytes(shifted, max_chars, &chars), expected) << max_chars;
    EXPECT_EQ(chars, expected_chars) << max_chars;
  }
}

// Utf8PrefixBytes agrees with a simple code point walk on varied texts and budgets, short
// texts and texts many blocks long.
TEST(PrefixKeyTest, Utf8PrefixBytesMatchesReferenceOnMixedText) {
  Rng rng(42);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = rng.Uniform(700);
    const std::string text = RandomUtf8(rng, n);
    for (size_t max_chars = 0; max_chars <= n + 2; max_chars += 1 + rng.Uniform(9)) {
      size_t chars = 0;
      size_t expected_chars = 0;
      const size_t expected = ReferencePrefixBytes(text, max_chars, &expected_chars);
      ASSERT_EQ(Utf8PrefixBytes(text, max_chars, &chars), expected) << "trial " << trial << " max_chars " << max_chars;
      ASSERT_EQ(chars, expected_chars);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible API: code points.

// The text key counts code points: a cut among 2-, 3- and 4-byte characters keeps exactly
// max_chars whole characters.
TEST(PrefixKeyTest, TextKeyCountsCodePointsAndNeverSplitsCharacter) {
  for (std::string_view ch : {"é", "日", "😀"}) {
    const std::string text = "ab" + Repeat(ch, 10);
    std::string record;
    TextPrefixHasher hasher(5, &record);
    EXPECT_FALSE(hasher.Append(text));  // the limit is reached
    EXPECT_TRUE(hasher.full());
    EXPECT_EQ(record, "ab" + Repeat(ch, 3)) << ch;
    EXPECT_TRUE(IsValidUtf8(record));
    EXPECT_EQ(CountCodePoints(record), 5u);
    EXPECT_EQ(hasher.chars(), 5u);
    EXPECT_EQ(hasher.bytes(), record.size());
  }
}

// Wherever the cut falls in mixed multibyte text, the keyed text is valid UTF-8 holding
// exactly min(max_chars, length) code points, and it is the text's own leading characters.
TEST(PrefixKeyTest, TextKeyCutAtEveryPositionIsOnCharacterBoundary) {
  const std::string text = Repeat("aé日😀", 80);  // 320 code points, 800 bytes
  const std::vector<std::string> cps = CodePoints(text);
  for (size_t max_chars = 0; max_chars <= cps.size() + 3; ++max_chars) {
    std::string record;
    TextKey(text, max_chars, "", &record);
    const size_t expected_chars = std::min(max_chars, cps.size());
    std::string expected;
    for (size_t k = 0; k < expected_chars; ++k) expected += cps[k];
    ASSERT_EQ(record, expected) << max_chars;
    ASSERT_TRUE(IsValidUtf8(record));
    ASSERT_EQ(CountCodePoints(record), expected_chars);
  }
}

// Texts equal in their first max_chars characters share a key; a difference within differs.
TEST(PrefixKeyTest, TextKeyIgnoresCharactersAfterLimit) {
  const std::string common = Repeat("日本語のテキスト", 16);  // 128 code points
  EXPECT_EQ(TextKey(common + "😀 one ending", 128), TextKey(common + "é another ending", 128));
  EXPECT_NE(TextKey(common + "😀", 129), TextKey(common + "é", 129));
  std::string changed = common;
  changed.replace(0, 3, "月");  // same byte length, different first character
  EXPECT_NE(TextKey(changed, 128), TextKey(common, 128));
  // A text shorter than the limit is keyed on all of it.
  EXPECT_EQ(TextKey("short é", 2048), TextKey("short é", 7));
  EXPECT_NE(TextKey("short é", 2048), TextKey("short é", 6));
}

// A text given in pieces (any sizes, including pieces longer than 256 bytes) keys and
// records the same as the text in one piece, whatever the limit.
TEST(PrefixKeyTest, TextKeyOfPiecesEqualsKeyOfWhole) {
  Rng rng(7);
  const std::string text = RandomUtf8(rng, 600) + Repeat("😀", 150);
  const size_t total = CountCodePoints(text);
  const std::vector<std::vector<size_t>> splits = {{1}, {1, 2, 3, 5, 8}, {7, 1}, {100}, {97, 300, 3}, {400}};
  for (size_t max_chars : {size_t{0}, size_t{1}, size_t{2}, size_t{64}, size_t{255}, size_t{256}, size_t{257},
                           size_t{500}, total - 1, total, total + 10}) {
    std::string whole_record;
    const PrefixKey whole = TextKey(text, max_chars, "", &whole_record);
    for (const auto& sizes : splits) {
      const std::vector<std::string> pieces = SplitIntoPieces(text, sizes);
      std::string record;
      EXPECT_EQ(TextKeyOfPieces(pieces, max_chars, &record), whole)
          << "max_chars " << max_chars << " first piece size " << sizes[0];
      EXPECT_EQ(record, whole_record);
    }
  }
}

// Append reports when the limit is reached; pieces after that, and empty pieces, change
// nothing.
TEST(PrefixKeyTest, TextHasherAppendStopsAtLimit) {
  std::string record;
  TextPrefixHasher hasher(4, &record);
  EXPECT_TRUE(hasher.Append(""));
  EXPECT_TRUE(hasher.Append("日本"));
  EXPECT_EQ(hasher.chars(), 2u);
  EXPECT_EQ(hasher.bytes(), 6u);
  EXPECT_FALSE(hasher.Append("é😀xyz"));
  EXPECT_FALSE(hasher.Append("more text"));
  EXPECT_EQ(hasher.chars(), 4u);
  EXPECT_EQ(hasher.bytes(), 12u);
  EXPECT_EQ(record, "日本é😀");
  EXPECT_EQ(hasher.Finish(""), TextKey("日本é😀", 4));
}

// A hasher's key does not depend on what its memory held before: rebuilding one where an
// earlier hasher lived, with any 8 bytes of that memory since overwritten, gives the same key.
TEST(PrefixKeyTest, TextHasherIgnoresStaleMemory) {
  // Longer than 240 bytes, so the streaming state (not just the seed) determines the digest.
  const std::string text = Repeat("stale memory must not leak into keys ", 20);
  const PrefixKey expected = NativePrefixKey(text, 2048, "");
  alignas(TextPrefixHasher) unsigned char storage[sizeof(TextPrefixHasher)] = {};
  for (size_t offset = 0; offset + 8 <= sizeof(storage); offset += 8) {
    auto* earlier = new (storage) TextPrefixHasher(2048);
    earlier->Append(text);
    EXPECT_EQ(earlier->Finish(""), expected);
    earlier->~TextPrefixHasher();
    std::memset(storage + offset, 0xA5, 8);
    auto* hasher = new (storage) TextPrefixHasher(2048);
    hasher->Append(text);
    EXPECT_EQ(hasher->Finish(""), expected) << "overwritten at offset " << offset;
    hasher->~TextPrefixHasher();
  }
}

// A hasher with a record clears it first, so a reused string holds only this key's text.
TEST(PrefixKeyTest, TextHasherRecordIsReset) {
  std::string record = "stale";
  TextKey("fresh", 100, "", &record);
  EXPECT_EQ(record, "fresh");
}

// ---------------------------------------------------------------------------------------------
// Groups and the relation between the two APIs.

// The routing group isolates tenants: same prefix, different groups => different keys; same
// group => same key; the empty group is "no group" however it is spelled.
TEST(PrefixKeyTest, GroupIsolatesKeys) {
  const std::string body = Repeat("shared system prompt ", 200);
  const PrefixKey none = NativePrefixKey(body, 2048, "");
  const PrefixKey a = NativePrefixKey(body, 2048, "tenant-a");
  const PrefixKey b = NativePrefixKey(body, 2048, "tenant-b");
  EXPECT_NE(a, b);
  EXPECT_NE(a, none);
  EXPECT_NE(b, none);
  EXPECT_EQ(a, NativePrefixKey(body, 2048, std::string("tenant-a")));
  EXPECT_EQ(none, NativePrefixKey(body, 2048, std::string_view()));
  EXPECT_NE(none, NativePrefixKey(body, 2048, " "));

  // The longest group the native header allows, and groups longer than that, still isolate.
  const std::string max_group(kMaxRoutingGroupLength, 'g');
  std::string max_group2 = max_group;
  max_group2.back() = 'h';
  EXPECT_NE(NativePrefixKey(body, 2048, max_group), NativePrefixKey(body, 2048, max_group2));
  EXPECT_EQ(NativePrefixKey(body, 2048, max_group), NativePrefixKey(body, 2048, max_group));
  const std::string huge_group = Repeat("g", 5000);
  std::string huge_group2 = huge_group;
  huge_group2[4999] = 'h';
  EXPECT_NE(NativePrefixKey(body, 2048, huge_group), NativePrefixKey(body, 2048, huge_group2));
  EXPECT_EQ(NativePrefixKey(body, 2048, huge_group), NativePrefixKey(body, 2048, huge_group));
  EXPECT_NE(NativePrefixKey(body, 2048, huge_group), none);

  // Text keys isolate by group the same way.
  EXPECT_NE(TextKey(body, 2048, "tenant-a"), TextKey(body, 2048, "tenant-b"));
  EXPECT_EQ(TextKey(body, 2048, "tenant-a"), TextKey(body, 2048, "tenant-a"));
}

// The prefix and the group are not simply concatenated: moving bytes between them changes
// the key.
TEST(PrefixKeyTest, GroupIsNotConcatenatedWithPrefix) {
  EXPECT_NE(NativePrefixKey("ab", 2048, "c"), NativePrefixKey("a", 2048, "bc"));
  EXPECT_NE(NativePrefixKey("abc", 2048, ""), NativePrefixKey("ab", 2048, "c"));
}

// Documented: native (one-shot) and text (streaming) hashing of the same ASCII bytes under
// the same limit give the same key, with and without a group, at every input size class.
TEST(PrefixKeyTest, NativeAndTextAgreeOnAscii) {
  Rng rng(3);
  std::string ascii;
  for (int i = 0; i < 5000; ++i) ascii += static_cast<char>(0x20 + rng.Uniform(0x5F));
  for (size_t len : {size_t{0}, size_t{1}, size_t{16}, size_t{17}, size_t{128}, size_t{129}, size_t{240}, size_t{241},
                     size_t{1024}, size_t{2048}, size_t{5000}}) {
    const std::string_view body(ascii.data(), len);
    for (size_t limit : {size_t{1024}, size_t{2048}, size_t{4096}}) {
      EXPECT_EQ(NativePrefixKey(body, limit, ""), TextKey(body, limit)) << len << "/" << limit;
      EXPECT_EQ(NativePrefixKey(body, limit, "grp"), TextKey(body, limit, "grp"));
      EXPECT_EQ(NativePrefixKey(body, limit, ""), TextKeyOfPieces(SplitIntoPieces(body, {100, 300, 7}), limit));
    }
  }
}

// ToHex is 32 lowercase hex digits, the high word then the low word.
TEST(PrefixKeyTest, ToHexIs32LowercaseDigitsHighThenLow) {
  EXPECT_EQ((PrefixKey{0x0123456789abcdefULL, 0xfedcba9876543210ULL}.ToHex()), "fedcba98765432100123456789abcdef");
  EXPECT_EQ(PrefixKey{}.ToHex(), std::string(32, '0'));
  const std::string hex = NativePrefixKey("anything", 2048, "").ToHex();
  ASSERT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
}

// Golden keys. These pin the key functions (XXH3-128 with fixed seeds, the group combination)
// so that router replicas, the simulator and different builds compute the same key for the
// same request. Changing any of them is a breaking change: every prefix moves to another
// instance and every warm cache goes cold on upgrade.
TEST(PrefixKeyTest, GoldenKeysAreStableAcrossProcessesAndBuilds) {
  EXPECT_EQ(NativePrefixKey("hello world", 2048, "").ToHex(), "c20eb54294faee1b5f6cd5f1c33850b6");
  EXPECT_EQ(NativePrefixKey("hello world", 5, "").ToHex(), "93eca87b19b471315d08cb83a39f69ca");
  EXPECT_EQ(NativePrefixKey("hello world", 2048, "tenant-a").ToHex(), "f998ccccdb0b256d08e7c8f856133ca3");
  std::string record;
  EXPECT_EQ(TextKey("héllo w日rld", 5, "", &record).ToHex(), "fdb61931e1a2e93a3c7025dc6a78cd06");
  EXPECT_EQ(record, "héllo");
}

}  // namespace
}  // namespace prefix_router
