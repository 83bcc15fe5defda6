#include "api/openai_request.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "api/request.h"
#include "core/prefix_key.h"
#include "core/status.h"

namespace prefix_router::api {
namespace {

constexpr uint32_t kPrefix = 1024;  // the smallest prefix_length the router accepts

// What a Parse produced, copied out of the parser so it outlives the next Parse.
struct Outcome {
  Status status;
  ApiKind api = ApiKind::kNative;
  std::string served_name;
  std::string routing_group;
  bool stream = false;
  PrefixKey key;
  size_t prefix_units = 0;
  std::string text;  // keyed text
  bool ok() const { return status.ok(); }
};

Outcome ParseBody(OpenAiRequestParser& parser, ApiKind api, std::string_view body, uint32_t prefix_length = kPrefix,
                  bool padded = false) {
  Outcome o;
  auto r = parser.Parse(api, body, prefix_length, padded, &o.text);
  if (!r.ok()) {
    o.status = r.status();
    return o;
  }
  o.api = r->api;
  o.served_name = std::string(r->served_name);
  o.routing_group = std::string(r->routing_group);
  o.stream = r->stream;
  o.key = r->key;
  o.prefix_units = r->prefix_units;
  return o;
}

Outcome Chat(OpenAiRequestParser& parser, std::string_view body, uint32_t prefix_length = kPrefix) {
  return ParseBody(parser, ApiKind::kChatCompletions, body, prefix_length);
}

Outcome Completion(OpenAiRequestParser& parser, std::string_view body, uint32_t prefix_length = kPrefix) {
  return ParseBody(parser, ApiKind::kCompletions, body, prefix_length);
}

// A chat body with the given messages array (JSON) and extra top-level fields.
std::string ChatBody(std::string_view messages, std::string_view extra = "") {
  std::string body = R"({"model":"m","messages":)";
  body += messages;
  body += extra;
  body += "}";
  return body;
}

std::string CompletionBody(std::string_view prompt) {
  return std::string(R"({"model":"m","prompt":)") + std::string(prompt) + "}";
}

// One user message whose content is `text` (already a valid JSON string body, no quotes).
std::string UserMessage(std::string_view text) {
  return ChatBody(std::string(R"([{"role":"user","content":")") + std::string(text) + "\"}]");
}

// The extracted text of one message (see openai_request.h).
std::string Msg(std::string_view role, std::string_view content) {
  return std::string(role) + "\x1f" + std::string(content) + "\x1e";
}

// Independent of the implementation: code points are counted by their lead bytes.
bool IsLeadByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += IsLeadByte(c);
  return n;
}

// The first `n` code points of `s`.
std::string_view FirstCodePoints(std::string_view s, size_t n) {
  size_t seen = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (IsLeadByte(s[i])) {
      if (seen == n) return s.substr(0, i);
      ++seen;
    }
  }
  return s;
}

