#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "engine_model/tokenizer.h"
#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

using testing::FirstLine;
using testing::MustMake;

struct AgenticRun {
  std::vector<Request> requests;
  std::vector<size_t> turns;
};

AgenticRun RunAgentic(const ParamMap& params, size_t sessions, uint64_t seed = 1) {
  AgenticRun run;
  auto w = MustMake("agentic", params, seed);
  run.requests = testing::RunSessions(*w, sessions, &run.turns);
  return run;
}

int Tenant(const Request& r) {
  // label "tenant-<k>/tools"
  return std::stoi(r.label.substr(7, r.label.find('/') - 7));
}

// Each tenant's requests carry prompt_cache_key "tenant-<k>"; "session" and "none" change it.
TEST(AgenticTest, CacheKeysFollowTheCacheKeyParameter) {
  const ParamMap small = {{"tools_tokens_min", "200"}, {"tools_tokens_median", "200"}, {"steps_max", "5"}};
  for (const Request& r : RunAgentic(small, 30).requests) {
    EXPECT_EQ(r.routing_group, "tenant-" + std::to_string(Tenant(r)));
  }
  ParamMap per_session = small;
  per_session["cache_key"] = "session";
  std::set<std::string> groups;
  const AgenticRun s = RunAgentic(per_session, 30);
  for (const Request& r : s.requests) {
    EXPECT_EQ(r.routing_group.rfind("tenant-" + std::to_string(Tenant(r)) + "-session-", 0), 0u);
    groups.insert(r.routing_group);
  }
  EXPECT_EQ(groups.size(), 30u);
  ParamMap none = small;
  none["cache_key"] = "none";
  for (const Request& r : RunAgentic(none, 10).requests) EXPECT_TRUE(r.routing_group.empty());
}

// Tenants 0 and 1 send the identical tool block; every other tenant's differs from its first
// line; block sizes stay within their clamp.
TEST(AgenticTest, TenantsZeroAndOneShareTheirBlock) {
  const AgenticRun run = RunAgentic({{"tenants", "5"}, {"tenant_zipf", "0"}, {"steps_max", "4"}}, 80);
  std::map<int, std::string> blocks;
  for (const Request& r : run.requests) {
    ASSERT_EQ(r.messages[0].role, "system");
    auto [it, fresh] = blocks.emplace(Tenant(r), r.messages[0].content);
    if (!fresh) {
      EXPECT_EQ(it->second, r.messages[0].content);
    }
  }
  ASSERT_EQ(blocks.size(), 5u);
  EXPECT_EQ(blocks[0], blocks[1]);
  std::set<std::string> first_lines;
  for (const auto& [tenant, block] : blocks) {
    if (tenant != 1) first_lines.insert(FirstLine(block));
    const size_t tokens = engine_model::CountTokens(block);
    EXPECT_GE(tokens, 1500u);
    EXPECT_LE(tokens, 16000u * 1.02);
  }
  EXPECT_EQ(first_lines.size(), 4u);
}

// A session is a task: [system, user], then each step appends the previous reply (assistant)
// and a tool result; steps per session stay in [steps_min, steps_max].
TEST(AgenticTest, StepsAppendToolCallAndResult) {
  const AgenticRun run = RunAgentic({{"tools_tokens_min", "100"}, {"tools_tokens_median", "100"}}, 40);
  size_t at = 0;
  double total = 0;
  for (size_t steps : run.turns) {
    EXPECT_GE(steps, 4u);
    EXPECT_LE(steps, 20u);
    total += static_cast<double>(steps);
    const Request& first = run.requests[at];
    ASSERT_EQ(first.messages.size(), 2u);
    EXPECT_EQ(first.messages[1].role, "user");
    const size_t task = engine_model::CountTokens(first.messages[1].content);
    EXPECT_GE(task, 95u);
    EXPECT_LE(task, 410u);
    for (size_t k = 1; k < steps; ++k) {
      const Request& r = run.requests[at + k];
      ASSERT_EQ(r.messages.size(), 2 + 2 * k);
      EXPECT_EQ(r.messages[2 * k].role, "assistant");
      EXPECT_EQ(r.messages[2 * k].content, testing::FakeReply(at + k));
      EXPECT_EQ(r.messages[2 * k + 1].role, "tool");
      const size_t result = engine_model::CountTokens(r.messages[2 * k + 1].content);
      EXPECT_GE(result, 18u);
      EXPECT_LE(result, 4003u);
      EXPECT_GE(r.max_tokens, 16u);
      EXPECT_LE(r.max_tokens, 512u);
    }
    at += steps;
  }
  EXPECT_NEAR(total / 40.0, 12.0, 2.0);
  EXPECT_DOUBLE_EQ(MustMake("agentic", {})->mean_turns(), 12.0);
}

// Tenants are chosen with Zipf 1.0 weights: tenant 0 is the hot one.
TEST(AgenticTest, TenantZeroIsHot) {
  const AgenticRun run = RunAgentic(
      {{"tools_tokens_min", "100"}, {"tools_tokens_median", "100"}, {"steps_min", "1"}, {"steps_max", "1"}}, 2000);
  std::map<int, int> sessions;
  for (const Request& r : run.requests) ++sessions[Tenant(r)];
  // Weights 1, 1/2, 1/3, 1/4 over 4 tenants: tenant 0 gets 48%.
  EXPECT_NEAR(sessions[0] / 2000.0, 0.48, 0.04);
  EXPECT_GT(sessions[1], sessions[3]);
}

}  // namespace
}  // namespace prefix_router::workload
