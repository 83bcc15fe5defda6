#include "base/json_text.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "base/utf8.h"

namespace prefix_router::base {
namespace {

// AppendJsonEscaped appends to what is there and escapes only what JSON requires.
TEST(JsonTextTest, EscapesOnlyWhatJsonRequires) {
  std::string out = "prefix:";
  AppendJsonEscaped(out, std::string_view("a\"b\\c\nd\x01\x1f/\xc3\xa9\b\f\x7f", 15));
  EXPECT_EQ(out, "prefix:a\\\"b\\\\c\\nd\\u0001\\u001f/\xc3\xa9\\b\\f\x7f");
  std::string empty;
  AppendJsonEscaped(empty, "");
  EXPECT_EQ(empty, "");
}

// JSON text must be UTF-8: invalid bytes become U+FFFD, valid characters pass as they are.
TEST(JsonTextTest, ReplacesInvalidUtf8) {
  std::string out;
  AppendJsonEscaped(out, "ok \xC3\xA9 bad \xFF\xC3 end\x01");
  EXPECT_EQ(out, "ok \xC3\xA9 bad \xEF\xBF\xBD\xEF\xBF\xBD end\\u0001");  // U+FFFD twice
}

// Whatever the bytes, the literal parses as JSON and reads back as the UTF-8-repaired input
// (long runs exercise the 8- and 16-byte ASCII scans at every alignment).
TEST(JsonTextTest, AnyBytesReadBackThroughAJsonParser) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string in;
    const int n = static_cast<int>(rng() % 80);
    for (int i = 0; i < n; ++i) {
      const unsigned r = rng() % 10;
      in += r < 7 ? static_cast<char>('a' + rng() % 26) : static_cast<char>(rng() % 256);
    }
    const std::string literal = JsonString(in);
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(literal, ec);
    ASSERT_FALSE(ec) << literal;
    std::string repaired;
    AppendValidUtf8(repaired, in);
    EXPECT_EQ(std::string_view(v.as_string()), repaired);
  }
}

// kKeep copies bytes >= 0x80 as they are, so a string escaped in pieces cut anywhere, even
// inside a character, comes out as the whole string escaped at once.
TEST(JsonTextTest, KeepEscapesPiecesLikeTheWhole) {
  const std::string text = "a\"\xC3\xA9\n\xE3\x81\x82\\\x01z";
  std::string whole;
  AppendJsonEscaped(whole, text, InvalidUtf8::kKeep);
  EXPECT_EQ(whole, "a\\\"\xC3\xA9\\n\xE3\x81\x82\\\\\\u0001z");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    std::string pieces;
    AppendJsonEscaped(pieces, std::string_view(text).substr(0, cut), InvalidUtf8::kKeep);
    AppendJsonEscaped(pieces, std::string_view(text).substr(cut), InvalidUtf8::kKeep);
    EXPECT_EQ(pieces, whole) << cut;
  }
  std::string invalid;
  AppendJsonEscaped(invalid, "\xFF", InvalidUtf8::kKeep);
  EXPECT_EQ(invalid, "\xFF");
}

// Numbers read back exactly; JSON has no NaN or infinity.
TEST(JsonTextTest, NumbersAreShortestAndExact) {
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(2048), "2048");
  EXPECT_EQ(JsonNumber(1e-7), "1e-07");
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const double v = std::ldexp(static_cast<double>(rng() >> 11), -static_cast<int>(rng() % 80));
    EXPECT_EQ(std::stod(JsonNumber(v)), v);
  }
}

}  // namespace
}  // namespace prefix_router::base
