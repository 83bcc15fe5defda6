#include "gateway/prompt_tokens.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine_model/tokenizer.h"

namespace prefix_router::gateway {
namespace {

// Chat messages go through the engine's chat template: the tokens the emulator would cache.
TEST(PromptTokens, ChatMatchesTheEngineTemplate) {
  const std::string body =
      R"({"model":"m","messages":[{"role":"system","content":"You are terse."},)"
      R"({"role":"user","content":"hello there"}]})";
  Result<std::vector<uint32_t>> t = EnginePromptTokens(api::ApiKind::kChatCompletions, body);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<engine_model::ChatMessage> m = {{"system", "You are terse.", {}},
                                              {"user", "hello there", {}}};
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
  Result<std::vector<uint32_t>> n =
      EnginePromptTokens(api::ApiKind::kNative, R"({"inputs":"abc def"})");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_FALSE(n->empty());
  EXPECT_FALSE(EnginePromptTokens(api::ApiKind::kChatCompletions, "{").ok());
  EXPECT_FALSE(EnginePromptTokens(api::ApiKind::kResponses, "{}").ok());
}

// Only the strategies that read KV events ask for tokens.
TEST(PromptTokens, WantedByKvEventStrategiesOnly) {
  for (Strategy s : {Strategy::kRandom, Strategy::kLeastOutstanding, Strategy::kRoundRobin,
                     Strategy::kPrefixAware, Strategy::kCacheAware}) {
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
