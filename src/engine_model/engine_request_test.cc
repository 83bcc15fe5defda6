// Unit tests of the emulator's request parsing and response writing (engine_request.h): the
// accepted shapes and their defaults, the errors for invalid fields, and the exact JSON of
// responses and stream events.
#include "engine_model/engine_request.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <string>

namespace prefix_router::engine_model {
namespace {

namespace json = boost::json;

// Chat bodies: messages with string, part-array and null content; max_tokens defaults to 128
// and max_completion_tokens takes precedence; stream options are read.
TEST(EngineRequestTest, ParsesChatBodies) {
  auto r = ParseEngineRequest("/v1/chat/completions",
                              R"({"model":"m","messages":[{"role":"system","content":"be brief"},
                                  {"role":"user","content":[{"type":"text","text":"hi"},
                                                            {"type":"image_url","image_url":{"url":"x"}}]},
                                  {"role":"assistant","content":null}],
                                  "stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shape, RequestShape::kChat);
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].content, "be brief");
  ASSERT_EQ(r->messages[1].parts.size(), 2u);
  EXPECT_TRUE(r->messages[1].parts[0].is_text);
  EXPECT_FALSE(r->messages[1].parts[1].is_text);
  EXPECT_EQ(r->max_tokens, kDefaultChatMaxTokens);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);

  auto m =
      ParseEngineRequest("/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7})");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->max_tokens, 7u);
  EXPECT_EQ(m->model, "");
  EXPECT_FALSE(m->stream);

  // A null max_completion_tokens (clients that send every field) leaves max_tokens in force.
  auto n =
      ParseEngineRequest("/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":null,"max_tokens":5})");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->max_tokens, 5u);
}

// Completions: a string, the first of several strings, or token ids; max_tokens defaults to 16.
TEST(EngineRequestTest, ParsesCompletionPrompts) {
  auto s = ParseEngineRequest("/v1/completions", R"({"prompt":"abc"})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape, RequestShape::kCompletion);
  EXPECT_EQ(s->prompt, "abc");
  EXPECT_EQ(s->max_tokens, kDefaultCompletionMaxTokens);
  auto many = ParseEngineRequest("/v1/completions", R"({"prompt":["first","second"],"max_tokens":3})");
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->prompt, "first");
  EXPECT_EQ(many->max_tokens, 3u);
  auto ids = ParseEngineRequest("/v1/completions", R"({"prompt":[[5,6,7]]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->prompt_is_ids);
  EXPECT_EQ(PromptTokens(*ids), (std::vector<uint32_t>{5, 6, 7}));
}

// /tokenize in vLLM's shape: chat messages give a generation request's prompt tokens (the
// generation prompt only when asked, as by default); a completion prompt gets
// <|begin_of_text|> unless add_special_tokens is false; ids come back as given.
TEST(EngineRequestTest, TokenizeMatchesGenerationPromptTokens) {
  const std::string messages = R"("messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])";
  auto generate = ParseEngineRequest("/v1/chat/completions", "{" + messages + "}");
  ASSERT_TRUE(generate.ok());
  auto chat = ParseTokenizeRequest(R"({"model":"m",)" + messages + "}");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->model, "m");
  EXPECT_EQ(chat->tokens, PromptTokens(*generate));
  auto bare = ParseTokenizeRequest("{" + messages + R"(,"add_generation_prompt":false})");
  ASSERT_TRUE(bare.ok());
  ASSERT_LT(bare->tokens.size(), chat->tokens.size());
  EXPECT_TRUE(std::equal(bare->tokens.begin(), bare->tokens.end(), chat->tokens.begin()));

  auto completion = ParseTokenizeRequest(R"({"prompt":"abc def"})");
  ASSERT_TRUE(completion.ok());
  auto generate_completion = ParseEngineRequest("/v1/completions", R"({"prompt":"abc def"})");
  ASSERT_TRUE(generate_completion.ok());
  EXPECT_EQ(completion->tokens, PromptTokens(*generate_completion));
  auto plain = ParseTokenizeRequest(R"({"prompt":"abc def","add_special_tokens":false})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->tokens, std::vector<uint32_t>(completion->tokens.begin() + 1, completion->tokens.end()));
  auto ids = ParseTokenizeRequest(R"({"prompt":[9,8,7]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->tokens, (std::vector<uint32_t>{9, 8, 7}));

  for (std::string_view bad :
       {"[]", "{}", R"({"prompt":3})", R"({"messages":[]})", R"({"prompt":"x","add_special_tokens":"yes"})", "{"}) {
    EXPECT_FALSE(ParseTokenizeRequest(bad).ok()) << bad;
  }
  EXPECT_EQ(TokenizeResponseBody({5, 6}, 4096), R"({"count":2,"max_model_len":4096,"tokens":[5,6],"token_strs":null})");
  EXPECT_EQ(TokenizeResponseBody({}, 8), R"({"count":0,"max_model_len":8,"tokens":[],"token_strs":null})");
}

// /invocations picks the shape from the body; TGI's shape never streams.
TEST(EngineRequestTest, InvocationsPicksTheShapeFromTheBody) {
  auto chat = ParseEngineRequest("/invocations", R"({"messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->shape, RequestShape::kChat);
  auto prompt = ParseEngineRequest("/invocations", R"({"prompt":"x"})");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->shape, RequestShape::kCompletion);
  auto tgi = ParseEngineRequest("/invocations", R"({"inputs":"x","parameters":{"max_new_tokens":9},"stream":true})");
  ASSERT_TRUE(tgi.ok());
  EXPECT_EQ(tgi->shape, RequestShape::kTgi);
  EXPECT_EQ(tgi->max_tokens, 9u);
  EXPECT_FALSE(tgi->stream);
  EXPECT_FALSE(ParseEngineRequest("/invocations", R"({"max_tokens":3})").ok());
}