// `count` code points cycling through 1-, 2-, 3- and 4-byte characters.
std::string MixedText(size_t count) {
  static const std::vector<std::string> kChars = {"a", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80"};
  std::string s;
  for (size_t i = 0; i < count; ++i) s += kChars[i % kChars.size()];
  return s;
}

// Replaces the code point at index `index` of `s` by `replacement`.
std::string ReplaceCodePoint(std::string_view s, size_t index, std::string_view replacement) {
  const size_t begin = FirstCodePoints(s, index).size();
  const size_t end = FirstCodePoints(s, index + 1).size();
  std::string out(s.substr(0, begin));
  out += replacement;
  out += s.substr(end);
  return out;
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void ExpectInvalid(const Outcome& o, std::string_view what) {
  EXPECT_FALSE(o.ok()) << what;
  EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << what << ": " << o.status.ToString();
}

std::string Nested(size_t depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

// ----- chat extraction -----

// Each message contributes role U+001F content U+001E, in order.
TEST(OpenAiParserTest, ChatTextIsRoleAndContentWithSeparators) {
  OpenAiRequestParser parser;
  Outcome o = Chat(parser, ChatBody(R"([{"role":"system","content":"Be brief."},)"
                                    R"({"role":"user","content":"Hi there"}])"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, Msg("system", "Be brief.") + Msg("user", "Hi there"));
  EXPECT_EQ(o.prefix_units, CodePoints(o.text));
  EXPECT_EQ(o.api, ApiKind::kChatCompletions);
}

// Array content parts are joined by U+001D.
TEST(OpenAiParserTest, ChatTextPartsAreSeparatedByGroupSeparator) {
  OpenAiRequestParser parser;
  Outcome o = Chat(parser, ChatBody(R"([{"role":"user","content":[{"type":"text","text":"one"},)"
                                    R"({"type":"text","text":"two"},{"type":"text","text":"three"}]}])"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, Msg("user", "one\x1dtwo\x1dthree"));
}

// String content keys exactly like an array holding one text part with the same text.
TEST(OpenAiParserTest, StringContentEqualsSingleTextPart) {
  OpenAiRequestParser parser;
  Outcome s = Chat(parser, ChatBody(R"([{"role":"user","content":"hello"}])"));
  Outcome a = Chat(parser, ChatBody(R"([{"role":"user","content":[{"type":"text","text":"hello"}]}])"));
  ASSERT_TRUE(s.ok() && a.ok());
  EXPECT_EQ(s.text, a.text);
  EXPECT_EQ(s.key, a.key);
}

// Null and absent content give no part; fields other than role and content are not keyed.
TEST(OpenAiParserTest, NullAndAbsentContentGiveNoPart) {
  OpenAiRequestParser parser;
  Outcome null_content = Chat(parser, ChatBody(R"([{"role":"assistant","content":null}])"));
  Outcome absent = Chat(parser, ChatBody(R"([{"role":"assistant"}])"));
  Outcome with_tools = Chat(
      parser, ChatBody(R"([{"role":"assistant","name":"bot","content":null,)"
                       R"("tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}])"));
  ASSERT_TRUE(null_content.ok() && absent.ok() && with_tools.ok());
  EXPECT_EQ(null_content.text, Msg("assistant", ""));
  EXPECT_EQ(absent.text, Msg("assistant", ""));
  EXPECT_EQ(with_tools.text, Msg("assistant", ""));
  EXPECT_EQ(null_content.key, absent.key);
  EXPECT_EQ(null_content.key, with_tools.key);
}

// A "refusal" part contributes its refusal text.
TEST(OpenAiParserTest, RefusalPartContributesItsText) {
  OpenAiRequestParser parser;
  Outcome o = Chat(parser, ChatBody(R"([{"role":"assistant","content":[{"type":"refusal","refusal":"I can't."},)"
                                    R"({"type":"text","text":"Sorry"}]}])"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, Msg("assistant", "I can't.\x1dSorry"));
}

// An image part contributes U+001A followed by 16 lowercase hex digits.
TEST(OpenAiParserTest, ImagePartContributesOpaqueDigest) {
  OpenAiRequestParser parser;
  Outcome o =
      Chat(parser, ChatBody(R"([{"role":"user","content":[{"type":"text","text":"look"},)"
                            R"({"type":"image_url","image_url":{"url":"https://x.test/a.png","detail":"high"}}]}])"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  const std::string head = "user\x1flook\x1d\x1a";
  ASSERT_EQ(o.text.size(), head.size() + 16 + 1) << o.text;
  EXPECT_EQ(o.text.substr(0, head.size()), head);
  EXPECT_TRUE(IsLowerHex(o.text.substr(head.size(), 16))) << o.text;
  EXPECT_EQ(o.text.back(), '\x1e');
}

// Different image URLs give different keys; the same image with reordered fields the same key.
TEST(OpenAiParserTest, ImageDigestDependsOnContentNotFieldOrder) {
  OpenAiRequestParser parser;
  Outcome a = Chat(
      parser,
      ChatBody(
          R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.test/a.png","detail":"high"}}]}])"));
  Outcome b = Chat(
      parser,
      ChatBody(
          R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x.test/b.png","detail":"high"}}]}])"));
  Outcome a_reordered = Chat(
      parser,
      ChatBody(
          R"([{"role":"user","content":[ { "image_url" : { "detail":"high", "url":"https:\/\/x.test\/a.png" }, "type":"image_url" } ]}])"));
  ASSERT_TRUE(a.ok() && b.ok() && a_reordered.ok());
  EXPECT_NE(a.key, b.key);
  EXPECT_NE(a.text, b.text);
  EXPECT_EQ(a.key, a_reordered.key);
  EXPECT_EQ(a.text, a_reordered.text);
}

// ----- formatting insensitivity -----

// Whitespace, field order and string escapes do not change the key; the text does.
TEST(OpenAiParserTest, FormattingDoesNotChangeTheKey) {
  OpenAiRequestParser parser;
  const std::string minified =
      R"({"model":"m","messages":[{"role":"system","content":"café a/b"},)"
      R"({"role":"user","content":[{"type":"text","text":"line1\nline2"},{"type":"text","text":"日"}]}],"temperature":0.5})";
  const std::string pretty = R"({
  "model": "m",
  "messages": [
    {
      "role": "system",
      "content": "café a/b"
    },
    {
      "role": "user",
      "content": [
        { "type": "text", "text": "line1\nline2" },
        { "type": "text", "text": "日" }
      ]
    }
  ],
  "temperature": 0.5
}
)";
  const std::string reordered =
      R"({"temperature":0.5,"messages":[{"content":"café a/b","role":"system"},)"
      R"({"content":[{"text":"line1\nline2","type":"text"},{"text":"日","type":"text"}],"role":"user"}],"model":"m"})";
  const std::string escaped =
      R"({"model":"m","messages":[{"role":"\u0073ystem","content":"caf\u00e9 a\/b"},)"
      R"({"role":"user","content":[{"type":"text","text":"line1\u000aline2"},{"type":"text","text":"\u65e5"}]}],"temperature":0.5})";
  Outcome base = Chat(parser, minified);
  ASSERT_TRUE(base.ok()) << base.status.ToString();
  EXPECT_EQ(base.text, Msg("system", "café a/b") + Msg("user", "line1\nline2\x1d日"));
  for (const std::string& body : {pretty, reordered, escaped}) {
    Outcome o = Chat(parser, body);
    ASSERT_TRUE(o.ok()) << o.status.ToString() << "\n" << body;
    EXPECT_EQ(o.key, base.key) << body;
    EXPECT_EQ(o.text, base.text) << body;
  }
  std::string changed = minified;
  changed.replace(changed.find("line2"), 5, "line3");
  Outcome c = Chat(parser, changed);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c.key, base.key);
}

// ----- characters, not bytes -----

// With multibyte characters at the cut, exactly prefix_length whole code points are keyed.
TEST(OpenAiParserTest, PrefixIsCountedInCodePointsAtMultibyteCut) {
  OpenAiRequestParser parser;
  // Shifting the content by 0..3 ASCII characters puts each character width at the cut.
  for (size_t shift = 0; shift < 4; ++shift) {
    const std::string content = std::string(shift, 'x') + MixedText(3000);
    const std::string full = Msg("user", content);
    Outcome o = Chat(parser, UserMessage(content));
    ASSERT_TRUE(o.ok()) << o.status.ToString();
    EXPECT_EQ(o.prefix_units, kPrefix) << "shift " << shift;
    EXPECT_EQ(CodePoints(o.text), kPrefix) << "shift " << shift;
    EXPECT_EQ(o.text, FirstCodePoints(full, kPrefix)) << "shift " << shift;
    ASSERT_LT(o.text.size(), full.size());
    EXPECT_TRUE(IsLeadByte(full[o.text.size()])) << "cut inside a character, shift " << shift;
    EXPECT_GT(o.text.size(), kPrefix) << "multibyte text must take more bytes than characters";
  }
}

// Only the first prefix_length characters matter: character 1023 (0-based) does, 1024 not.
TEST(OpenAiParserTest, KeyDependsOnlyOnFirstPrefixLengthCharacters) {
  OpenAiRequestParser parser;
  const std::string content = MixedText(3000);
  const size_t role_chars = CodePoints("user\x1f");  // the content starts after these
  const std::string last_keyed = ReplaceCodePoint(content, kPrefix - 1 - role_chars, "Z");
  const std::string first_unkeyed = ReplaceCodePoint(content, kPrefix - role_chars, "Z");
  const std::string far_after = ReplaceCodePoint(content, 2000, "\xe2\x82\xac") + "tail";
  const std::string early = ReplaceCodePoint(content, 10, "Z");

  Outcome base = Chat(parser, UserMessage(content));
  ASSERT_TRUE(base.ok());
  EXPECT_NE(Chat(parser, UserMessage(last_keyed)).key, base.key);
  EXPECT_NE(Chat(parser, UserMessage(early)).key, base.key);
  EXPECT_EQ(Chat(parser, UserMessage(first_unkeyed)).key, base.key);
  EXPECT_EQ(Chat(parser, UserMessage(far_after)).key, base.key);
  // Extra messages after the cut do not matter either.
  const std::string two = ChatBody(std::string(R"([{"role":"user","content":")") + content +
                                   R"("},{"role":"assistant","content":"more"}])");
  EXPECT_EQ(Chat(parser, two).key, base.key);
}

// A text shorter than prefix_length is keyed whole.
TEST(OpenAiParserTest, ShortTextIsKeyedWhole) {
  OpenAiRequestParser parser;
  const std::string content = "h\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80!";  // h é 日 😀 !
  Outcome o = Chat(parser, UserMessage(content));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.text, Msg("user", content));
  EXPECT_EQ(o.prefix_units, 4u + 1u + 5u + 1u);
  EXPECT_EQ(o.prefix_units, CodePoints(o.text));
}

// The prefix can end exactly at the end of the text (prefix_length == text length).
TEST(OpenAiParserTest, TextOfExactlyPrefixLengthIsKeyedWhole) {
  OpenAiRequestParser parser;
  const std::string content = MixedText(kPrefix - CodePoints("user\x1f\x1e"));
  Outcome o = Chat(parser, UserMessage(content));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.text, Msg("user", content));
  EXPECT_EQ(o.prefix_units, kPrefix);
  Outcome longer = Chat(parser, UserMessage(content + "x"));
  ASSERT_TRUE(longer.ok());
  EXPECT_NE(longer.key, o.key);  // the U+001E is keyed in one, "x" in the other
}

