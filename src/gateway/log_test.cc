#include "gateway/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace prefix_router::gateway {
namespace {

namespace json = boost::json;

// Parses one JSON line; a parse failure fails the test and returns an empty object.
json::object Parse(const std::string& line) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  EXPECT_FALSE(ec) << ec.message() << " in: " << line;
  if (ec || !v.is_object()) return {};
  return v.as_object();
}

// Routes the default logger into a string for one test, in the given format, and restores it.
class CapturedLog {
 public:
  explicit CapturedLog(LogFormat format) : previous_(spdlog::default_logger()), previous_level_(spdlog::get_level()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
    spdlog::set_level(spdlog::level::info);
    ConfigureLogging(format);
  }
  ~CapturedLog() {
    ConfigureLogging(LogFormat::kText);
    spdlog::set_default_logger(previous_);
    spdlog::drop("captured");
    spdlog::set_level(previous_level_);
  }
  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
  spdlog::level::level_enum previous_level_;
};

// Every character JSON requires escaped comes back unchanged after a parse.
TEST(LogTest, JsonLineEscapesQuotesBackslashesAndControlCharacters) {
  const std::string nasty = std::string("a\"b\\c\nd\re\tf") + '\x01' + '\x1f' + "g\x7f/</script>";
  const LogField fields[] = {{"path", nasty}, {"k\"ey", "v"}};
  const std::string line = FormatJsonLogLine("2026-01-02T03:04:05.678Z", "info", nasty, fields);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one object must stay on one line";
  json::object o = Parse(line);
  EXPECT_EQ(o["msg"].as_string(), nasty);
  EXPECT_EQ(o["path"].as_string(), nasty);
  EXPECT_EQ(o["k\"ey"].as_string(), "v");
}

// ts, level and msg come first, then the fields in the order given, with their types.
TEST(LogTest, JsonLineHasTsLevelMsgThenTypedFields) {
  const LogField fields[] = {{"instance", "vllm-a"},
                             {"status", 200},
                             {"attempts", uint32_t{2}},
                             {"bytes", uint64_t{1} << 40},
                             {"duration_ms", 12.5}};
  const std::string line = FormatJsonLogLine("2026-01-02T03:04:05.678Z", "warning", "request", fields);
  EXPECT_EQ(line.rfind(R"({"ts":"2026-01-02T03:04:05.678Z","level":"warning","msg":"request",)", 0), 0u) << line;
  json::object o = Parse(line);
  EXPECT_EQ(o["instance"].as_string(), "vllm-a");
  EXPECT_EQ(o["status"].as_int64(), 200);
  EXPECT_EQ(o["attempts"].as_int64(), 2);
  EXPECT_EQ(o["bytes"].as_int64(), int64_t{1} << 40);
  EXPECT_DOUBLE_EQ(o["duration_ms"].to_number<double>(), 12.5);
}

// UTF-8 passes through; bytes that are not UTF-8 become U+FFFD, so the line stays valid JSON.
TEST(LogTest, JsonLineKeepsUtf8AndReplacesInvalidBytes) {
  const std::string utf8 = "caf\xc3\xa9 \xf0\x9f\x98\x80";
  const LogField fields[] = {{"model", utf8}, {"path", std::string_view("/a\xff\xfe", 4)}};
  json::object o = Parse(FormatJsonLogLine("t", "info", "m", fields));
  EXPECT_EQ(o["model"].as_string(), utf8);
  EXPECT_EQ(o["path"].as_string(), "/a\xEF\xBF\xBD\xEF\xBF\xBD");
}

// NaN and infinity are not JSON numbers: they are written as null.
TEST(LogTest, JsonLineWritesNonFiniteNumbersAsNull) {
  const LogField fields[] = {{"a", std::nan("")}, {"b", std::numeric_limits<double>::infinity()}};
  json::object o = Parse(FormatJsonLogLine("t", "info", "m", fields));
  EXPECT_TRUE(o["a"].is_null());
  EXPECT_TRUE(o["b"].is_null());
}

// Text mode: plain values as key=value; values that could forge or split a line are quoted and
// escaped.
TEST(LogTest, TextLineQuotesValuesThatCouldBeMisread) {
  const LogField fields[] = {{"instance", "vllm-a"},           {"status", 502}, {"error", "connect failed: refused"},
                             {"path", "/x\ninstance ejected"}, {"empty", ""},   {"eq", "a=b"}};
  EXPECT_EQ(FormatTextLogLine("request failed", fields),
            R"(request failed instance=vllm-a status=502 error="connect failed: refused" )"
            R"(path="/x\ninstance ejected" empty="" eq="a=b")");
}

// RFC 3339 UTC with milliseconds.
TEST(LogTest, TimestampIsUtcWithMilliseconds) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1767322800123));
  EXPECT_EQ(FormatLogTimestamp(t), "2026-01-02T03:00:00.123Z");
}

// In JSON mode every line, plain spdlog calls and LogEvent alike, is one parseable object;
// LogEvent's fields are members.
TEST(LogTest, JsonModeFormatsPlainMessagesAndEventsAsObjects) {
  std::vector<std::string> lines;
  {
    CapturedLog log(LogFormat::kJson);
    spdlog::info("prefix-router listening on {}:{}", "127.0.0.1", 8080);
    LogEvent(spdlog::level::warn, "instance ejected", {{"instance", "b"}, {"reason", "health checks fail"}});
    spdlog::error("with \"quotes\"\nand a newline");
    lines = log.Lines();
  }
  ASSERT_EQ(lines.size(), 3u);
  json::object a = Parse(lines[0]);
  EXPECT_EQ(a["level"].as_string(), "info");
  EXPECT_EQ(a["msg"].as_string(), "prefix-router listening on 127.0.0.1:8080");
  EXPECT_TRUE(a["ts"].is_string());
  EXPECT_EQ(a.size(), 3u) << "a plain message has no fields: " << lines[0];
  json::object b = Parse(lines[1]);
  EXPECT_EQ(b["level"].as_string(), "warning");
  EXPECT_EQ(b["msg"].as_string(), "instance ejected");
  EXPECT_EQ(b["instance"].as_string(), "b");
  EXPECT_EQ(b["reason"].as_string(), "health checks fail");
  json::object c = Parse(lines[2]);
  EXPECT_EQ(c["msg"].as_string(), "with \"quotes\"\nand a newline");
  EXPECT_EQ(c.size(), 3u) << "the previous event's fields must not leak: " << lines[2];
}

// In text mode LogEvent appends the fields to the message.
TEST(LogTest, TextModeAppendsFields) {
  std::vector<std::string> lines;
  {
    CapturedLog log(LogFormat::kText);
    LogEvent(spdlog::level::info, "instance readmitted", {{"instance", "b"}, {"reason", "health checks pass"}});
    lines = log.Lines();
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("[info] instance readmitted instance=b reason=\"health checks pass\""), std::string::npos)
      << lines[0];
}

// Below the logger's level nothing is written.
TEST(LogTest, EventsBelowTheLevelAreDropped) {
  std::vector<std::string> lines;
  {
    CapturedLog log(LogFormat::kJson);
    spdlog::set_level(spdlog::level::warn);
    LogEvent(spdlog::level::info, "request", {{"status", 200}});
    lines = log.Lines();
  }
  EXPECT_TRUE(lines.empty());
}

}  // namespace
}  // namespace prefix_router::gateway