// Invalid bodies are InvalidArgument with a message naming the field.
TEST(EngineRequestTest, RejectsInvalidBodies) {
  struct Case {
    const char* path;
    const char* body;
    const char* mentions;
  } cases[] = {
      {"/v1/chat/completions", "{", "JSON"},
      {"/v1/chat/completions", "[]", "object"},
      {"/v1/chat/completions", R"({})", "messages"},
      {"/v1/chat/completions", R"({"messages":[]})", "messages"},
      {"/v1/chat/completions", R"({"messages":[{"content":"x"}]})", "role"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":5}]})", "content"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-1})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"stream":1})", "stream"},
      {"/v1/completions", R"({"prompt":[]})", "prompt"},
      {"/v1/completions", R"({"prompt":[-1]})", "prompt"},
      {"/v1/completions", R"({"max_tokens":3})", "prompt"},
      {"/invocations", R"({"inputs":3})", "inputs"},
  };
  for (const Case& c : cases) {
    auto r = ParseEngineRequest(c.path, c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.status().message().find(c.mentions), std::string::npos) << c.body << ": " << r.status().message();
  }
}

// Responses and stream events are valid JSON in OpenAI's shapes, with text escaped.
TEST(EngineRequestTest, WritesOpenAiShapes) {
  auto r = ParseEngineRequest(
      "/v1/chat/completions",
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r.ok());
  const Usage usage{10, 2, 0};
  const json::value body = json::parse(CompletionBody(*r, "chatcmpl-1", 5, "a \"quoted\"\n", usage));
  EXPECT_EQ(body.at("choices").at(0).at("message").at("content").as_string(), "a \"quoted\"\n");
  EXPECT_EQ(body.at("usage").at("total_tokens").as_int64(), 12);

  const std::string first = StreamChunk(*r, "chatcmpl-1", 5, "hi", true);
  ASSERT_TRUE(first.starts_with("data: ") && first.ends_with("\n\n")) << first;
  const json::value chunk = json::parse(first.substr(6));
  EXPECT_EQ(chunk.at("choices").at(0).at("delta").at("role").as_string(), "assistant");

  const std::string end = StreamEnd(*r, "chatcmpl-1", 5, usage);
  EXPECT_TRUE(end.ends_with("data: [DONE]\n\n")) << end;
  EXPECT_NE(end.find("\"usage\":{\"prompt_tokens\":10"), std::string::npos) << end;

  const json::value err = json::parse(VllmErrorBody(404, "NotFoundError", "no \"x\"")).at("error");
  EXPECT_EQ(err.at("message").as_string(), "no \"x\"");
  EXPECT_EQ(err.at("code").as_int64(), 404);
  EXPECT_TRUE(err.at("param").is_null());
}

// usage as vLLM writes it: prompt_tokens_details.cached_tokens only when the engine reports
// cached tokens (--enable-prompt-tokens-details) and the count is above 0; otherwise null in a
// whole response and absent from a stream's usage chunk.
TEST(EngineRequestTest, PromptTokensDetailsAsVllm) {
  auto r =
      ParseEngineRequest("/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r.ok());
  auto whole = [&](const Usage& u) { return json::parse(CompletionBody(*r, "c", 5, "t", u)).at("usage"); };
  auto streamed = [&](const Usage& u) {
    const std::string end = StreamEnd(*r, "c", 5, u);
    const size_t at = end.find("data: {", end.find("\n\n") + 2);  // the event after finish
    return json::parse(end.substr(at + 6, end.find("\n\n", at) - at - 6)).at("usage");
  };
  for (const bool details : {false, true}) {
    for (const uint32_t cached : {0u, 96u}) {
      const Usage u{120, 2, cached, details};
      const json::object w = whole(u).as_object();
      const json::object s = streamed(u).as_object();
      EXPECT_EQ(w.at("prompt_tokens").as_int64(), 120);
      EXPECT_EQ(s.at("completion_tokens").as_int64(), 2);
      if (details && cached > 0) {
        EXPECT_EQ(w.at("prompt_tokens_details").at("cached_tokens").as_int64(), 96);
        EXPECT_EQ(s.at("prompt_tokens_details").at("cached_tokens").as_int64(), 96);
      } else {
        ASSERT_TRUE(w.contains("prompt_tokens_details")) << details << " " << cached;
        EXPECT_TRUE(w.at("prompt_tokens_details").is_null()) << details << " " << cached;
        EXPECT_FALSE(s.contains("prompt_tokens_details")) << details << " " << cached;
      }
    }
  }
}

}  // namespace
}  // namespace prefix_router::engine_model