// ----- prompt_cache_key -----

// Different prompt_cache_key values give different keys for the same messages.
TEST(OpenAiParserTest, PromptCacheKeySeparatesGroups) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hello"}])";
  Outcome a = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":"tenant-a")"));
  Outcome a2 = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":"tenant-a")"));
  Outcome b = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":"tenant-b")"));
  Outcome none = Chat(parser, ChatBody(messages));
  ASSERT_TRUE(a.ok() && a2.ok() && b.ok() && none.ok());
  EXPECT_EQ(a.key, a2.key);
  EXPECT_NE(a.key, b.key);
  EXPECT_NE(a.key, none.key);
  EXPECT_EQ(a.text, none.text);  // the group is not part of the keyed text
  EXPECT_EQ(a.routing_group, "tenant-a");
  EXPECT_EQ(b.routing_group, "tenant-b");
  EXPECT_EQ(none.routing_group, "");
}

// Null, absent and empty prompt_cache_key all mean no group.
TEST(OpenAiParserTest, NullOrEmptyPromptCacheKeyMeansNoGroup) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hello"}])";
  Outcome absent = Chat(parser, ChatBody(messages));
  Outcome null_key = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":null)"));
  Outcome empty = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":"")"));
  ASSERT_TRUE(absent.ok() && null_key.ok() && empty.ok());
  EXPECT_EQ(null_key.key, absent.key);
  EXPECT_EQ(empty.key, absent.key);
  EXPECT_EQ(null_key.routing_group, "");
  EXPECT_EQ(empty.routing_group, "");
}

// A prompt_cache_key that is not a string or null is rejected, naming the field.
TEST(OpenAiParserTest, NonStringPromptCacheKeyIsInvalid) {
  OpenAiRequestParser parser;
  for (std::string_view v : {"42", "true", "{}", "[\"a\"]"}) {
    Outcome o = Chat(parser, ChatBody(R"([{"role":"user","content":"hi"}])",
                                      std::string(R"(,"prompt_cache_key":)") + std::string(v)));
    ExpectInvalid(o, v);
    EXPECT_NE(o.status.message().find("prompt_cache_key"), std::string::npos) << o.status.message();
  }
}

