#include "api/native_request.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "api/request.h"
#include "core/prefix_key.h"
#include "core/status.h"

namespace prefix_router::api {
namespace {

constexpr uint32_t kPrefix = 1024;

// A native body of exactly `size` bytes: a JSON object padded with a repeating pattern.
std::string Body(size_t size) {
  std::string body = R"({"inputs":")";
  for (size_t i = 0; body.size() + 2 < size; ++i) body += static_cast<char>('a' + i % 26);
  body += "\"}";
  return body.substr(0, size);
}

PrefixKey KeyOf(std::string_view body, std::optional<std::string_view> group = std::nullopt) {
  auto r = ParseNative(body, kPrefix, group, std::nullopt);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->key : PrefixKey{};
}

void ExpectHeaderError(const Status& s, std::string_view what) {
  EXPECT_FALSE(s.ok()) << what;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
  EXPECT_NE(s.message().find(kRoutingGroupHeader), std::string::npos) << what << ": " << s.message();
}

// A native request is keyed on raw bytes: it is never parsed, not even as JSON.
TEST(NativeRequestTest, BodyIsNotParsed) {
  for (std::string_view body : {"", "not json", "{", "\xff\xfe", "[1,2"}) {
    auto r = ParseNative(body, kPrefix, std::nullopt, std::nullopt);
    ASSERT_TRUE(r.ok()) << body;
    EXPECT_EQ(r->api, ApiKind::kNative);
    EXPECT_FALSE(r->stream);
    EXPECT_EQ(r->served_name, "");
    EXPECT_EQ(r->routing_group, "");
  }
}

// Whitespace changes inside the first prefix_length bytes change the key.
TEST(NativeRequestTest, FormattingInsidePrefixChangesKey) {
  EXPECT_NE(KeyOf(R"({"inputs":"hello"})"), KeyOf(R"({"inputs": "hello"})"));
  EXPECT_NE(KeyOf(R"({"a":1,"b":2})"), KeyOf(R"({"b":2,"a":1})"));
  EXPECT_NE(KeyOf(R"({"inputs":"caf\u00e9"})"), KeyOf("{\"inputs\":\"caf\xc3\xa9\"}"));
}

// Exactly the first prefix_length bytes are keyed: byte 1023 (0-based) matters, byte 1024 not.
TEST(NativeRequestTest, KeysExactlyFirstPrefixLengthBytes) {
  const std::string body = Body(3000);
  std::string last_keyed = body;
  last_keyed[kPrefix - 1] = ' ';
  std::string first_unkeyed = body;
  first_unkeyed[kPrefix] = ' ';
  std::string appended = body + "  trailing bytes";
  const PrefixKey base = KeyOf(body);
  EXPECT_NE(KeyOf(last_keyed), base);
  EXPECT_EQ(KeyOf(first_unkeyed), base);
  EXPECT_EQ(KeyOf(appended), base);
  EXPECT_EQ(KeyOf(body.substr(0, kPrefix)), base);
  EXPECT_NE(KeyOf(body.substr(0, kPrefix - 1)), base);
}

// Bytes, not characters: a multibyte character straddling the cut is split.
TEST(NativeRequestTest, CutIsInBytesEvenInsideACharacter) {
  std::string body(kPrefix - 1, 'x');
  body += "\xe6\x97\xa5";  // 日 occupies bytes 1023..1025
  std::string other(kPrefix - 1, 'x');
  other += "\xe6\x9c\x88";  // 月 shares the first byte with 日
  auto r = ParseNative(body, kPrefix, std::nullopt, std::nullopt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prefix_units, kPrefix);
  EXPECT_EQ(KeyOf(body), KeyOf(other));
}

// prefix_units is min(body size, prefix_length).
TEST(NativeRequestTest, PrefixUnitsIsMinOfSizeAndPrefixLength) {
  for (size_t size : {0, 1, 10, 1023, 1024, 1025, 5000}) {
    auto r = ParseNative(Body(size), kPrefix, std::nullopt, std::nullopt);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->prefix_units, std::min<size_t>(size, kPrefix)) << size;
  }
  auto small = ParseNative(Body(100), 64, std::nullopt, std::nullopt);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->prefix_units, 64u);
}

// A body shorter than prefix_length is keyed whole: any byte change matters.
TEST(NativeRequestTest, ShortBodyIsKeyedWhole) {
  const std::string body = Body(200);
  std::string changed = body;
  changed[199] = '!';
  EXPECT_NE(KeyOf(body), KeyOf(changed));
  EXPECT_NE(KeyOf(body), KeyOf(body + " "));
}

