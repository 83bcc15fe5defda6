#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "workload/generators.h"
#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

namespace json = boost::json;

std::string ExampleTrace() {
  return (std::filesystem::path(__FILE__).parent_path() / "../../examples/trace-example.jsonl")
      .lexically_normal()
      .string();
}

// Writes `text` to a fresh file in the test temp directory and returns its path.
std::string WriteTrace(const std::string& text) {
  static int n = 0;
  const std::string path =
      ::testing::TempDir() + "trace_test_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".jsonl";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

Result<std::unique_ptr<Workload>> MakeFromText(const std::string& text, bool loop = false) {
  return MakeWorkload("trace", {{"file", WriteTrace(text)}, {"loop", loop ? "true" : "false"}}, 1);
}

struct Replayed {
  std::vector<Request> requests;
  std::vector<std::optional<double>> arrivals;
};

Replayed Replay(Workload& w, size_t max = 1000) {
  Replayed out;
  for (size_t i = 0; i < max; ++i) {
    SessionStart s = w.NextSession();
    if (!s.session) break;
    std::optional<Request> r = s.session->Next("");
    EXPECT_TRUE(r.has_value());
    EXPECT_FALSE(s.session->Next("reply").has_value());
    out.requests.push_back(std::move(*r));
    out.arrivals.push_back(s.arrival_s);
  }
  return out;
}

// The example trace replays every field as documented in docs/trace-format.md.
TEST(TraceTest, ExampleTraceFields) {
  auto w = testing::MustMake("trace", {{"file", ExampleTrace()}});
  ASSERT_NE(w, nullptr);
  const Replayed t = Replay(*w);
  ASSERT_EQ(t.requests.size(), 12u);
  const std::vector<Request>& r = t.requests;

  // Line 1: chat with prompt_cache_key and max_tokens; times count from the first request.
  EXPECT_EQ(r[0].api, api::ApiKind::kChatCompletions);
  ASSERT_EQ(r[0].messages.size(), 2u);
  EXPECT_EQ(r[0].messages[0].role, "system");
  EXPECT_EQ(r[0].messages[1].content, "My router keeps rebooting. What should I check first?");
  EXPECT_EQ(r[0].max_tokens, 64u);
  EXPECT_EQ(r[0].routing_group, "tenant-a");
  EXPECT_EQ(t.arrivals[0], 0.0);
  EXPECT_EQ(t.arrivals[1], 0.5);
  EXPECT_EQ(t.arrivals[2], 1.25);
  EXPECT_EQ(r[2].label, "chat-1/turn-2");
  EXPECT_EQ(r[2].messages.size(), 4u);

  // Text parts are concatenated; model is kept; max_tokens defaults to 128.
  EXPECT_EQ(r[3].messages[0].content, "Summarize: the quarterly report shows growth in every region.");
  EXPECT_EQ(r[3].model, "llama-lora-summaries");
  EXPECT_EQ(r[3].max_tokens, 128u);

  // A prompt is the completions API; routing_group is the group.
  EXPECT_EQ(r[4].api, api::ApiKind::kCompletions);
  EXPECT_EQ(r[4].prompt.substr(0, 17), "def fibonacci(n):");
  EXPECT_EQ(r[4].routing_group, "code-team");

  // A body is native and replayed byte for byte (spacing and number spelling included).
  EXPECT_EQ(r[5].api, api::ApiKind::kNative);
  EXPECT_EQ(r[5].body,
            "{\"inputs\": \"Translate to French: good morning\",   \"parameters\": "
            "{\"max_new_tokens\": 2.0e1}}");
  EXPECT_EQ(RenderBody(r[5], true, "m"), r[5].body);
  EXPECT_EQ(r[5].routing_group, "translate");
  EXPECT_EQ(r[6].api, api::ApiKind::kNative);
  EXPECT_TRUE(json::parse(r[6].body).as_object().contains("messages"));

  // api forces the API: a prompt sent as chat, messages sent to /invocations.
  EXPECT_EQ(r[7].api, api::ApiKind::kChatCompletions);
  ASSERT_EQ(r[7].messages.size(), 1u);
  EXPECT_EQ(r[7].messages[0].role, "user");
  EXPECT_EQ(r[7].messages[0].content, "Write a haiku about caches.");
  EXPECT_EQ(r[8].api, api::ApiKind::kNative);
  EXPECT_TRUE(r[8].body.empty());
  EXPECT_EQ(r[8].routing_group, "native-group");
  EXPECT_EQ(json::parse(RenderBody(r[8], false, "m")).at("messages").as_array().size(), 1u);

  // Null content and the tool role; "meta" is ignored.
  EXPECT_EQ(r[9].messages[2].role, "assistant");
  EXPECT_EQ(r[9].messages[2].content, "");
  EXPECT_EQ(r[9].messages[3].role, "tool");

  // JSON escapes are decoded.
  EXPECT_EQ(r[10].messages[0].content, "Unicode: caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80, and a tab\there.");
  EXPECT_EQ(r[11].api, api::ApiKind::kCompletions);
  EXPECT_EQ(r[11].model, "llama");
  EXPECT_EQ(t.arrivals[11], 9.0);

  // Finite without loop: then the workload is exhausted.
  EXPECT_EQ(w->NextSession().session, nullptr);
  EXPECT_DOUBLE_EQ(w->mean_turns(), 1.0);
}

// Without arrival_s on any line the trace has no times; with loop it restarts.
TEST(TraceTest, NoTimesAndLoop) {
  const std::string text = "{\"prompt\": \"a\"}\n\n# comment\n{\"prompt\": \"b\"}\n";
  auto w = MakeFromText(text);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Replayed t = Replay(**w);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_FALSE(t.arrivals[0].has_value());
  EXPECT_FALSE(t.arrivals[1].has_value());

  auto looped = MakeFromText(text, true);
  ASSERT_TRUE(looped.ok());
  t = Replay(**looped, 5);
  ASSERT_EQ(t.requests.size(), 5u);
  EXPECT_EQ(t.requests[4].prompt, "a");
}

// Looping offsets later passes by the span plus one mean gap, so times keep increasing.
TEST(TraceTest, LoopOffsetsArrivals) {
  auto w = MakeFromText(
      "{\"arrival_s\": 10, \"prompt\": \"a\"}\n{\"arrival_s\": 12, \"prompt\": \"b\"}\n"
      "{\"arrival_s\": 14, \"prompt\": \"c\"}\n",
      true);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const Replayed t = Replay(**w, 7);
  const double expected[] = {0, 2, 4, 6, 8, 10, 12};
  for (size_t i = 0; i < 7; ++i) EXPECT_DOUBLE_EQ(*t.arrivals[i], expected[i]) << i;
}

// A bad line is InvalidArgument naming its line number (comments and blanks count as lines).
TEST(TraceTest, ErrorsNameTheLine) {
  struct Case {
    std::string bad_line;
    std::string expect;  // part of the message
  };
  const Case cases[] = {
      {"{\"prompt\": \"x\"", "invalid JSON"},
      {"[1, 2]", "object"},
      {"{\"arrival_s\": 5}", "exactly one of messages, prompt or body"},
      {"{\"prompt\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"y\"}]}", "exactly one"},
      {"{\"prompt\": 3}", "prompt"},
      {"{\"messages\": []}", "messages"},
      {"{\"messages\": [{\"content\": \"y\"}]}", "messages[0].role"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", "messages[0].content[0]"},
      {"{\"body\": 7}", "body"},
      {"{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens"},
      {"{\"prompt\": \"x\", \"max_tokens\": 2.5}", "max_tokens"},
      {"{\"prompt\": \"x\", \"arrival_s\": -1}", "arrival_s"},
      {"{\"prompt\": \"x\", \"arrival_s\": \"soon\"}", "arrival_s"},
      {"{\"prompt\": \"x\", \"api\": \"grpc\"}", "api"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"y\"}], \"api\": \"completions\"}", "completions"},
      {"{\"body\": {\"inputs\": \"x\"}, \"api\": \"chat\"}", "body"},
      {"{\"prompt\": \"x\", \"routing_group\": \"a\", \"prompt_cache_key\": \"b\"}", "not both"},
      {"{\"body\": {\"inputs\": \"x\"}, \"routing_group\": \"has space\"}", "routing group"},
      {"{\"prompt\": \"x\", \"max_token\": 5}", "unknown field 'max_token'"},
      {"{\"prompt\": \"x\", \"model\": 5}", "model"},
  };
  for (const Case& c : cases) {
    // The bad line is line 4: a comment, a good line and a blank line come first.
    const std::string text = "# header\n{\"prompt\": \"ok\"}\n\n" + c.bad_line + "\n";
    auto w = MakeFromText(text);
    ASSERT_FALSE(w.ok()) << c.bad_line;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("line 4"), std::string::npos) << w.status().message();
    EXPECT_NE(w.status().message().find(c.expect), std::string::npos) << w.status().message();
  }
}

// Arrival times must be non-decreasing and given on every line or on none.
TEST(TraceTest, ArrivalTimeRules) {
  auto decreasing = MakeFromText("{\"arrival_s\": 2, \"prompt\": \"a\"}\n{\"arrival_s\": 1, \"prompt\": \"b\"}\n");
  ASSERT_FALSE(decreasing.ok());
  EXPECT_NE(decreasing.status().message().find("line 2"), std::string::npos);
  EXPECT_NE(decreasing.status().message().find("decreases"), std::string::npos);

  auto missing = MakeFromText("{\"arrival_s\": 2, \"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("line 2"), std::string::npos);

  auto late = MakeFromText("{\"prompt\": \"a\"}\n{\"arrival_s\": 3, \"prompt\": \"b\"}\n");
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("line 2"), std::string::npos);

  auto flat_loop = MakeFromText("{\"arrival_s\": 3, \"prompt\": \"a\"}\n", true);
  ASSERT_FALSE(flat_loop.ok());
  EXPECT_NE(flat_loop.status().message().find("loop"), std::string::npos);
}

// The file parameter is required and must be readable; an empty trace is an error.
TEST(TraceTest, FileProblems) {
  auto none = MakeWorkload("trace", {}, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("file"), std::string::npos);
  auto missing = MakeWorkload("trace", {{"file", "/nonexistent/trace.jsonl"}}, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/trace.jsonl"), std::string::npos);
  auto empty = MakeFromText("# nothing here\n\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no requests"), std::string::npos);
}

// A native body with escapes in keys, nested strings with braces and CRLF line ends is still
// replayed byte for byte.
TEST(TraceTest, RawBodyExtractionHandlesTrickyJson) {
  const std::string body = "{ \"inputs\" : \"a } ] \\\" {\" , \"x\":[1,{\"y\":\"}\"}] }";
  auto w = MakeFromText("{\"label\": \"body\", \"bo\\u0064y\" :  " + body + "  , \"max_tokens\": 3}\r\n");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const Replayed t = Replay(**w);
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].body, body);
  EXPECT_EQ(t.requests[0].max_tokens, 3u);
  EXPECT_EQ(t.requests[0].label, "body");
}

// ParseTrace reads a trace from a stream, keeps the recorded times as they are (MakeTrace
// shifts them), and names the given path and line in errors.
TEST(TraceTest, ParseTraceFromText) {
  std::istringstream good(
      "# comment\n{\"arrival_s\": 5, \"prompt\": \"a\"}\n\n"
      "{\"arrival_s\": 7.5, \"body\": {\"x\": 1}, \"routing_group\": \"g\"}\n");
  Result<std::vector<TraceEntry>> r = ParseTrace(good, "mem.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].request.prompt, "a");
  EXPECT_EQ((*r)[0].arrival_s, 5.0);
  EXPECT_EQ((*r)[1].request.api, api::ApiKind::kNative);
  EXPECT_EQ((*r)[1].request.body, "{\"x\": 1}");
  EXPECT_EQ((*r)[1].arrival_s, 7.5);

  std::istringstream bad("{\"prompt\": \"a\"}\n{\"prompt\": 3}\n");
  Result<std::vector<TraceEntry>> e = ParseTrace(bad, "mem.jsonl");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("trace mem.jsonl line 2: prompt"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace prefix_router::workload
