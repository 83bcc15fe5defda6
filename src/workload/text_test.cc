#include "workload/text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "engine_model/tokenizer.h"
#include "workload/sampling.h"

namespace prefix_router::workload {
namespace {

// The counts AppendProse returns are what the engine's tokenizer counts, for short and long texts.
TEST(TextTest, ProseTokenCountsMatchTheTokenizer) {
  Rng rng(7);
  for (size_t target : {1u, 2u, 5u, 20u, 80u, 300u, 8000u}) {
    std::string s;
    const size_t counted = AppendProse(rng, target, s);
    EXPECT_EQ(counted, engine_model::CountTokens(s)) << target;
    EXPECT_GE(counted, target);
    EXPECT_LE(counted, target + 3);
  }
}

// AppendExactProse appends exactly the tokens asked for, from 1 to many, after text or not.
TEST(TextTest, ExactProseHasExactlyTheTokens) {
  Rng rng(5);
  for (size_t target = 1; target <= 40; ++target) {
    std::string s;
    AppendExactProse(rng, target, s);
    EXPECT_EQ(engine_model::CountTokens(s), target) << target << ": " << s;
    EXPECT_EQ(s.back(), '.');
  }
  for (size_t target : {511u, 2047u, 8000u}) {
    std::string s = "Header:";
    AppendExactProse(rng, target, s, '?');
    EXPECT_EQ(engine_model::CountTokens(s), engine_model::CountTokens("Header:") + target);
    EXPECT_EQ(s.substr(0, 8), "Header: ");
    EXPECT_EQ(s.back(), '?');
  }
}

// Appending after existing text adds a space and keeps counts additive.
TEST(TextTest, AppendingAfterTextIsAdditive) {
  Rng rng(3);
  std::string s = "Header:";
  const size_t before = engine_model::CountTokens(s);
  const size_t added = AppendProse(rng, 50, s, '?');
  EXPECT_EQ(s.substr(0, 8), "Header: ");
  EXPECT_EQ(s.back(), '?');
  EXPECT_EQ(engine_model::CountTokens(s), before + added);
}

// Prose looks like English to the tokenizer: words of 2 to 10 letters, about 4 chars/token.
TEST(TextTest, ProseHasEnglishLikeWordsAndDensity) {
  Rng rng(11);
  std::string s;
  const size_t tokens = AppendProse(rng, 20000, s);
  const double chars_per_token = static_cast<double>(s.size()) / static_cast<double>(tokens);
  EXPECT_GE(chars_per_token, 3.5);
  EXPECT_LE(chars_per_token, 4.5);
  size_t word = 0;
  size_t paragraphs = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && std::isalpha(static_cast<unsigned char>(s[i]))) {
      ++word;
      continue;
    }
    if (word > 0) {
      EXPECT_GE(word, 2u);
      EXPECT_LE(word, 10u);
    }
    word = 0;
    if (i + 1 < s.size() && s[i] == '\n' && s[i + 1] == '\n') ++paragraphs;
  }
  EXPECT_GT(paragraphs, 20u);
  EXPECT_NE(s.find(", "), std::string::npos);
}

// The same seed gives the same text; SubSeed streams differ by stream and by index.
TEST(TextTest, DeterministicAndSeparatedBySubSeed) {
  std::string a, b, c;
  Rng ra(SubSeed(5, 2, 9)), rb(SubSeed(5, 2, 9)), rc(SubSeed(5, 2, 10));
  AppendProse(ra, 100, a);
  AppendProse(rb, 100, b);
  AppendProse(rc, 100, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(SubSeed(5, 2, 9), SubSeed(5, 3, 9));
  EXPECT_NE(SubSeed(5, 2, 9), SubSeed(6, 2, 9));
}

// HeadedText counts its header in the total.
TEST(TextTest, HeadedTextCountsTheHeader) {
  Rng rng(1);
  const std::string s = HeadedText(rng, "Question 12345:", 40, '?');
  EXPECT_EQ(s.rfind("Question 12345: ", 0), 0u);
  EXPECT_NEAR(static_cast<double>(engine_model::CountTokens(s)), 40.0, 3.0);
}

// Zipf draws follow 1/k^s; without replacement they never repeat and favour low ranks.
TEST(SamplingTest, ZipfDrawsFollowTheLaw) {
  ZipfTable zipf(100, 1.0);
  Rng rng(2);
  std::vector<int> counts(100);
  const int n = 200000;
  for (int i = 0; i < n; ++i) ++counts[zipf.Draw(rng)];
  EXPECT_NEAR(counts[0] / static_cast<double>(n), zipf.Probability(0), 0.01);
  EXPECT_NEAR(counts[1] / static_cast<double>(counts[0]), 0.5, 0.03);
  EXPECT_NEAR(counts[9] / static_cast<double>(counts[0]), 0.1, 0.02);

  std::vector<int> first(100);
  for (int i = 0; i < 20000; ++i) {
    std::vector<size_t> d = zipf.DrawDistinct(rng, 10);
    ASSERT_EQ(d.size(), 10u);
    std::sort(d.begin(), d.end());
    EXPECT_EQ(std::adjacent_find(d.begin(), d.end()), d.end());
    ++first[d[0]];
  }
  EXPECT_GT(first[0], 20000 / 3);
}

// A steep exponent cannot stall drawing every rank without replacement.
TEST(SamplingTest, DrawDistinctTakesEveryRankWhenAskedFor) {
  ZipfTable zipf(40, 8.0);
  Rng rng(4);
  std::vector<size_t> d = zipf.DrawDistinct(rng, 40);
  std::sort(d.begin(), d.end());
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i], i);
}

// Lognormal draws have the requested median and stay in bounds; geometric has its mean.
TEST(SamplingTest, LogNormalAndGeometric) {
  Rng rng(9);
  std::vector<uint32_t> v;
  for (int i = 0; i < 20001; ++i) v.push_back(LogNormalInt(rng, 128, 0.6, 16, 512));
  std::sort(v.begin(), v.end());
  EXPECT_NEAR(v[v.size() / 2], 128.0, 5.0);
  EXPECT_GE(v.front(), 16u);
  EXPECT_LE(v.back(), 512u);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) sum += GeometricInt(rng, 3.5, 12);
  EXPECT_NEAR(sum / n, GeometricClampedMean(3.5, 12), 0.05);
  EXPECT_LT(GeometricClampedMean(3.5, 12), 3.5);
  EXPECT_DOUBLE_EQ(GeometricClampedMean(1, 12), 1.0);
}

}  // namespace
}  // namespace prefix_router::workload