// prompt_cache_key may hold up to 1,024 bytes; one more is rejected.
TEST(OpenAiParserTest, PromptCacheKeyLengthLimit) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hi"}])";
  const std::string at_limit(kMaxPromptCacheKeyBytes, 'k');
  const std::string over_limit(kMaxPromptCacheKeyBytes + 1, 'k');
  Outcome ok = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":")" + at_limit + "\""));
  ASSERT_TRUE(ok.ok()) << ok.status.ToString();
  EXPECT_EQ(ok.routing_group, at_limit);
  Outcome over = Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":")" + over_limit + "\""));
  ExpectInvalid(over, "1025-byte prompt_cache_key");
  EXPECT_NE(over.status.message().find("prompt_cache_key"), std::string::npos);
  // The limit is in bytes: 513 two-byte characters are 1,026 bytes.
  std::string multibyte;
  for (int i = 0; i < 513; ++i) multibyte += "\xc3\xa9";
  ExpectInvalid(Chat(parser, ChatBody(messages, R"(,"prompt_cache_key":")" + multibyte + "\"")),
                "1026-byte multibyte prompt_cache_key");
}

// The routing group is the unescaped value, and the field may come before or after messages.
TEST(OpenAiParserTest, PromptCacheKeyValueAndPositionDoNotMatter) {
  OpenAiRequestParser parser;
  Outcome after =
      Chat(parser, R"({"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"g\"1\u00e9"})");
  Outcome before =
      Chat(parser, R"({"prompt_cache_key":"g\"1é","model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(after.ok() && before.ok());
  EXPECT_EQ(after.routing_group, "g\"1\xc3\xa9");
  EXPECT_EQ(before.routing_group, "g\"1\xc3\xa9");
  EXPECT_EQ(after.key, before.key);
}

// ----- model and stream -----

// model becomes served_name and stream is read as true, false or null (= false).
TEST(OpenAiParserTest, ReadsModelAndStream) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hi"}])";
  struct Case {
    std::string extra;
    bool stream;
  };
  for (const Case& c : {Case{R"(,"stream":true)", true}, Case{R"(,"stream":false)", false},
                        Case{R"(,"stream":null)", false}, Case{"", false}}) {
    Outcome o = Chat(parser, R"({"model":"llama-3\/lora-a","messages":)" + messages + c.extra + "}");
    ASSERT_TRUE(o.ok()) << o.status.ToString() << c.extra;
    EXPECT_EQ(o.served_name, "llama-3/lora-a");
    EXPECT_EQ(o.stream, c.stream) << c.extra;
  }
  Outcome first = Chat(parser, R"({"stream":true,"messages":)" + messages + R"(,"model":"m2"})");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first.stream);
  EXPECT_EQ(first.served_name, "m2");
}

// The model does not change the key (it selects the pool, not the prefix).
TEST(OpenAiParserTest, ModelIsNotPartOfTheKey) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hi"}])";
  Outcome a = Chat(parser, R"({"model":"a","messages":)" + messages + "}");
  Outcome b = Chat(parser, R"({"model":"b","messages":)" + messages + "}");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.key, b.key);
}

// A missing or non-string model is InvalidArgument naming "model".
TEST(OpenAiParserTest, ModelIsRequiredAndAString) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hi"}])";
  Outcome missing = Chat(parser, R"({"messages":)" + messages + "}");
  ExpectInvalid(missing, "missing model");
  EXPECT_NE(missing.status.message().find("model"), std::string::npos) << missing.status.message();
  for (std::string_view v : {"5", "null", "true", "[\"m\"]", "{}"}) {
    Outcome o = Chat(parser, R"({"model":)" + std::string(v) + R"(,"messages":)" + messages + "}");
    ExpectInvalid(o, v);
    EXPECT_NE(o.status.message().find("model"), std::string::npos) << o.status.message();
  }
  Outcome missing_completion = Completion(parser, R"({"prompt":"hi"})");
  ExpectInvalid(missing_completion, "completion without model");
  EXPECT_NE(missing_completion.status.message().find("model"), std::string::npos);
}

// stream must be a boolean or null.
TEST(OpenAiParserTest, NonBooleanStreamIsInvalid) {
  OpenAiRequestParser parser;
  for (std::string_view v : {"1", "\"true\"", "[]"}) {
    Outcome o =
        Chat(parser, ChatBody(R"([{"role":"user","content":"hi"}])", std::string(R"(,"stream":)") + std::string(v)));
    ExpectInvalid(o, v);
    EXPECT_NE(o.status.message().find("stream"), std::string::npos) << o.status.message();
  }
}

// ----- completions -----

