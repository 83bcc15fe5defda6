#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>

#include "engine_model/tokenizer.h"
#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

using testing::FirstLine;
using testing::MustMake;

// "tenant-1/doc-17+doc-3" -> {17, 3}.
std::vector<int> Docs(const std::string& label) {
  std::vector<int> out;
  std::stringstream ss(label.substr(label.find('/') + 1));
  std::string item;
  while (std::getline(ss, item, '+')) out.push_back(std::stoi(item.substr(4)));
  return out;
}

// The user message's documents, split at the separators (the question is last).
std::vector<std::string> Parts(const std::string& user) {
  std::vector<std::string> out;
  const std::string sep = "\n\n---\n\n";
  size_t at = 0;
  while (true) {
    const size_t next = user.find(sep, at);
    out.push_back(user.substr(at, next - at));
    if (next == std::string::npos) break;
    at = next + sep.size();
  }
  return out;
}

// Requests are [system: tenant prompt, user: k documents, then the question]; no document is
// retrieved twice in one request, and the same document is the same text every time.
TEST(RagTest, RetrievedDocumentsAreDistinctAndStable) {
  auto w = MustMake("rag", {{"corpus_documents", "30"}, {"retrieved", "6"}});
  std::map<int, std::string> texts;
  for (const Request& r : testing::RunSessions(*w, 200)) {
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    const std::vector<int> docs = Docs(r.label);
    ASSERT_EQ(docs.size(), 6u);
    EXPECT_EQ(std::set<int>(docs.begin(), docs.end()).size(), 6u) << r.label;
    const std::vector<std::string> parts = Parts(r.messages[1].content);
    ASSERT_EQ(parts.size(), 7u);
    for (size_t i = 0; i < docs.size(); ++i) {
      EXPECT_EQ(FirstLine(parts[i]).rfind("Passage " + std::to_string(docs[i]) + ":", 0), 0u);
      auto [it, fresh] = texts.emplace(docs[i], parts[i]);
      if (!fresh) {
        EXPECT_EQ(it->second, parts[i]);
      }
      const size_t tokens = engine_model::CountTokens(parts[i]);
      EXPECT_GE(tokens, 300u);
      EXPECT_LE(tokens, 1203u);
    }
    EXPECT_EQ(parts.back().rfind("Question ", 0), 0u);
    EXPECT_GE(r.max_tokens, 16u);
    EXPECT_LE(r.max_tokens, 1024u);
  }
}

// Documents are drawn by Zipf 1.1 popularity: low ranks are retrieved far more often.
TEST(RagTest, PopularDocumentsDominate) {
  auto w = MustMake("rag", {{"corpus_documents", "200"}, {"doc_tokens_min", "20"}, {"doc_tokens_max", "40"}});
  std::map<int, int> count;
  std::map<int, int> first;
  const size_t n = 1000;
  for (const Request& r : testing::RunSessions(*w, n)) {
    const std::vector<int> docs = Docs(r.label);
    for (int d : docs) ++count[d];
    ++first[docs[0]];
  }
  // P(rank 0) = 1 / sum_k k^-1.1 over 200 documents, about 20%.
  EXPECT_GT(first[0], static_cast<int>(n * 0.15));
  EXPECT_GT(count[0], 3 * count[10]);
  EXPECT_GT(count.size(), 100u);
}

// Each tenant has its own system prompt (distinct first line) and routing group.
TEST(RagTest, TenantsHaveTheirOwnPromptAndGroup) {
  auto w = MustMake("rag", {{"corpus_documents", "20"}, {"doc_tokens_max", "300"}});
  std::map<std::string, std::string> prompt_by_group;
  for (const Request& r : testing::RunSessions(*w, 60)) {
    ASSERT_EQ(r.routing_group.rfind("tenant-", 0), 0u);
    EXPECT_EQ(r.label.substr(0, r.label.find('/')), r.routing_group);
    auto [it, fresh] = prompt_by_group.emplace(r.routing_group, r.messages[0].content);
    if (!fresh) {
      EXPECT_EQ(it->second, r.messages[0].content);
    }
    const size_t tokens = engine_model::CountTokens(r.messages[0].content);
    EXPECT_GE(tokens, 195u);
    EXPECT_LE(tokens, 605u);
  }
  ASSERT_EQ(prompt_by_group.size(), 3u);
  std::set<std::string> first_lines;
  for (const auto& [group, prompt] : prompt_by_group) first_lines.insert(FirstLine(prompt));
  EXPECT_EQ(first_lines.size(), 3u);

  auto none = MustMake("rag", {{"corpus_documents", "20"}, {"cache_key", "none"}});
  for (const Request& r : testing::RunSessions(*none, 5)) EXPECT_TRUE(r.routing_group.empty());
}

}  // namespace
}  // namespace prefix_router::workload
