// The usage scanner on the response shapes of vLLM, the OpenAI API and our emulator, whole and
// split at every byte.
#include "api/response_usage.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prefix_router::api {
namespace {

using Framing = UsageScanner::Framing;

ResponseUsage Scan(std::string_view body, Framing framing) {
  UsageScanner s(framing);
  s.Feed(body);
  return s.usage();
}

// The same body fed one byte at a time, and in two pieces split at every offset, reads alike.
void ExpectSplitInvariant(std::string_view body, Framing framing) {
  const ResponseUsage whole = Scan(body, framing);
  UsageScanner bytes(framing);
  for (const char c : body) bytes.Feed(std::string_view(&c, 1));
  EXPECT_EQ(bytes.usage().present, whole.present);
  EXPECT_EQ(bytes.usage().prompt_tokens, whole.prompt_tokens);
  EXPECT_EQ(bytes.usage().cached_tokens, whole.cached_tokens);
  EXPECT_EQ(bytes.usage().completion_tokens, whole.completion_tokens);
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    UsageScanner two(framing);
    two.Feed(body.substr(0, cut));
    two.Feed(body.substr(cut));
    ASSERT_EQ(two.usage().prompt_tokens, whole.prompt_tokens) << "cut at " << cut;
    ASSERT_EQ(two.usage().cached_tokens, whole.cached_tokens) << "cut at " << cut;
    ASSERT_EQ(two.usage().cached_present, whole.cached_present) << "cut at " << cut;
  }
}

// A chat completion body: prompt, cached and completion tokens.
TEST(UsageScannerTest, ChatCompletionBody) {
  const std::string body =
      R"({"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant",)"
      R"("content":"the usage is {\"usage\":{\"prompt_tokens\":1}}"},"finish_reason":"length"}],)"
      R"("usage":{"prompt_tokens":1200,"total_tokens":1216,"completion_tokens":16,)"
      R"("prompt_tokens_details":{"cached_tokens":1024}}})";
  const ResponseUsage u = Scan(body, Framing::kJson);
  ASSERT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 1200u);
  EXPECT_EQ(u.completion_tokens, 16u);
  EXPECT_EQ(u.cached_tokens, 1024u);
  EXPECT_TRUE(u.cached_present);
  ExpectSplitInvariant(body, Framing::kJson);
}

// vLLM without --enable-prompt-tokens-details (or nothing cached): no cached count.
TEST(UsageScannerTest, NoPromptTokensDetails) {
  for (const char* body :
       {R"({"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}})",
        R"({"usage":{"prompt_tokens":3,"completion_tokens":1}})",
        R"({"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":null}}})"}) {
    const ResponseUsage u = Scan(body, Framing::kJson);
    ASSERT_TRUE(u.present) << body;
    EXPECT_EQ(u.prompt_tokens, 3u);
    EXPECT_FALSE(u.cached_present) << body;
    EXPECT_EQ(u.cached_tokens, 0u);
  }
}

// Only the top-level usage counts: one nested in a choice, or a body without one, gives none.
TEST(UsageScannerTest, OnlyTopLevelUsage) {
  EXPECT_FALSE(Scan(R"({"choices":[{"usage":{"prompt_tokens":5}}]})", Framing::kJson).present);
  EXPECT_FALSE(Scan(R"({"x":{"usage":{"prompt_tokens":5}}})", Framing::kJson).present);
  EXPECT_FALSE(Scan(R"({"choices":[{"text":"usage"}]})", Framing::kJson).present);
  EXPECT_FALSE(Scan(R"([{"generated_text":"hi"}])", Framing::kJson).present);
  EXPECT_FALSE(Scan("not json", Framing::kJson).present);
  EXPECT_FALSE(Scan(R"({"usage":{"prompt_tokens":5)", Framing::kJson).present);  // truncated
}

// The Responses API's names, whole and streamed (response.completed).
TEST(UsageScannerTest, ResponsesApi) {
  const std::string body = R"({"id":"resp_1","object":"response","output":[],"usage":{"input_tokens":300,)"
                           R"("input_tokens_details":{"cached_tokens":256},"output_tokens":9,"total_tokens":309}})";
  ResponseUsage u = Scan(body, Framing::kJson);
  ASSERT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 300u);
  EXPECT_EQ(u.cached_tokens, 256u);
  EXPECT_EQ(u.completion_tokens, 9u);
  const std::string sse =
      "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":" + body + "}\n\n";
  u = Scan(sse, Framing::kSse);
  ASSERT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 300u);
  EXPECT_EQ(u.cached_tokens, 256u);
}

// A stream with include_usage: content chunks, the usage chunk, [DONE]; CRLF line ends,
// comments and a multi-line data field read the same at every split.
TEST(UsageScannerTest, SseUsageChunk) {
  const std::string stream =
      ": keep-alive\r\n\r\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":{\"}}]}\r\n\r\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\" data: {\"}}]}\n\n"
      "data: {\"choices\":[],\n"
      "data: "
      "\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\":768}}}"
      "\r\r"
      "data: [DONE]\n\n";
  const ResponseUsage u = Scan(stream, Framing::kSse);
  ASSERT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 812u);
  EXPECT_EQ(u.completion_tokens, 40u);
  EXPECT_EQ(u.cached_tokens, 768u);
  ExpectSplitInvariant(stream, Framing::kSse);
}

// A stream without include_usage reports nothing; continuous usage stats: the last one wins.
TEST(UsageScannerTest, SseWithoutUsageAndContinuousStats) {
  EXPECT_FALSE(
      Scan("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n", Framing::kSse).present);
  const ResponseUsage u = Scan(
      "data: "
      "{\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1}}\n\n"
      "data: "
      "{\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n",
      Framing::kSse);
  ASSERT_TRUE(u.present);
  EXPECT_EQ(u.completion_tokens, 2u);
  EXPECT_FALSE(u.cached_present);
}

// Odd numbers: negative reads 0, a fraction its integral part, huge values saturate.
TEST(UsageScannerTest, Numbers) {
  ResponseUsage u = Scan(
      R"({"usage":{"prompt_tokens":-4,"completion_tokens":7.9e0,"prompt_tokens_details":{"cached_tokens":99999999999}}})",
      Framing::kJson);
  ASSERT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 0u);
  EXPECT_EQ(u.completion_tokens, 7u);
  EXPECT_EQ(u.cached_tokens, UINT32_MAX);
}

}  // namespace
}  // namespace prefix_router::api