// A string prompt is keyed as is.
TEST(OpenAiParserTest, CompletionStringPrompt) {
  OpenAiRequestParser parser;
  Outcome o = Completion(parser, CompletionBody(R"("Once upon a time, caf\u00e9")"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.api, ApiKind::kCompletions);
  EXPECT_EQ(o.text, "Once upon a time, caf\xc3\xa9");
  EXPECT_EQ(o.prefix_units, 22u);
}

// An array of strings is joined by U+001E.
TEST(OpenAiParserTest, CompletionStringArrayPrompt) {
  OpenAiRequestParser parser;
  Outcome o = Completion(parser, CompletionBody(R"(["first","second","third"])"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, "first\x1esecond\x1ethird");
  Outcome one = Completion(parser, CompletionBody(R"(["only"])"));
  Outcome str = Completion(parser, CompletionBody(R"("only")"));
  ASSERT_TRUE(one.ok() && str.ok());
  EXPECT_EQ(one.key, str.key);
}

// Token ids are rendered as decimal numbers separated by spaces.
TEST(OpenAiParserTest, CompletionTokenIdPrompt) {
  OpenAiRequestParser parser;
  Outcome o = Completion(parser, CompletionBody("[1, 2, 3]"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, "1 2 3");
  Outcome big = Completion(parser, CompletionBody("[0,128000,4294967296]"));
  ASSERT_TRUE(big.ok()) << big.status.ToString();
  EXPECT_EQ(big.text, "0 128000 4294967296");
}

// An array of token-id arrays is joined by U+001E.
TEST(OpenAiParserTest, CompletionTokenIdBatchPrompt) {
  OpenAiRequestParser parser;
  Outcome o = Completion(parser, CompletionBody("[[1,2,3],[4],[50,60]]"));
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text,
            "1 2 3\x1e"
            "4\x1e"
            "50 60");
}

// An empty prompt array, a missing prompt and invalid elements are InvalidArgument.
TEST(OpenAiParserTest, CompletionInvalidPrompts) {
  OpenAiRequestParser parser;
  ExpectInvalid(Completion(parser, CompletionBody("[]")), "empty array");
  ExpectInvalid(Completion(parser, R"({"model":"m"})"), "missing prompt");
  for (std::string_view prompt : {"5", "null", "true", "{}", "[true]", "[null]", "[{}]", "[1.5]", "[-1]", "[1,-2]",
                                  "[[1,-2]]", "[[\"a\"]]", "[1e999999]"}) {
    Outcome o = Completion(parser, CompletionBody(prompt));
    ExpectInvalid(o, prompt);
    EXPECT_NE(o.status.message().find("prompt"), std::string::npos) << prompt << ": " << o.status.message();
  }
}

// A chat body is not a completion body and vice versa: each API requires its own field.
TEST(OpenAiParserTest, EachApiRequiresItsTextField) {
  OpenAiRequestParser parser;
  ExpectInvalid(Chat(parser, CompletionBody("\"hi\"")), "chat without messages");
  ExpectInvalid(Completion(parser, ChatBody(R"([{"role":"user","content":"hi"}])")), "completion without prompt");
}

// ----- malformed input -----

// Bodies that are not a well-formed request object are InvalidArgument.
TEST(OpenAiParserTest, MalformedBodiesAreInvalidArgument) {
  OpenAiRequestParser parser;
  const std::vector<std::string> bodies = {
      "",
      " ",
      "null",
      "42",
      "\"text\"",
      "[]",
      R"([{"model":"m","messages":[{"role":"user","content":"hi"}]}])",
      "{",
      "}",
      "{}",
      R"({"model":"m",})",
      R"({"model" "m","messages":[]})",
      R"({model:"m","messages":[{"role":"user","content":"hi"}]})",
      R"({'model':'m'})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"},]})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}] "x":1})",
      R"({"model":"m","messages":[{"role":"user","content":"hi\q"}]})",
      R"({"model":"m","messages":[{"role":"user","content":"hi\ud800"}]})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":tru})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":nul})",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":nul})",
      R"({"model":"m","messages":[{"role":"user","content":nul}]})",
      R"({"model":"m","messages":[{"role":"user","content":nonsense}]})",
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"b":tru}}]}]})",
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"n":nul}}]}]})",
      std::string("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x01\"}]}"),
      ChatBody(R"([{"role":"user","content":"a"}])") + std::string(1, '\0'),
  };
  for (const std::string& body : bodies) {
    ExpectInvalid(Chat(parser, body), body);
  }
}

// Every strict prefix of a valid body is rejected, and none crashes.
TEST(OpenAiParserTest, TruncatedBodiesAreRejected) {
  OpenAiRequestParser parser;
  const std::string chat =
      R"({"model":"m","stream":true,"prompt_cache_key":"g","temperature":-1.25e-3,"messages":[)"
      R"({"role":"system","content":"caf\u00e9 \"q\" \/ 日😀"},{"role":"user","content":[)"
      R"({"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u","detail":"low"}}]},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"x","n":[1,2.5,true,false,null]}]}],)"
      R"("metadata":{"a":[{},[]]}})";
  ASSERT_TRUE(Chat(parser, chat).ok()) << Chat(parser, chat).status.ToString();
  for (size_t n = 0; n < chat.size(); ++n) {
    ExpectInvalid(Chat(parser, std::string_view(chat).substr(0, n)), "chat prefix " + std::to_string(n));
  }
  const std::string completion = R"({"model":"m","prompt":[[1,22,333],[4]],"max_tokens":16})";
  ASSERT_TRUE(Completion(parser, completion).ok());
  for (size_t n = 0; n < completion.size(); ++n) {
    ExpectInvalid(Completion(parser, std::string_view(completion).substr(0, n)),
                  "completion prefix " + std::to_string(n));
  }
}

// Anything but whitespace after the request object is rejected.
TEST(OpenAiParserTest, TrailingGarbageIsRejected) {
  OpenAiRequestParser parser;
  const std::string body = ChatBody(R"([{"role":"user","content":"hi"}])");
  ASSERT_TRUE(Chat(parser, body + " \n\t\r").ok());
  for (std::string_view tail : {"x", " x", "}", "]", ",", "{}", "[]", "1", "\"s\"", "null", R"({"model":"m"})"}) {
    ExpectInvalid(Chat(parser, body + std::string(tail)), tail);
  }
}

