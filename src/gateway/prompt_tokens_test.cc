#include "gateway/prompt_tokens.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine_model/engine_request.h"
#include "engine_model/tokenizer.h"

namespace prefix_router::gateway {
namespace {

// Chat messages go through the engine's chat template: the tokens the emulator would cache.
TEST(PromptTokens, ChatMatchesTheEngineTemplate) {
  const std::string body = R"({"model":"m","messages":[{"role":"system","content":"You are terse."},)"
                           R"({"role":"user","content":"hello there"}]})";
  Result<std::vector<uint32_t>> t = EnginePromptTokens(api::ApiKind::kChatCompletions, body);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<engine_model::ChatMessage> m = {{"system", "You are terse.", {}}, {"user", "hello there", {}}};
  EXPECT_EQ(*t, engine_model::RenderChat(m));
  EXPECT_GT(t->size(), 8u);
}

// A completion prompt and the native API's shapes tokenize as the emulator does; an unparseable
// body or an API without a prompt gives an error, not tokens.
TEST(PromptTokens, CompletionNativeAndErrors) {
  Result<std::vector<uint32_t>> c =
      EnginePromptTokens(api::ApiKind::kCompletions, R"({"model":"m","prompt":"abc def"})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, engine_model::RenderCompletion("abc def"));
  Result<std::vector<uint32_t>> n = EnginePromptTokens(api::ApiKind::kNative, R"({"inputs":"abc def"})");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_FALSE(n->empty());
  EXPECT_FALSE(EnginePromptTokens(api::ApiKind::kChatCompletions, "{").ok());
  EXPECT_FALSE(EnginePromptTokens(api::ApiKind::kResponses, "{}").ok());
}

// The tokens an engine's /tokenize answers for TokenizeQueryFor's request (the emulator's parser
// stands in for vLLM's), or the ids the query already holds.
std::vector<uint32_t> TokensVia(api::ApiKind api, std::string_view body) {
  Result<TokenizeQuery> q = TokenizeQueryFor(api, body);
  EXPECT_TRUE(q.ok()) << q.status().ToString() << " for " << body;
  if (!q.ok()) return {};
  if (q->has_tokens) return q->tokens;
  Result<engine_model::TokenizeRequest> r = engine_model::ParseTokenizeRequest(q->body);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << " for " << q->body;
  return r.ok() ? r->tokens : std::vector<uint32_t>{};
}

// For every API shape, asking the engine's /tokenize with the query gives exactly the tokens
// the engine computes for the generation request itself.
TEST(TokenizeQuery, EngineAnswerMatchesTheGenerationRequest) {
  struct Case {
    api::ApiKind api;
    std::string body;
  };
  const std::vector<Case> cases = {
      {api::ApiKind::kChatCompletions,
       R"({"model":"m","temperature":0.5,"stream":true,"max_tokens":9,"messages":[{"role":"system",)"
       R"("content":"caf\u00e9 \"quoted\" text"},{"role":"user","content":[{"type":"text","text":"hi"}]}]})"},
      {api::ApiKind::kCompletions, R"({"model":"m","prompt":"abc def","max_tokens":3})"},
      {api::ApiKind::kCompletions, R"({"prompt":["first prompt","second"]})"},
      {api::ApiKind::kCompletions, R"({"prompt":[5,6,7]})"},
      {api::ApiKind::kCompletions, R"({"prompt":[[5,6],[7]]})"},
      {api::ApiKind::kNative, R"({"messages":[{"role":"user","content":"native chat"}]})"},
      {api::ApiKind::kNative, R"({"prompt":"native completion"})"},
      {api::ApiKind::kNative, R"({"inputs":"tgi shape","parameters":{"max_new_tokens":4}})"},
  };
  for (const Case& c : cases) {
    Result<std::vector<uint32_t>> local = EnginePromptTokens(c.api, c.body);
    ASSERT_TRUE(local.ok()) << c.body;
    EXPECT_EQ(TokensVia(c.api, c.body), *local) << c.body;
  }
}

