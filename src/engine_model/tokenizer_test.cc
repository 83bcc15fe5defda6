#include "engine_model/tokenizer.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prefix_router::engine_model {
namespace {

// Ordinary English prose (written for this test), to measure characters per token.
constexpr std::string_view kProse =
    "When a request arrives at the gateway, the router has only a few microseconds to decide "
    "where it should go. It cannot ask every server what it remembers, so it relies on a "
    "simple observation: conversations grow by appending. The second turn of a chat repeats "
    "the first turn word for word and adds a little more at the end. If the second turn lands "
    "on the same machine as the first, that machine can skip most of the work, because the "
    "attention keys and values for the shared beginning are still sitting in its memory.\n\n"
    "This is not free. Sending related requests to one place can overload it while its "
    "neighbours sit idle, and a busy server answers slowly no matter how much it remembers. "
    "A good policy therefore balances two goals that pull in opposite directions. It prefers "
    "the home of a prefix while that home has room, and it spills over to the next candidate "
    "when the queue grows too long. Measuring the benefit honestly requires a model of the "
    "engine that behaves like the real thing: blocks of sixteen tokens, a limited number of "
    "them, and a scheduler that mixes new prompts with ongoing replies in every step.\n\n"
    "Engineers often underestimate how much of the latency comes from recomputing text the "
    "system has already seen. A long system prompt, a document pasted at the start of a "
    "session, or a set of tool descriptions may account for thousands of tokens. Processing "
    "them again for every message wastes both time and money, and users notice the delay "
    "before the first word appears on their screen.";

std::vector<uint32_t> Tok(std::string_view text) {
  std::vector<uint32_t> out;
  Tokenize(text, out);
  return out;
}

std::vector<uint32_t> Ids(const std::vector<std::string_view>& pieces) {
  std::vector<uint32_t> out;
  for (std::string_view p : pieces) out.push_back(PieceTokenId(p));
  return out;
}

// English prose gives about 4 characters per token, as real tokenizers do.
TEST(TokenizerTest, EnglishProseHasAboutFourCharactersPerToken) {
  const size_t tokens = CountTokens(kProse);
  const double ratio = static_cast<double>(kProse.size()) / static_cast<double>(tokens);
  EXPECT_GE(ratio, 3.5) << tokens << " tokens";
  EXPECT_LE(ratio, 4.5) << tokens << " tokens";
}

// Words are cut into pieces of at most 5 code points, with a single leading space attached.
TEST(TokenizerTest, CutsWordsPunctuationAndSpacesAsDocumented) {
  EXPECT_EQ(Tok("Hello, worlds!"), Ids({"Hello", ",", " world", "s", "!"}));
  EXPECT_EQ(Tok("a  b"), Ids({"a", " ", " b"}));
  EXPECT_EQ(Tok("\n\nfoo"), Ids({"\n\n", "foo"}));
  EXPECT_EQ(Tok("x          y"), Ids({"x", "     ", "    ", " y"}));
  EXPECT_EQ(Tok("end. "), Ids({"end", ".", " "}));
  EXPECT_TRUE(Tok("").empty());
}

// Non-ASCII code points count as word characters and are never split.
TEST(TokenizerTest, KeepsUtf8CodePointsWhole) {
  EXPECT_EQ(Tok("h\xC3\xA9llos w\xC3\xB6rlds"), Ids({"h\xC3\xA9llo", "s", " w\xC3\xB6rld", "s"}));
  // A truncated multi-byte sequence counts as one code point per byte and is not over-read.
  EXPECT_EQ(Tok("ab\xE2\x82"), Ids({"ab\xE2\x82"}));
  const std::string five_emoji =
      "\xF0\x9F\x98\x80\xF0\x9F\x98\x80\xF0\x9F\x98\x80"
      "\xF0\x9F\x98\x80\xF0\x9F\x98\x80";
  EXPECT_EQ(Tok(five_emoji + "\xF0"), Ids({five_emoji, "\xF0"}));
}

// CountTokens agrees with Tokenize, and text ids avoid the special range.
TEST(TokenizerTest, CountMatchesTokenizeAndIdsAreInTheTextRange) {
  const std::vector<uint32_t> ids = Tok(kProse);
  EXPECT_EQ(ids.size(), CountTokens(kProse));
  for (uint32_t id : ids) {
    EXPECT_GE(id, kFirstTextTokenId);
    EXPECT_LT(id, kFirstTextTokenId + kTextVocabSize);
  }
  EXPECT_EQ(Tok(kProse), ids);  // deterministic
}

// Tokenize appends to the output rather than replacing it.
TEST(TokenizerTest, TokenizeAppends) {
  std::vector<uint32_t> out = {7};
  Tokenize("one two", out);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], 7u);
}