// Invalid UTF-8 anywhere in a string is rejected, even in a field that is not read.
TEST(OpenAiParserTest, InvalidUtf8IsRejected) {
  OpenAiRequestParser parser;
  for (std::string_view bad : {"\xc3\x28", "\xff", "\xc3", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80"}) {
    const std::string s(bad);
    ExpectInvalid(Chat(parser, UserMessage("ok " + s)), "content");
    ExpectInvalid(Chat(parser, ChatBody(R"([{"role":"user","content":"hi"}])", R"(,"user":"x)" + s + "\"")),
                  "skipped field");
    ExpectInvalid(Chat(parser, ChatBody(R"([{"role":"user","content":"hi"}])", R"(,"k)" + s + R"(":1)")), "key");
    ExpectInvalid(Completion(parser, CompletionBody("\"" + s + "\"")), "prompt");
  }
}

// Malformed scalars the parser skips unread (On-Demand does not validate them) never crash.
TEST(OpenAiParserTest, MalformedScalarsInSkippedFieldsDoNotCrash) {
  OpenAiRequestParser parser;
  for (std::string_view v : {"tru", "nul", "01", "-", "1.", "1e", "+1"}) {
    Outcome o = Chat(parser, ChatBody(R"([{"role":"user","content":"hi"}])", R"(,"temperature":)" + std::string(v)));
    if (!o.ok()) ExpectInvalid(o, v);
    // Numbers in opaque parts are digested by their text, unparsed.
    Outcome part =
        Chat(parser, ChatBody(R"([{"role":"user","content":[{"type":"file","file":{"n":)" + std::string(v) + "}}]}]"));
    if (!part.ok()) ExpectInvalid(part, v);
  }
}

// Deep nesting in a field that is skipped never crashes (skipping does not recurse).
TEST(OpenAiParserTest, DeepNestingInSkippedFieldsDoesNotCrash) {
  OpenAiRequestParser parser;
  const std::string messages = R"([{"role":"user","content":"hi"}])";
  for (size_t depth : {100, 10000}) {
    Outcome after = Chat(parser, ChatBody(messages, R"(,"metadata":)" + Nested(depth)));
    if (!after.ok()) ExpectInvalid(after, "after messages");
    Outcome before = Chat(parser, R"({"metadata":)" + Nested(depth) + R"(,"model":"m","messages":)" + messages + "}");
    if (!before.ok()) ExpectInvalid(before, "before messages");
    Outcome in_message =
        Chat(parser, ChatBody(R"([{"role":"user","content":"hi","tool_calls":)" + Nested(depth) + "}]"));
    if (!in_message.ok()) ExpectInvalid(in_message, "inside a message");
  }
  // Unbalanced deep nesting is still malformed.
  ExpectInvalid(Chat(parser, ChatBody(messages, R"(,"metadata":)" + std::string(10000, '['))), "unclosed deep nesting");
}

// Non-text parts are digested recursively: nesting past the depth limit is an error, not a crash.
TEST(OpenAiParserTest, DeepNestingInDigestedPartsIsBounded) {
  OpenAiRequestParser parser;
  auto part = [](size_t depth) {
    return ChatBody(R"([{"role":"user","content":[{"type":"image_url","image_url":)" + Nested(depth) + "}]}]");
  };
  EXPECT_TRUE(Chat(parser, part(10)).ok());
  for (size_t depth = 50; depth <= 80; ++depth) {
    Outcome o = Chat(parser, part(depth));
    if (!o.ok()) ExpectInvalid(o, "depth " + std::to_string(depth));
  }
  ExpectInvalid(Chat(parser, part(10000)), "10,000 levels inside an image part");
  ExpectInvalid(Chat(parser, part(200000)), "200,000 levels inside an image part");
  ExpectInvalid(Completion(parser, CompletionBody(Nested(10000))), "10,000 levels in a prompt");
}

// A huge number in a skipped field or in a digested part is harmless.
TEST(OpenAiParserTest, HugeNumbersDoNotCrash) {
  OpenAiRequestParser parser;
  Outcome skipped = Chat(parser, ChatBody(R"([{"role":"user","content":"hi"}])",
                                          R"(,"temperature":1e999999,"seed":123456789012345678901234567890)"));
  if (!skipped.ok()) ExpectInvalid(skipped, "huge number in skipped field");
  Outcome in_part =
      Chat(parser,
           ChatBody(R"([{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","n":1e999999}}]}])"));
  if (!in_part.ok()) ExpectInvalid(in_part, "huge number in an opaque part");
}

// Wrong shapes of messages and their fields are InvalidArgument.
TEST(OpenAiParserTest, InvalidMessagesAreRejected) {
  OpenAiRequestParser parser;
  const std::vector<std::string> messages = {
      R"("hi")",
      R"({"role":"user","content":"hi"})",
      "null",
      "[]",
      R"(["hi"])",
      R"([[]])",
      R"([{"content":"hi"}])",
      R"([{"role":5,"content":"hi"}])",
      R"([{"role":null,"content":"hi"}])",
      R"([{"role":"user","content":5}])",
      R"([{"role":"user","content":true}])",
      R"([{"role":"user","content":{"type":"text","text":"hi"}}])",
      R"([{"role":"user","content":[{"text":"hi"}]}])",
      R"([{"role":"user","content":[{"type":5,"text":"hi"}]}])",
      R"([{"role":"user","content":["hi"]}])",
      R"([{"role":"user","content":[{"type":"text"}]}])",
      R"([{"role":"user","content":[{"type":"text","text":5}]}])",
      R"([{"role":"assistant","content":[{"type":"refusal"}]}])",
      R"([{"role":"user","content":"ok"},{"content":"second has no role"}])",
  };
  for (const std::string& m : messages) {
    Outcome o = Chat(parser, ChatBody(m));
    ExpectInvalid(o, m);
    EXPECT_NE(o.status.message().find("messages"), std::string::npos) << m << ": " << o.status.message();
  }
}