// The query copies the chat-template members verbatim and drops sampling and streaming
// members; ids need no request; the last of a repeated member wins.
TEST(TokenizeQuery, CopiesTemplateMembersOnly) {
  Result<TokenizeQuery> q = TokenizeQueryFor(
      api::ApiKind::kChatCompletions,
      R"({"stream":true, "model" : "llama", "tools":[{"type":"function","function":{"name":"f"}}],)"
      R"( "messages":[{"role":"user","content":"x"}] , "chat_template_kwargs":{"enable_thinking":false},)"
      R"("add_generation_prompt":false,"logprobs":true,"prompt":"ignored on chat"})");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_FALSE(q->has_tokens);
  EXPECT_EQ(q->body, R"({"model":"llama","messages":[{"role":"user","content":"x"}],)"
                     R"("tools":[{"type":"function","function":{"name":"f"}}],)"
                     R"("chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":false})");
  Result<TokenizeQuery> c = TokenizeQueryFor(api::ApiKind::kCompletions,
                                             R"({"prompt":"a","model":"m","add_special_tokens":false,"prompt":"b"})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->body, R"({"model":"m","prompt":"b","add_special_tokens":false})");
  Result<TokenizeQuery> ids = TokenizeQueryFor(api::ApiKind::kCompletions, R"({"prompt":[[1,2],[3,4]]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->has_tokens);
  EXPECT_EQ(ids->tokens, (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(ids->body.empty());
}

// Bodies the engine would refuse give an error, not a request: the gateway then routes without
// tokens and the engine answers the error.
TEST(TokenizeQuery, RefusesBodiesWithoutAPrompt) {
  for (const auto& [api, body] : std::vector<std::pair<api::ApiKind, std::string>>{
           {api::ApiKind::kChatCompletions, R"({"prompt":"x"})"},
           {api::ApiKind::kChatCompletions, "{"},
           {api::ApiKind::kChatCompletions, R"({"messages":[]} trailing)"},
           {api::ApiKind::kChatCompletions, "[1]"},
           {api::ApiKind::kCompletions, R"({"messages":[{"role":"user","content":"x"}]})"},
           {api::ApiKind::kCompletions, R"({"prompt":7})"},
           {api::ApiKind::kCompletions, R"({"prompt":[]})"},
           {api::ApiKind::kCompletions, R"({"prompt":[[]]})"},
           {api::ApiKind::kCompletions, R"({"prompt":[1,-2]})"},
           {api::ApiKind::kCompletions, R"({"prompt":[4294967296]})"},
           {api::ApiKind::kNative, R"({"parameters":{}})"},
           {api::ApiKind::kResponses, R"({"input":"x"})"},
       }) {
    Result<TokenizeQuery> q = TokenizeQueryFor(api, body);
    EXPECT_FALSE(q.ok()) << body;
    if (!q.ok()) EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument) << body;
  }
}

// An answer's tokens are read in order and bounded; malformed answers are errors.
TEST(TokenizeAnswer, ReadsTokensAndRefusesMalformedAnswers) {
  Result<std::vector<uint32_t>> t =
      ParseTokenizeAnswer(R"({"count":3,"max_model_len":8192,"tokens":[128000,5,4294967295],"token_strs":null})", 3);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, (std::vector<uint32_t>{128000, 5, 4294967295u}));
  Result<std::vector<uint32_t>> over = ParseTokenizeAnswer(R"({"tokens":[1,2,3,4]})", 3);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  for (std::string_view bad : {"", "[]", "{}", R"({"tokens":"1 2"})", R"({"tokens":[1.5]})", R"({"tokens":[-1]})",
                               R"({"tokens":[4294967296]})", R"({"tokens":[1,2)", R"({"tokens":[1]} x)"}) {
    EXPECT_FALSE(ParseTokenizeAnswer(bad, 100).ok()) << bad;
  }
}

// Only the strategies that read KV events ask for tokens.
TEST(PromptTokens, WantedByKvEventStrategiesOnly) {
  for (Strategy s : {Strategy::kRandom, Strategy::kLeastOutstanding, Strategy::kRoundRobin, Strategy::kPrefixAware,
                     Strategy::kCacheAware}) {
    RoutingOptions o;
    o.strategy = s;
    EXPECT_FALSE(WantsPromptTokens(o)) << StrategyName(s);
  }
  for (Strategy s : {Strategy::kKvAware, Strategy::kDynamoKv}) {
    RoutingOptions o;
    o.strategy = s;
    EXPECT_TRUE(WantsPromptTokens(o)) << StrategyName(s);
  }
}

}  // namespace
}  // namespace prefix_router::gateway
