#include <gtest/gtest.h>

#include <algorithm>
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
using testing::RunSessions;

// Requests are [system: preamble + document, user: question], one turn per session.
TEST(LongContextTest, ShapeIsSystemDocumentThenQuestion) {
  auto w = MustMake("long-context", {{"documents", "4"}, {"prefix_tokens", "500"}});
  std::vector<size_t> turns;
  const std::vector<Request> rs = RunSessions(*w, 20, &turns);
  ASSERT_EQ(rs.size(), 20u);
  EXPECT_EQ(std::count(turns.begin(), turns.end(), 1u), 20);
  EXPECT_DOUBLE_EQ(w->mean_turns(), 1.0);
  for (const Request& r : rs) {
    EXPECT_EQ(r.api, api::ApiKind::kChatCompletions);
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].role, "user");
    EXPECT_EQ(r.label.rfind("doc-", 0), 0u);
    EXPECT_TRUE(r.routing_group.empty());
    EXPECT_GE(r.max_tokens, 16u);
    EXPECT_LE(r.max_tokens, 512u);
  }
}

// The preamble, the document and the question have their configured sizes within a few %.
TEST(LongContextTest, TokenSizesAreWithinAFewPercent) {
  auto w = MustMake("long-context", {{"documents", "3"}});  // default 8,000 + 300 tokens
  const std::vector<Request> rs = RunSessions(*w, 30);
  auto bare = MustMake("long-context", {{"documents", "3"}, {"preamble_tokens", "0"}});
  const std::vector<Request> docs = RunSessions(*bare, 30);
  for (size_t i = 0; i < rs.size(); ++i) {
    const std::string& with = rs[i].messages[0].content;
    const std::string& doc = docs[i].messages[0].content;
    ASSERT_EQ(rs[i].label, docs[i].label);
    // Same seed, same document: the system text is the preamble, "\n\n", then the document.
    ASSERT_GT(with.size(), doc.size());
    ASSERT_EQ(with.substr(with.size() - doc.size()), doc);
    const std::string preamble = with.substr(0, with.size() - doc.size() - 2);
    EXPECT_NEAR(static_cast<double>(engine_model::CountTokens(doc)), 8000, 8000 * 0.02);
    EXPECT_NEAR(static_cast<double>(engine_model::CountTokens(preamble)), 300, 300 * 0.03);
    const size_t q = engine_model::CountTokens(rs[i].messages[1].content);
    EXPECT_GE(q, 20u * 0.95);
    EXPECT_LE(q, 80u * 1.05);
  }
  // About 4 characters per token: 8,000 tokens are about 32 KB.
  const size_t bytes = docs[0].messages[0].content.size();
  EXPECT_GT(bytes, 29'000u);
  EXPECT_LT(bytes, 35'000u);
}

// Every request of the default workload shares the preamble; different documents differ from
// the document's first line on, and the same document is byte-identical each time.
TEST(LongContextTest, DocumentsShareThePreambleAndDifferFromTheirFirstLine) {
  auto w = MustMake("long-context", {{"documents", "6"}, {"prefix_tokens", "300"}});
  const std::vector<Request> rs = RunSessions(*w, 60);
  auto bare = MustMake("long-context", {{"documents", "6"}, {"prefix_tokens", "300"}, {"preamble_tokens", "0"}});
  const std::vector<Request> docs = RunSessions(*bare, 60);
  std::map<std::string, std::string> by_label;
  std::set<std::string> first_lines;
  for (size_t i = 0; i < rs.size(); ++i) {
    const std::string& doc = docs[i].messages[0].content;
    auto [it, fresh] = by_label.emplace(docs[i].label, doc);
    if (!fresh) {
      EXPECT_EQ(it->second, doc);
    }
    const size_t preamble = rs[i].messages[0].content.size() - doc.size();
    EXPECT_EQ(rs[i].messages[0].content.substr(0, preamble), rs[0].messages[0].content.substr(0, preamble));
  }
  ASSERT_EQ(by_label.size(), 6u);
  for (const auto& [label, doc] : by_label) {
    first_lines.insert(FirstLine(doc));
    for (const auto& [other_label, other] : by_label) {
      if (label == other_label) continue;
      // "Document 1:" and "Document 12:" may share their first 10 characters, no more.
      EXPECT_LE(CommonPrefix(doc, other), 12u) << label << " " << other_label;
    }
  }
  EXPECT_EQ(first_lines.size(), 6u);
}

// Questions are unique per request (they carry a request counter).
TEST(LongContextTest, QuestionsAreUnique) {
  auto w = MustMake("long-context", {{"documents", "2"}, {"prefix_tokens", "50"}});
  std::set<std::string> questions;
  for (const Request& r : RunSessions(*w, 500)) questions.insert(r.messages[1].content);
  EXPECT_EQ(questions.size(), 500u);
}

// Uniform popularity uses every document about equally; zipf:1 concentrates on the first ranks.
TEST(LongContextTest, UniformSpreadsAndZipfSkews) {
  const size_t n = 4000;
  const ParamMap base = {{"documents", "40"}, {"prefix_tokens", "20"}, {"preamble_tokens", "0"}};
  std::map<std::string, int> uniform;
  for (const Request& r : RunSessions(*MustMake("long-context", base), n)) ++uniform[r.label];
  ParamMap zp = base;
  zp["popularity"] = "zipf:1.0";
  std::map<std::string, int> zipf;
  for (const Request& r : RunSessions(*MustMake("long-context", zp), n)) ++zipf[r.label];

  EXPECT_EQ(uniform.size(), 40u);
  const auto top = [](const std::map<std::string, int>& m) {
    int best = 0;
    for (const auto& [label, count] : m) best = std::max(best, count);
    return best;
  };
  // Uniform: 100 expected per document; zipf:1 over 40: P(rank 0) = 1/H(40) = 23%.
  EXPECT_LT(top(uniform), 160);
  EXPECT_GT(zipf["doc-0"], static_cast<int>(n * 0.19));
  EXPECT_LT(zipf["doc-0"], static_cast<int>(n * 0.27));
  EXPECT_GT(zipf["doc-0"], 1.6 * zipf["doc-1"]);
}

// Reply lengths follow the configured lognormal: median about 128, within [16, 512].
TEST(LongContextTest, OutputTokensFollowTheirDistribution) {
  auto w = MustMake("long-context", {{"documents", "2"}, {"prefix_tokens", "20"}});
  std::vector<uint32_t> out;
  for (const Request& r : RunSessions(*w, 2001)) out.push_back(r.max_tokens);
  std::sort(out.begin(), out.end());
  EXPECT_NEAR(out[out.size() / 2], 128.0, 10.0);
  EXPECT_GE(out.front(), 16u);
  EXPECT_LE(out.back(), 512u);
  auto fixed =
      MustMake("long-context",
               {{"documents", "2"}, {"prefix_tokens", "20"}, {"output_tokens_sigma", "0"}, {"model", "llama-70b"}});
  for (const Request& r : RunSessions(*fixed, 10)) {
    EXPECT_EQ(r.max_tokens, 128u);
    EXPECT_EQ(r.model, "llama-70b");
  }
}

}  // namespace
}  // namespace prefix_router::workload
