#include "api/trace_context.h"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <string>

namespace prefix_router::api {
namespace {

// Ids of 1..128 printable ASCII characters are kept; empty, long or control characters are not.
TEST(TraceContextTest, RequestIdValidation) {
  EXPECT_TRUE(IsValidRequestId("a"));
  EXPECT_TRUE(IsValidRequestId("req 42/x:y~"));
  EXPECT_TRUE(IsValidRequestId(std::string(128, 'x')));
  EXPECT_FALSE(IsValidRequestId(""));
  EXPECT_FALSE(IsValidRequestId(std::string(129, 'x')));
  EXPECT_FALSE(IsValidRequestId("a\tb"));
  EXPECT_FALSE(IsValidRequestId("a\x7f"));
  EXPECT_FALSE(IsValidRequestId("caf\xc3\xa9"));
}

// Generated ids are UUIDv4 text: 8-4-4-4-12 lower-case hex, version 4, variant 10xx.
TEST(TraceContextTest, GeneratedIdsAreUuidV4) {
  const std::string id = FormatRequestId(0xFFFFFFFFFFFFFFFFULL, 0);
  ASSERT_EQ(id.size(), 36u);
  EXPECT_EQ(id, "ffffffff-ffff-4fff-8000-000000000000");
  EXPECT_EQ(FormatRequestId(0, 0xFFFFFFFFFFFFFFFFULL), "00000000-0000-4000-bfff-ffffffffffff");
  std::array<char, kRequestIdLength> text;
  EXPECT_EQ(FormatRequestId(0x0123456789abcdefULL, 0xfedcba9876543210ULL, text),
            FormatRequestId(0x0123456789abcdefULL, 0xfedcba9876543210ULL));
  EXPECT_EQ(FormatRequestId(0x0123456789abcdefULL, 0xfedcba9876543210ULL), "01234567-89ab-4def-bedc-ba9876543210");
  EXPECT_TRUE(IsValidRequestId(id));
  std::set<std::string> ids;
  for (uint64_t i = 0; i < 1000; ++i) ids.insert(FormatRequestId(i * 0x9E3779B97F4A7C15ULL, i));
  EXPECT_EQ(ids.size(), 1000u);
}

// The W3C examples are valid and give their trace id.
TEST(TraceContextTest, ValidTraceparent) {
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may append fields after a dash.
  EXPECT_TRUE(TraceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"));
}

// Malformed, upper-case, all-zero ids, version ff and trailing data on version 00 are invalid.
TEST(TraceContextTest, InvalidTraceparent) {
  for (std::string_view tp : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
       }) {
    EXPECT_FALSE(TraceIdOf(tp)) << tp;
  }
}

}  // namespace
}  // namespace prefix_router::api
