#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace prefix_router::base {
namespace {

TEST(Utf8Test, LengthsOfWellFormedAndBrokenSequences) {
  EXPECT_EQ(Utf8Length("a", 0), 1u);
  EXPECT_EQ(Utf8Length("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(Utf8Length("\xE3\x81\x82", 0), 3u);      // あ
  EXPECT_EQ(Utf8Length("\xF0\x9F\x98\x80", 0), 4u);  // 😀
  EXPECT_EQ(Utf8Length("\xC3", 0), 0u);              // cut short
  EXPECT_EQ(Utf8Length("\xE3\x81", 0), 0u);
  EXPECT_EQ(Utf8Length("\xC0\xAF", 0), 0u);          // overlong '/'
  EXPECT_EQ(Utf8Length("\xED\xA0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(Utf8Length("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8Length("\x80", 0), 0u);              // a lone continuation byte
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9 \xE3\x81\x82"));
  EXPECT_FALSE(IsValidUtf8("caf\xC3"));
}

// A prefix cut inside a character loses that character's bytes, and nothing else.
TEST(Utf8Test, TrimPartialDropsOnlyACutLastCharacter) {
  const std::string text = "ab\xE3\x81\x82\xF0\x9F\x98\x80";  // ab あ 😀
  EXPECT_EQ(TrimPartialUtf8(text), text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const std::string_view shown = TrimPartialUtf8(std::string_view(text).substr(0, cut));
    EXPECT_TRUE(IsValidUtf8(shown)) << cut;
    const size_t expected = cut < 2 ? cut : cut < 5 ? 2 : cut < 9 ? 5 : 9;
    EXPECT_EQ(shown.size(), expected) << cut;
  }
}

// Repair keeps valid characters and replaces each byte that starts no sequence by U+FFFD.
TEST(Utf8Test, AppendValidReplacesEachBadByte) {
  std::string out = "x";
  AppendValidUtf8(out, "ok \xC3\xA9 \xFF\xED\xA0\x80 \xE3\x81");
  EXPECT_EQ(out, "xok \xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(out));
  EXPECT_EQ(ValidUtf8Prefix("ab\xC3\xA9\xFFcd"), 4u);
}

}  // namespace
}  // namespace prefix_router::base
