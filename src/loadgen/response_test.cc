// Reading content, usage and errors out of the response shapes the load generator meets, and
// the engine emulator's timing header.
#include "loadgen/response.h"

#include <gtest/gtest.h>

namespace prefix_router::loadgen {
namespace {

// A chat delta carries content and appends it to the reply.
TEST(ParseStreamChunk, ChatDelta) {
  std::string reply = "He";
  Usage usage;
  auto c =
      ParseStreamChunk(R"({"choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":null}]})", &reply, &usage);
  EXPECT_TRUE(c.valid);
  EXPECT_TRUE(c.has_content);
  EXPECT_FALSE(c.error);
  EXPECT_EQ(reply, "Hello");
  EXPECT_FALSE(usage.present);
}

// The role-only first chunk and the finish chunk carry no content.
TEST(ParseStreamChunk, NoContent) {
  std::string reply;
  Usage usage;
  EXPECT_FALSE(ParseStreamChunk(R"({"choices":[{"delta":{"role":"assistant"}}]})", &reply, &usage).has_content);
  EXPECT_FALSE(ParseStreamChunk(R"({"choices":[{"delta":{"content":""}}]})", &reply, &usage).has_content);
  EXPECT_FALSE(ParseStreamChunk(R"({"choices":[{"delta":{},"finish_reason":"length"}]})", &reply, &usage).has_content);
  EXPECT_EQ(reply, "");
}

// A completions chunk carries `text`; a reasoning delta counts as content but is not history.
TEST(ParseStreamChunk, CompletionTextAndReasoning) {
  std::string reply;
  Usage usage;
  EXPECT_TRUE(ParseStreamChunk(R"({"choices":[{"text":" hi"}]})", &reply, &usage).has_content);
  EXPECT_TRUE(ParseStreamChunk(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})", &reply, &usage).has_content);
  EXPECT_EQ(reply, " hi");
}

// The include_usage chunk fills usage with cached tokens.
TEST(ParseStreamChunk, Usage) {
  std::string reply;
  Usage usage;
  auto c = ParseStreamChunk(
      R"({"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":16,"total_tokens":136,"prompt_tokens_details":{"cached_tokens":96}}})",
      &reply, &usage);
  EXPECT_TRUE(c.valid);
  ASSERT_TRUE(usage.present);
  EXPECT_EQ(usage.prompt_tokens, 120u);
  EXPECT_EQ(usage.completion_tokens, 16u);
  EXPECT_EQ(usage.cached_tokens, 96u);
  EXPECT_TRUE(usage.cached_present);
  // Without details (or with null, as vLLM without --enable-prompt-tokens-details) there is no
  // cached count: cached_present false, cached 0.
  ParseStreamChunk(R"({"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}})", &reply,
                   &usage);
  EXPECT_EQ(usage.cached_tokens, 0u);
  EXPECT_FALSE(usage.cached_present);
  EXPECT_EQ(usage.prompt_tokens, 3u);
  ParseStreamChunk(
      R"({"usage":{"prompt_tokens":4,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":96}}})", &reply,
      &usage);
  ASSERT_TRUE(usage.cached_present);
  ParseStreamChunk(R"({"usage":{"prompt_tokens":4,"completion_tokens":1}})", &reply, &usage);
  EXPECT_FALSE(usage.cached_present);
  EXPECT_EQ(usage.cached_tokens, 0u);
  ParseStreamChunk(R"({"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":null}}})", &reply, &usage);
  EXPECT_FALSE(usage.cached_present);
}

// The gateway's and vLLM's mid-stream error shape is an error, with its message.
TEST(ParseStreamChunk, Error) {
  std::string reply;
  Usage usage;
  auto c = ParseStreamChunk(R"({"error":{"message":"upstream broke","type":"server_error"}})", &reply, &usage);
  EXPECT_TRUE(c.error);
  EXPECT_EQ(c.error_message, "upstream broke");
}

// Non-JSON data is not valid.
TEST(ParseStreamChunk, NotJson) {
  std::string reply;
  Usage usage;
  EXPECT_FALSE(ParseStreamChunk("{oops", &reply, &usage).valid);
  EXPECT_FALSE(ParseStreamChunk("[1,2]", &reply, &usage).valid);
}

// Whole bodies: chat, completions, TGI; usage read.
TEST(ParseCompletionBody, Shapes) {
  std::string reply;
  Usage usage;
  auto c = ParseCompletionBody(
      R"({"choices":[{"message":{"role":"assistant","content":"Hi there"}}],"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}})",
      &reply, &usage);
  EXPECT_TRUE(c.valid && c.has_content);
  EXPECT_EQ(reply, "Hi there");
  EXPECT_EQ(usage.prompt_tokens, 9u);
  EXPECT_TRUE(usage.cached_present);  // a count of 0 is a count
  EXPECT_EQ(usage.cached_tokens, 0u);
  reply.clear();
  EXPECT_TRUE(ParseCompletionBody(R"({"choices":[{"text":"abc"}]})", &reply, &usage).has_content);
  EXPECT_EQ(reply, "abc");
  reply.clear();
  EXPECT_TRUE(ParseCompletionBody(R"([{"generated_text":"tgi"}])", &reply, &usage).has_content);
  EXPECT_EQ(reply, "tgi");
  EXPECT_TRUE(ParseCompletionBody(R"({"error":{"message":"m"}})", &reply, &usage).error);
  EXPECT_FALSE(ParseCompletionBody("not json", &reply, &usage).valid);
}

// The emulator's header, in its exact format and tolerant of order and unknown keys.
TEST(ParseEngineTiming, Format) {
  EngineTiming t;
  ASSERT_TRUE(ParseEngineTiming("queue=0.001500; ttft=0.062000; cached=96; prompt=120", &t));
  EXPECT_DOUBLE_EQ(t.queue_s, 0.0015);
  EXPECT_DOUBLE_EQ(t.ttft_s, 0.062);
  EXPECT_EQ(t.cached_tokens, 96);
  EXPECT_EQ(t.prompt_tokens, 120);
  EngineTiming u;
  ASSERT_TRUE(ParseEngineTiming("prompt=7;foo=bar;ttft=0.5", &u));
  EXPECT_DOUBLE_EQ(u.ttft_s, 0.5);
  EXPECT_EQ(u.queue_s, -1);
  EngineTiming v;
  EXPECT_FALSE(ParseEngineTiming("cached=3; ttft=abc", &v));
}

// Only the spill kinds are overflow.
TEST(IsOverflowDecision, Kinds) {
  EXPECT_TRUE(IsOverflowDecision("overflow"));
  EXPECT_TRUE(IsOverflowDecision("saturated"));
  for (auto k : {"affinity", "random", "least-outstanding-requests", "round-robin", ""}) {
    EXPECT_FALSE(IsOverflowDecision(k)) << k;
  }
}

}  // namespace
}  // namespace prefix_router::loadgen