// A body with two "messages" fields is ambiguous and rejected.
TEST(OpenAiParserTest, DuplicateMessagesFieldIsRejected) {
  OpenAiRequestParser parser;
  Outcome o = Chat(parser, R"({"model":"m","messages":[{"role":"user","content":"a"}],)"
                           R"("messages":[{"role":"user","content":"b"}]})");
  ExpectInvalid(o, "duplicate messages");
  EXPECT_NE(o.status.message().find("messages"), std::string::npos);
  ExpectInvalid(Completion(parser, R"({"model":"m","prompt":"a","prompt":"b"})"), "duplicate prompt");
}

// ----- padding and reuse -----

// A body passed with 64 readable spare bytes parses exactly like a copied one.
TEST(OpenAiParserTest, PaddedBodyGivesSameResult) {
  OpenAiRequestParser parser;
  const std::vector<std::string> bodies = {
      ChatBody(R"([{"role":"user","content":"caf\u00e9 日"}])", R"(,"prompt_cache_key":"g","stream":true)"),
      ChatBody(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}])"),
      CompletionBody("[[1,2],[3]]"),
      CompletionBody("123"),
      UserMessage(MixedText(2000)),
  };
  for (const std::string& body : bodies) {
    const ApiKind api =
        body.find("\"prompt\"") != std::string::npos ? ApiKind::kCompletions : ApiKind::kChatCompletions;
    // Spare bytes filled with JSON-looking garbage must not be read as part of the body.
    std::string buffer = body + std::string(kBodyPadding, '}');
    Outcome copied = ParseBody(parser, api, body);
    Outcome padded = ParseBody(parser, api, std::string_view(buffer.data(), body.size()), kPrefix, true);
    EXPECT_EQ(padded.ok(), copied.ok()) << body;
    EXPECT_EQ(padded.status.code(), copied.status.code()) << body;
    EXPECT_EQ(padded.key, copied.key) << body;
    EXPECT_EQ(padded.text, copied.text) << body;
    EXPECT_EQ(padded.prefix_units, copied.prefix_units) << body;
    EXPECT_EQ(padded.served_name, copied.served_name) << body;
    EXPECT_EQ(padded.routing_group, copied.routing_group) << body;
    EXPECT_EQ(padded.stream, copied.stream) << body;
  }
}

// Truncated bodies are rejected on the padded path too, whatever the spare bytes hold.
TEST(OpenAiParserTest, PaddedTruncatedBodiesAreRejected) {
  OpenAiRequestParser parser;
  const std::string body = ChatBody(R"([{"role":"user","content":[{"type":"text","text":"a"}]}])");
  for (size_t n = 0; n < body.size(); ++n) {
    // The spare bytes hold the rest of the body and more, so only the length tells them apart.
    std::string buffer = body.substr(0, n) + body.substr(n) + std::string(kBodyPadding, ' ');
    ExpectInvalid(ParseBody(parser, ApiKind::kChatCompletions, std::string_view(buffer.data(), n), kPrefix, true),
                  "padded prefix " + std::to_string(n));
  }
}

// Parsing A, then B, then A again gives A's key both times: no state leaks between calls.
TEST(OpenAiParserTest, ParserReuseDoesNotLeakState) {
  OpenAiRequestParser parser;
  const std::string a = ChatBody(R"([{"role":"user","content":"request A"}])", R"(,"stream":true)");
  const std::string b =
      ChatBody(R"([{"role":"user","content":")" + MixedText(3000) + R"("},{"role":"assistant","content":"B"}])",
               R"(,"prompt_cache_key":"group-b")");
  Outcome a1 = Chat(parser, a);
  Outcome b1 = Chat(parser, b);
  Outcome bad = Chat(parser, b.substr(0, b.size() / 2));
  Outcome a2 = Chat(parser, a);
  ASSERT_TRUE(a1.ok() && b1.ok() && a2.ok());
  ExpectInvalid(bad, "truncated B");
  EXPECT_NE(a1.key, b1.key);
  EXPECT_EQ(a1.key, a2.key);
  EXPECT_EQ(a1.text, a2.text);
  EXPECT_EQ(a1.prefix_units, a2.prefix_units);
  EXPECT_EQ(a2.routing_group, "");
  EXPECT_TRUE(a2.stream);
  // A completion between two chats does not change them either.
  Completion(parser, CompletionBody("[1,2,3]"));
  EXPECT_EQ(Chat(parser, a).key, a1.key);
}

// RouteRequestFor carries the parsed served name and key to the core.
TEST(OpenAiParserTest, RouteRequestCarriesServedNameAndKey) {
  OpenAiRequestParser parser;
  const std::string body = ChatBody(R"([{"role":"user","content":"hi"}])", R"(,"prompt_cache_key":"g\u00e9")");
  auto r = parser.Parse(ApiKind::kChatCompletions, body, kPrefix);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->served_name, "m");
  EXPECT_EQ(r->routing_group, "g\xc3\xa9");
  const RouteRequest route = RouteRequestFor(*r);
  EXPECT_EQ(route.served_name, "m");
  EXPECT_EQ(route.key, r->key);
}

// ------------------------------------------------------------------------------- responses

Outcome Responses(OpenAiRequestParser& parser, std::string_view body, uint32_t prefix_length = kPrefix) {
  return ParseBody(parser, ApiKind::kResponses, body, prefix_length);
}

// Instructions, then a string input: the instructions' text, U+001E, the input.
TEST(ResponsesParserTest, InstructionsThenStringInput) {
  OpenAiRequestParser parser;
  const Outcome o = Responses(parser, R"({"model":"m","instructions":"Be brief.","input":"Hello","stream":true})");
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.api, ApiKind::kResponses);
  EXPECT_EQ(o.served_name, "m");
  EXPECT_TRUE(o.stream);
  EXPECT_EQ(o.text, "Be brief.\x1eHello");
}