// The key is the core's native prefix key of the body and group.
TEST(NativeRequestTest, KeyMatchesCoreNativePrefixKey) {
  const std::string body = Body(2000);
  EXPECT_EQ(KeyOf(body), NativePrefixKey(body, kPrefix, ""));
  EXPECT_EQ(KeyOf(body, "tenant-1"), NativePrefixKey(body, kPrefix, "tenant-1"));
}

// Absent header: no group. 1 to 64 printable ASCII characters (space and '~' included): ok.
TEST(NativeRequestTest, ValidRoutingGroupHeaders) {
  EXPECT_TRUE(ParseNative("b", kPrefix, std::nullopt, std::nullopt).ok());
  std::string printable;
  for (char c = 0x20; c <= 0x7E; ++c) printable += c;
  for (std::string_view g :
       {std::string_view("a"), std::string_view(" "), std::string_view("~"), std::string_view("tenant 42/~x"),
        std::string_view(printable).substr(0, 64), std::string_view(printable).substr(printable.size() - 64)}) {
    EXPECT_TRUE(ValidateRoutingGroupHeader(g).ok()) << g;
    auto r = ParseNative("body", kPrefix, g, std::nullopt);
    ASSERT_TRUE(r.ok()) << g;
    EXPECT_EQ(r->routing_group, g);
  }
  const std::string max(kMaxRoutingGroupLength, 'g');
  EXPECT_TRUE(ValidateRoutingGroupHeader(max).ok());
}

// Empty, too long, control characters and non-ASCII bytes are rejected, naming the header.
TEST(NativeRequestTest, InvalidRoutingGroupHeaders) {
  const std::string too_long(kMaxRoutingGroupLength + 1, 'g');
  for (std::string_view g :
       {std::string_view(""), std::string_view(too_long), std::string_view("a\rb"), std::string_view("a\n"),
        std::string_view("\x7f"), std::string_view("\t"), std::string_view("a\0b", 3), std::string_view("caf\xc3\xa9"),
        std::string_view("\x80"), std::string_view("\xff")}) {
    ExpectHeaderError(ValidateRoutingGroupHeader(g), g);
    auto r = ParseNative("body", kPrefix, g, std::nullopt);
    ASSERT_FALSE(r.ok()) << g;
    ExpectHeaderError(r.status(), g);
  }
}

// The inference component header becomes served_name; absent means the default pool.
TEST(NativeRequestTest, ComponentHeaderIsServedName) {
  auto with = ParseNative("body", kPrefix, std::nullopt, std::string_view("ic-llama-lora-7"));
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->served_name, "ic-llama-lora-7");
  EXPECT_EQ(RouteRequestFor(*with).served_name, "ic-llama-lora-7");
  auto without = ParseNative("body", kPrefix, std::nullopt, std::nullopt);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->served_name, "");
  // The pool does not change the key.
  EXPECT_EQ(with->key, without->key);
}

// Inference component names follow the managed service's rule: 1..63 of [a-zA-Z0-9-], a letter
// or digit at both ends; the error names the component.
TEST(NativeRequestTest, InferenceComponentNames) {
  const std::string longest(63, 'x');
  for (std::string_view ok : {std::string_view("a"), std::string_view("7"), std::string_view("ic-llama"),
                              std::string_view("IC-Llama-3-8b"), std::string_view("a--b"), std::string_view(longest)}) {
    EXPECT_TRUE(ValidateInferenceComponentName(ok).ok()) << ok;
  }
  const std::string too_long = longest + "y";
  for (std::string_view bad :
       {std::string_view(""), std::string_view("-a"), std::string_view("a-"), std::string_view("a_b"),
        std::string_view("a b"), std::string_view("a.b"), std::string_view("caf\xc3\xa9"), std::string_view("llama/7b"),
        std::string_view(too_long)}) {
    const Status s = ValidateInferenceComponentName(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("inference component"), std::string::npos) << s.message();
  }
}

// Different routing groups give different keys for the same body; the same group the same key.
TEST(NativeRequestTest, RoutingGroupSeparatesKeys) {
  const std::string body = Body(500);
  EXPECT_NE(KeyOf(body, "a"), KeyOf(body, "b"));
  EXPECT_NE(KeyOf(body, "a"), KeyOf(body));
  EXPECT_EQ(KeyOf(body, "a"), KeyOf(body, "a"));
  EXPECT_NE(KeyOf(body, "ab"), KeyOf(body, "a b"));
}

}  // namespace
}  // namespace prefix_router::api
