#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "engine_model/tokenizer.h"
#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

using testing::CommonPrefix;
using testing::FirstLine;
using testing::MustMake;

// Each turn resends the previous turn's messages unchanged, then the reply verbatim as the
// assistant message, then a new user message.
TEST(ShareGptLikeTest, HistoryGrowsWithThePreviousReplyVerbatim) {
  auto w = MustMake("sharegpt-like", {{"turns_mean", "6"}});
  size_t multi_turn = 0;
  for (int s = 0; s < 40; ++s) {
    SessionStart start = w->NextSession();
    ASSERT_NE(start.session, nullptr);
    EXPECT_FALSE(start.arrival_s.has_value());
    std::optional<Request> prev = start.session->Next("");
    ASSERT_TRUE(prev.has_value());
    const bool has_system = prev->messages.front().role == "system";
    EXPECT_EQ(prev->messages.size(), has_system ? 2u : 1u);
    EXPECT_EQ(prev->messages.back().role, "user");
    size_t turns = 1;
    while (true) {
      const std::string reply = "Reply " + std::to_string(s) + "/" + std::to_string(turns);
      std::optional<Request> next = start.session->Next(reply);
      if (!next) break;
      ++turns;
      ASSERT_EQ(next->messages.size(), prev->messages.size() + 2);
      for (size_t i = 0; i < prev->messages.size(); ++i) {
        EXPECT_EQ(next->messages[i].role, prev->messages[i].role);
        EXPECT_EQ(next->messages[i].content, prev->messages[i].content);
      }
      const Message& assistant = next->messages[prev->messages.size()];
      EXPECT_EQ(assistant.role, "assistant");
      EXPECT_EQ(assistant.content, reply);
      EXPECT_EQ(next->messages.back().role, "user");
      prev = std::move(next);
    }
    EXPECT_LE(turns, 20u);
    if (turns > 1) ++multi_turn;
  }
  EXPECT_GT(multi_turn, 20u);
}

// A failed turn ("" as the reply) still leaves an assistant message of the requested length.
TEST(ShareGptLikeTest, FailedReplyIsReplacedByGeneratedText) {
  auto w = MustMake("sharegpt-like", {{"turns_mean", "1000"}, {"turns_max", "3"}});
  SessionStart start = w->NextSession();
  std::optional<Request> first = start.session->Next("");
  ASSERT_TRUE(first.has_value());
  std::optional<Request> second = start.session->Next("");
  ASSERT_TRUE(second.has_value());
  const Message& assistant = second->messages[first->messages.size()];
  EXPECT_EQ(assistant.role, "assistant");
  EXPECT_NEAR(static_cast<double>(engine_model::CountTokens(assistant.content)), first->max_tokens, 3.0);
  EXPECT_TRUE(start.session->Next("x").has_value());
  EXPECT_FALSE(start.session->Next("y").has_value());
}

// Turn counts follow the clamped geometric law whose mean mean_turns() reports.
TEST(ShareGptLikeTest, TurnsMatchMeanTurns) {
  auto w = MustMake("sharegpt-like", {{"user_tokens_median", "5"}, {"system_prob", "0"}});
  std::vector<size_t> turns;
  testing::RunSessions(*w, 3000, &turns);
  double sum = 0;
  for (size_t t : turns) {
    EXPECT_GE(t, 1u);
    EXPECT_LE(t, 20u);
    sum += static_cast<double>(t);
  }
  EXPECT_NEAR(sum / static_cast<double>(turns.size()), w->mean_turns(), 0.15);
  EXPECT_NEAR(w->mean_turns(), 4.942, 0.001);  // (1 - (1 - 1/5)^20) * 5
}

// A quarter of the conversations use a shared system prompt; prompts differ from their first line,
// and two conversations with the same prompt differ right after it.
TEST(ShareGptLikeTest, SystemPromptsAreSharedAndConversationsDivergeAfterThem) {
  auto w = MustMake("sharegpt-like", {{"turns_max", "1"}});
  const std::vector<Request> rs = testing::RunSessions(*w, 1000);
  std::map<std::string, std::string> prompts;  // label -> text
  std::map<std::string, std::vector<const Request*>> by_prompt;
  size_t with_system = 0;
  for (const Request& r : rs) {
    if (r.messages.front().role != "system") {
      EXPECT_TRUE(r.label.empty());
      continue;
    }
    ++with_system;
    auto [it, fresh] = prompts.emplace(r.label, r.messages.front().content);
    if (!fresh) {
      EXPECT_EQ(it->second, r.messages.front().content);
    }
    by_prompt[r.label].push_back(&r);
    const size_t tokens = engine_model::CountTokens(r.messages.front().content);
    EXPECT_GE(tokens, 30u);
    EXPECT_LE(tokens, 1503u);
  }
  EXPECT_NEAR(static_cast<double>(with_system), 250.0, 50.0);  // system_prob 0.25
  EXPECT_EQ(prompts.size(), 12u);
  std::set<std::string> first_lines;
  for (const auto& [label, text] : prompts) first_lines.insert(FirstLine(text));
  EXPECT_EQ(first_lines.size(), 12u);
  // Zipf 1.0: the first prompt is the most used.
  EXPECT_GT(by_prompt["system-0"].size(), by_prompt["system-3"].size());
  const std::vector<const Request*>& same = by_prompt["system-0"];
  ASSERT_GE(same.size(), 2u);
  const std::string& u0 = same[0]->messages[1].content;
  const std::string& u1 = same[1]->messages[1].content;
  EXPECT_LE(CommonPrefix(u0, u1), 8u) << u0.substr(0, 20) << " | " << u1.substr(0, 20);
}

// User messages follow lognormal(60, 1.0) clamped to [4, 1500]: median near 60.
TEST(ShareGptLikeTest, UserMessageLengths) {
  auto w = MustMake("sharegpt-like", {{"system_prob", "0"}, {"turns_max", "1"}});
  std::vector<size_t> tokens;
  for (const Request& r : testing::RunSessions(*w, 1001)) {
    tokens.push_back(engine_model::CountTokens(r.messages.back().content));
    EXPECT_GE(r.max_tokens, 8u);
    EXPECT_LE(r.max_tokens, 1024u);
  }
  std::sort(tokens.begin(), tokens.end());
  EXPECT_NEAR(static_cast<double>(tokens[tokens.size() / 2]), 80.0, 10.0);
  EXPECT_LE(tokens.back(), 1503u);
}

}  // namespace
}  // namespace prefix_router::workload