// The instructions come first in the key even when the body lists input first.
TEST(ResponsesParserTest, InstructionsComeFirstWhateverTheFieldOrder) {
  OpenAiRequestParser parser;
  const Outcome a = Responses(parser, R"({"model":"m","instructions":"sys","input":"u"})");
  const Outcome b = Responses(parser, R"({"input":"u","model":"m","instructions":"sys"})");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status.ToString();
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.key, b.key);
}

// Message items are keyed like chat messages, with input_text and output_text parts as text;
// a string content equals one input_text part.
TEST(ResponsesParserTest, MessageItemsAreKeyedLikeChatMessages) {
  OpenAiRequestParser parser;
  const Outcome o = Responses(parser, R"({"model":"m","input":[
      {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
      {"role":"assistant","content":[{"type":"output_text","text":"c"}]},
      {"role":"user","content":"d"}]})");
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, Msg("user",
                        "a\x1d"
                        "b") +
                        Msg("assistant", "c") + Msg("user", "d"));
  const Outcome single =
      Responses(parser, R"({"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"d"}]}]})");
  const Outcome string = Responses(parser, R"({"model":"m","input":[{"role":"user","content":"d"}]})");
  EXPECT_EQ(single.key, string.key);
}

// Items without a role (tool calls and their outputs) and non-text parts key by a digest, so
// that different calls give different keys.
TEST(ResponsesParserTest, NonMessageItemsAndImagesAreDigested) {
  OpenAiRequestParser parser;
  const Outcome a =
      Responses(parser, R"({"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":"42"}]})");
  const Outcome b =
      Responses(parser, R"({"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":"43"}]})");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status.ToString();
  EXPECT_EQ(a.text.size(), 18u);
  EXPECT_EQ(a.text[0], '\x1a');
  EXPECT_NE(a.key, b.key);
  const Outcome image = Responses(
      parser, R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:x"}]}]})");
  ASSERT_TRUE(image.ok()) << image.status.ToString();
  EXPECT_EQ(image.text.substr(0, 6), "user\x1f\x1a");
}

// Null instructions and absent input are allowed; prompt_cache_key groups as on chat.
TEST(ResponsesParserTest, OptionalFieldsAndGroup) {
  OpenAiRequestParser parser;
  const Outcome o = Responses(parser, R"({"model":"m","instructions":null,"input":"x","prompt_cache_key":"g"})");
  ASSERT_TRUE(o.ok()) << o.status.ToString();
  EXPECT_EQ(o.text, "x");
  EXPECT_EQ(o.routing_group, "g");
  const Outcome only = Responses(parser, R"({"model":"m","instructions":"sys"})");
  ASSERT_TRUE(only.ok()) << only.status.ToString();
  EXPECT_EQ(only.text, "sys\x1e");
}

// Wrong types name the field; model is required; input may not appear twice.
TEST(ResponsesParserTest, InvalidBodiesNameTheField) {
  OpenAiRequestParser parser;
  auto message = [&](std::string_view body) { return Responses(parser, body).status.message(); };
  EXPECT_NE(message(R"({"model":"m","input":5})").find("input"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","instructions":3,"input":"x"})").find("instructions"), std::string::npos);
  EXPECT_NE(message(R"({"input":"x"})").find("model"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","input":"x","input":"y"})").find("twice"), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","input":[{"role":"user","content":7}]})").find("input[0].content"),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","input":[3]})").find("input[0]"), std::string::npos);
}

// The prefix is cut at prefix_length characters over instructions and input together.
TEST(ResponsesParserTest, PrefixSpansInstructionsAndInput) {
  OpenAiRequestParser parser;
  const std::string sys(kPrefix - 1, 's');
  const Outcome a = Responses(parser, R"({"model":"m","instructions":")" + sys + R"(","input":"first"})");
  const Outcome b = Responses(parser, R"({"model":"m","instructions":")" + sys + R"(","input":"other"})");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.prefix_units, kPrefix);
  EXPECT_EQ(a.key, b.key);  // U+001E is the last keyed character
}

// Embeddings, tokenize and detokenize read `model` only (required for embeddings).
TEST(ResponsesParserTest, ModelOnlyApis) {
  OpenAiRequestParser parser;
  const Outcome e = ParseBody(parser, ApiKind::kEmbeddings, R"({"input":["a","b"],"model":"emb"})");
  ASSERT_TRUE(e.ok()) << e.status.ToString();
  EXPECT_EQ(e.served_name, "emb");
  EXPECT_EQ(e.prefix_units, 0u);
  EXPECT_FALSE(ParseBody(parser, ApiKind::kEmbeddings, R"({"input":"a"})").ok());
  const Outcome t = ParseBody(parser, ApiKind::kTokenize, R"({"prompt":"hi"})");
  ASSERT_TRUE(t.ok()) << t.status.ToString();
  EXPECT_EQ(t.served_name, "");
  const Outcome d = ParseBody(parser, ApiKind::kDetokenize, R"({"model":"m","tokens":[1,2]})");
  ASSERT_TRUE(d.ok()) << d.status.ToString();
  EXPECT_EQ(d.served_name, "m");
  EXPECT_FALSE(ParseBody(parser, ApiKind::kTokenize, R"({"model":3})").ok());
  EXPECT_FALSE(ParseBody(parser, ApiKind::kTokenize, "[1]").ok());
}

}  // namespace
}  // namespace prefix_router::api