// Cutting a text after its first k tokens keeps exactly those k tokens, for every k, through
// attached spaces, long words, whitespace runs and multi-byte code points.
TEST(TokenizerTest, TokenPrefixKeepsTheFirstTokens) {
  const std::string text = std::string(kProse.substr(0, 400)) + "  x          y h\xC3\xA9llos-w\xC3\xB6rldwide\n\nend.";
  const std::vector<uint32_t> all = Tok(text);
  for (size_t k = 0; k <= all.size(); ++k) {
    const size_t n = TokenPrefixBytes(text, k);
    const std::vector<uint32_t> expected(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k));
    EXPECT_EQ(Tok(std::string_view(text).substr(0, n)), expected) << k;
  }
  EXPECT_EQ(TokenPrefixBytes(text, all.size() + 5), text.size());
  EXPECT_EQ(TokenPrefixBytes("Hello, worlds!", 3), std::string_view("Hello, world").size());
}

// The chat template renders specials, role, blank line, content and the generation prompt.
TEST(ChatTemplateTest, RendersLlama3Layout) {
  const std::vector<uint32_t> got = RenderChat({{"system", "Be brief."}, {"user", "Hi there"}});
  std::vector<uint32_t> want = {kBeginOfText, kStartHeaderId};
  Tokenize("system", want);
  want.push_back(kEndHeaderId);
  Tokenize("\n\n", want);
  Tokenize("Be brief.", want);
  want.push_back(kEotId);
  want.push_back(kStartHeaderId);
  Tokenize("user", want);
  want.push_back(kEndHeaderId);
  Tokenize("\n\n", want);
  Tokenize("Hi there", want);
  want.push_back(kEotId);
  want.push_back(kStartHeaderId);
  Tokenize("assistant", want);
  want.push_back(kEndHeaderId);
  Tokenize("\n\n", want);
  EXPECT_EQ(got, want);
}

// Text parts are concatenated; a non-text part is a fixed run of digest-derived placeholders.
TEST(ChatTemplateTest, ContentPartsConcatenateTextAndExpandNonText) {
  ChatMessage split{"user", "", {ChatPart::Text("Hel"), ChatPart::Text("lo world")}};
  EXPECT_EQ(RenderChat({split}), RenderChat({{"user", "Hello world"}}));

  ChatMessage image_a{"user", "", {ChatPart::Text("Look:"), ChatPart::NonText(1)}};
  ChatMessage image_b{"user", "", {ChatPart::Text("Look:"), ChatPart::NonText(2)}};
  const std::vector<uint32_t> a = RenderChat({image_a});
  const std::vector<uint32_t> b = RenderChat({image_b});
  const std::vector<uint32_t> text_only = RenderChat({{"user", "Look:"}});
  EXPECT_EQ(a.size(), text_only.size() + kNonTextPartTokens);
  EXPECT_EQ(b.size(), a.size());
  EXPECT_NE(a, b);
  EXPECT_EQ(RenderChat({image_a}), a);
}

// A completions prompt is <|begin_of_text|> followed by the prompt's tokens.
TEST(ChatTemplateTest, RendersCompletionPrompt) {
  std::vector<uint32_t> want = {kBeginOfText};
  Tokenize("Once upon a time", want);
  EXPECT_EQ(RenderCompletion("Once upon a time"), want);
}

// Generated text is lowercase words, one token each, matching GeneratedTokenId.
TEST(GeneratedTextTest, TokenizesToExactlyTheGeneratedIds) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xDEADBEEFull}) {
    for (size_t n : {0u, 1u, 2u, 17u, 300u}) {
      const std::string text = GeneratedText(seed, n);
      const std::vector<uint32_t> ids = Tok(text);
      ASSERT_EQ(ids.size(), n) << text;
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(ids[i], GeneratedTokenId(seed, i)) << i;
      for (char c : text) EXPECT_TRUE(c == ' ' || (c >= 'a' && c <= 'z')) << text;
      if (n > 0) {
        EXPECT_NE(text.front(), ' ');
      }
    }
  }
  EXPECT_NE(GeneratedText(1, 50), GeneratedText(2, 50));
  std::string streamed;
  for (size_t i = 0; i < 10; ++i) AppendGeneratedPiece(9, i, streamed);
  EXPECT_EQ(streamed, GeneratedText(9, 10));
}

// A follow-up turn that resends the reply starts with turn 1's prompt plus the generated ids.
TEST(GeneratedTextTest, FollowUpTurnExtendsPromptAndReply) {
  const std::vector<ChatMessage> turn1 = {{"user", "Name three rivers."}};
  std::vector<uint32_t> prefix = RenderChat(turn1);
  for (size_t i = 0; i < 25; ++i) prefix.push_back(GeneratedTokenId(77, i));

  std::vector<ChatMessage> turn2 = turn1;
  turn2.push_back({"assistant", GeneratedText(77, 25)});
  turn2.push_back({"user", "And three lakes?"});
  const std::vector<uint32_t> full = RenderChat(turn2);
  ASSERT_GT(full.size(), prefix.size());
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), full.begin()));
  EXPECT_EQ(full[prefix.size()], kEotId);
}

}  // namespace
}  // namespace prefix_router::engine_model
