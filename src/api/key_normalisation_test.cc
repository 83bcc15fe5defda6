#include "api/key_normalisation.h"

#include <gtest/gtest.h>

#include <string>

#include "api/native_request.h"
#include "api/openai_request.h"

namespace prefix_router::api {
namespace {

std::shared_ptr<const KeyNormaliser> Make(KeyNormalisation o) {
  auto r = KeyNormaliser::Create(o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : nullptr;
}

std::shared_ptr<const KeyNormaliser> Canonical(std::vector<std::string> fields = {},
                                               std::vector<std::string> patterns = {}) {
  return Make(KeyNormalisation{true, std::move(fields), std::move(patterns)});
}

std::string CanonicalText(const KeyNormaliser& n, std::string_view body, size_t limit = 1 << 20) {
  std::string out;
  EXPECT_TRUE(n.CanonicalNativePrefix(body, limit, out)) << body;
  return out;
}

PrefixKey NativeKey(std::string_view body, const KeyNormaliser* n, uint32_t prefix_length = 1024,
                    std::string* keyed = nullptr) {
  auto r = ParseNative(body, prefix_length, std::nullopt, std::nullopt, n, keyed);
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->key : PrefixKey{};
}

// The canonical form sorts members, drops whitespace and re-escapes strings one way.
TEST(KeyNormalisationTest, CanonicalFormIsSortedCompactAndUniformlyEscaped) {
  auto n = Canonical();
  EXPECT_EQ(CanonicalText(*n, R"( { "b" : [1, 2 ,{"z":1,"a":2}], "a":"x\/y\u0041\u00e9\n\u0001" } )"),
            "{\"a\":\"x/yA\xC3\xA9\\n\\u0001\",\"b\":[1,2,{\"a\":2,\"z\":1}]}");
  EXPECT_EQ(CanonicalText(*n, "[true,false,null,-0,-0.0,1.0,1e0,10E-1,0.70,-5,123456789012,1e21]"),
            "[true,false,null,0,0,1,1,1,0.7,-5,123456789012,1e+21]");
}

// Whitespace and member-order variants of one body give the same native key.
TEST(KeyNormalisationTest, WhitespaceAndOrderVariantsKeyAlike) {
  auto n = Canonical();
  const std::string doc(3000, 'd');
  const std::string a = R"({"inputs":")" + doc + R"(","parameters":{"max_new_tokens":64,"temperature":0.7}})";
  const std::string b =
      "{\n  \"parameters\": {\"temperature\": 0.70, \"max_new_tokens\": 64},\n  \"inputs\": \"" + doc + "\"\n}";
  EXPECT_NE(NativeKey(a, nullptr), NativeKey(b, nullptr));
  EXPECT_EQ(NativeKey(a, n.get()), NativeKey(b, n.get()));
  // A body already canonical keys as its raw bytes would.
  EXPECT_EQ(NativeKey(a, n.get()), NativeKey(a, nullptr));
}

// Excluded fields do not change the key; a change elsewhere within the prefix does.
TEST(KeyNormalisationTest, ExcludedFieldsDoNotChangeTheKey) {
  auto n = Canonical({"id", "created", "metadata.trace_id", "events.*.at"});
  const std::string doc(2000, 'd');
  auto body = [&](std::string id, std::string created, std::string trace, std::string at, std::string text) {
    return R"({"id":")" + id + R"(","created":)" + created + R"(,"metadata":{"trace_id":")" + trace +
           R"(","client":"c1"},"events":[{"e1":{"at":")" + at + R"(","k":1}}],"inputs":")" + text + doc + "\"}";
  };
  const PrefixKey k = NativeKey(body("r1", "100", "t1", "a1", "x"), n.get());
  EXPECT_EQ(k, NativeKey(body("r2", "200", "t2", "a2", "x"), n.get()));
  EXPECT_NE(k, NativeKey(body("r1", "100", "t1", "a1", "y"), n.get()));
  std::string keyed;
  NativeKey(body("r1", "100", "t1", "a1", "x"), n.get(), 4096, &keyed);
  EXPECT_EQ(keyed.substr(0, 40), R"({"events":[{"e1":{"k":1}}],"inputs":"xdd)");
  EXPECT_EQ(keyed.find("trace_id"), std::string::npos);
  EXPECT_NE(keyed.find(R"("metadata":{"client":"c1"})"), std::string::npos);
}

// A pattern removes matches from native string values in the canonical form.
TEST(KeyNormalisationTest, PatternsApplyToNativeStringValues) {
  auto n = Canonical({}, {R"(\d{4}-\d\d-\d\dT[0-9:.]+Z)"});
  EXPECT_EQ(CanonicalText(*n, R"({"inputs":"now 2026-11-30T04:03:37Z: doc"})"), R"({"inputs":"now : doc"})");
}

// Bodies that are not JSON, too deep or too large keep their raw-byte key.
TEST(KeyNormalisationTest, NonJsonBodiesFallBackToRawBytes) {
  auto n = Canonical();
  for (std::string body :
       {std::string("not json at all"), std::string(R"({"a":1)"), std::string(""), std::string("{\"a\":\"\xff\"}"),
        std::string(R"({"a":1} {"b":2})"), std::string(100, '[') + std::string(100, ']')}) {
    std::string out;
    EXPECT_FALSE(n->CanonicalNativePrefix(body, 1024, out)) << body;
    EXPECT_EQ(NativeKey(body, n.get()), NativeKey(body, nullptr)) << body;
  }
  // 64 levels is the limit: 60 still canonicalise.
  EXPECT_EQ(CanonicalText(*n, std::string(60, '[') + std::string(60, ']')),
            std::string(60, '[') + std::string(60, ']'));
}

// Output stops at prefix_length bytes, even inside a huge string or a wide object.
TEST(KeyNormalisationTest, StopsAtThePrefixLength) {
  auto n = Canonical();
  const std::string big(4 << 20, 'q');
  EXPECT_EQ(CanonicalText(*n, "{\"s\":\"" + big + "\"}", 1024), "{\"s\":\"" + std::string(1018, 'q'));
  std::string wide = "{";
  for (int i = 0; i < 20000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(19999 - i) + "\":" + std::to_string(i);
  wide += "}";
  const std::string out = CanonicalText(*n, wide, 1024);
  EXPECT_EQ(out.size(), 1024u);
  EXPECT_EQ(out.substr(0, 14), "{\"k0\":19999,\"k");
  // Control characters escape to six bytes; the cut can fall inside an escape.
  std::string controls = "\"";
  for (int i = 0; i < 300; ++i) controls += "\\u0001";
  EXPECT_EQ(CanonicalText(*n, controls + "\"", 1024).size(), 1024u);
  EXPECT_EQ(CanonicalText(*n, "[\"\\u0001\\u0001\"]", 10), "[\"\\u0001\\u");
}

// Duplicate keys keep document order among themselves; numbers beyond 64 bits still key.
TEST(KeyNormalisationTest, DuplicateKeysAndBigNumbers) {
  auto n = Canonical();
  EXPECT_EQ(CanonicalText(*n, R"({"b":1,"a":2,"b":0})"), R"({"a":2,"b":1,"b":0})");
  std::string out;
  const bool ok = n->CanonicalNativePrefix(R"({"a":123456789012345678901234567890})", 1024, out);
  if (ok) {
    EXPECT_EQ(out.substr(0, 5), R"({"a":)");  // as a double, or raw when not parsed
  }
}

// A large integral double keeps its exponent, so canonical text is canonical again (fuzz find:
// "73709551835173709551.35" gave the literal 73709551835173707776, which does not parse).
TEST(KeyNormalisationTest, LargeDoublesStayParseable) {
  auto n = Canonical();
  EXPECT_EQ(CanonicalText(*n, "[73709551835173709551.35,-1e19,9.3e18,9.123456789012345e18,1.5e300]"),
            "[7.370955183517371e+19,-1e+19,9.3e+18,9123456789012344832,1.5e+300]");
  for (const char* body : {"[73709551835173709551.35]", "[-9.3e18]", "{\"a\":1e20}"}) {
    std::string once, twice;
    ASSERT_TRUE(n->CanonicalNativePrefix(body, 1024, once)) << body;
    ASSERT_TRUE(n->CanonicalNativePrefix(once, 1024, twice)) << once;
    EXPECT_EQ(twice, once);
  }
}

// Bad settings are refused with the setting named.
TEST(KeyNormalisationTest, CreateRejectsBadSettings) {
  auto error = [](KeyNormalisation o) {
    auto r = KeyNormaliser::Create(o);
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_EQ(error({true, {"a", "b..c"}, {}}).rfind("exclude_fields[1]: 'b..c' has an empty segment", 0), 0u);
  EXPECT_EQ(error({true, {""}, {}}).rfind("exclude_fields[0]:", 0), 0u);
  EXPECT_EQ(error({false, {}, {"ok", "(unclosed"}}).rfind("exclude_patterns[1]: '(unclosed' is not a valid", 0), 0u);
  EXPECT_EQ(error({false, {}, {"x*"}}).rfind("exclude_patterns[0]: 'x*' matches the empty string", 0), 0u);
  EXPECT_EQ(error({false, {}, {R"(\d+)", "req-[0-9a-f]+"}}), "");
  EXPECT_EQ(error({true, {"*", "a.*.b"}, {}}), "");
}

PrefixKey ChatKey(OpenAiRequestParser& parser, std::string_view body, const KeyNormaliser* n,
                  std::string* text = nullptr) {
  auto r = parser.Parse(ApiKind::kChatCompletions, body, 1024, false, text, n);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.status().message());
  return r.ok() ? r->key : PrefixKey{};
}

// OpenAI: a pattern removes a timestamp from the system prompt; other text still counts.
TEST(KeyNormalisationTest, OpenAiPatternsRemoveDynamicText) {
  OpenAiRequestParser parser;
  auto n = Make(KeyNormalisation{false, {}, {R"(Current time: [0-9T:-]+Z\.)", "req-[0-9a-f]{8}"}});
  auto body = [](std::string time, std::string question) {
    return R"({"model":"m","messages":[{"role":"system","content":"Current time: )" + time + R"(. You are helpful. )" +
           std::string(1500, 's') + R"("},{"role":"user","content":[{"type":"text","text":"req-0123abcd )" + question +
           R"("}]}]})";
  };
  const PrefixKey a = ChatKey(parser, body("2026-11-30T04:03:37Z", "q"), n.get());
  EXPECT_EQ(a, ChatKey(parser, body("2026-11-30T05:00:00Z", "q"), n.get()));
  EXPECT_NE(ChatKey(parser, body("2026-11-30T04:03:37Z", "q"), nullptr),
            ChatKey(parser, body("2026-11-30T05:00:00Z", "q"), nullptr));
  std::string text;
  ChatKey(parser, body("2026-11-30T04:03:37Z", "q"), n.get(), &text);
  EXPECT_EQ(text.substr(0, 24), "system\x1f You are helpful.");
  // canonical_json and exclude_fields do nothing on the OpenAI API.
  auto fields = Canonical({"model", "messages"});
  EXPECT_EQ(ChatKey(parser, body("t", "q"), fields.get()), ChatKey(parser, body("t", "q"), nullptr));
  // A short request: patterns reach into later messages too.
  const std::string shorter = R"({"model":"m","messages":[{"role":"user","content":"a req-0123abcd b"}]})";
  ChatKey(parser, shorter, n.get(), &text);
  EXPECT_EQ(text,
            "user\x1f"
            "a  b\x1e");
}

// A pattern's scan is bounded by the key's budget plus the lookahead, whatever the text size.
TEST(KeyNormalisationTest, PatternScanStopsWhenTheKeyIsFull) {
  auto n = Make(KeyNormalisation{false, {}, {"ZZZ"}});
  struct Sink final : KeyTextSink {
    std::string got;
    size_t limit = 100;
    bool Append(std::string_view s) override {
      got.append(s.substr(0, limit - got.size()));
      return got.size() < limit;
    }
    size_t MaxBytesWanted() const override { return limit - got.size(); }
  } sink;
  n->AppendFiltered("abZZZcd" + std::string(10 << 20, 'e'), sink);
  EXPECT_EQ(sink.got, "abcd" + std::string(96, 'e'));
}

}  // namespace
}  // namespace prefix_router::api
