#include "report/results.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace prefix_router::report {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RequestRecord Ok(double start, double ttft, double e2e, int32_t instance = -1) {
  RequestRecord r;
  r.start_s = start;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.instance = instance;
  return r;
}

RunResult Summary(const std::vector<RequestRecord>& records, uint32_t instances = 0, double window = 0) {
  RunResult r;
  Summarize(records, SummaryOptions{instances, window}, r);
  return r;
}

// Percentiles interpolate between closest ranks, and the CDF has 101 points from min to max.
TEST(SummarizeTest, LatencyPercentilesAndQuantiles) {
  std::vector<RequestRecord> records;
  for (int i = 100; i >= 1; --i) records.push_back(Ok(i, i / 100.0, i / 50.0));
  const RunResult r = Summary(records);
  EXPECT_EQ(r.requests, 100u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_DOUBLE_EQ(r.ttft_p50_s, 0.505);
  EXPECT_DOUBLE_EQ(r.ttft_p90_s, 0.901);
  EXPECT_DOUBLE_EQ(r.ttft_p99_s, 0.9901);
  EXPECT_DOUBLE_EQ(r.ttft_mean_s, 0.505);
  EXPECT_DOUBLE_EQ(r.e2e_p50_s, 1.01);
  EXPECT_DOUBLE_EQ(r.e2e_p90_s, 1.802);
  ASSERT_EQ(r.ttft_quantiles.size(), 101u);
  EXPECT_DOUBLE_EQ(r.ttft_quantiles.front(), 0.01);
  EXPECT_DOUBLE_EQ(r.ttft_quantiles[50], 0.505);
  EXPECT_DOUBLE_EQ(r.ttft_quantiles.back(), 1.0);
  for (size_t i = 1; i < r.ttft_quantiles.size(); ++i) {
    EXPECT_LE(r.ttft_quantiles[i - 1], r.ttft_quantiles[i]);
  }
}

// Warm-up records (counted = false) change no figure at all.
TEST(SummarizeTest, WarmupExcludedEverywhere) {
  std::vector<RequestRecord> base = {Ok(10, 0.1, 1, 0), Ok(11, 0.2, 1, 1)};
  base[0].prompt_tokens = base[1].prompt_tokens = 100;
  base[0].cached_tokens = 50;
  std::vector<RequestRecord> with_warmup = base;
  RequestRecord warm = Ok(0, 9, 20, 2);
  warm.counted = false;
  warm.prompt_tokens = 1000;
  warm.cached_tokens = 0;
  warm.overflow = true;
  warm.itl_mean_s = 5;
  warm.engine_ttft_s = 3;
  with_warmup.insert(with_warmup.begin(), 3, warm);
  with_warmup[0].error = true;

  const RunResult a = Summary(base, 3, 5);
  const RunResult b = Summary(with_warmup, 3, 5);
  EXPECT_EQ(b.requests, 2u);
  EXPECT_EQ(b.errors, 0u);
  EXPECT_EQ(a.ttft_quantiles, b.ttft_quantiles);
  EXPECT_DOUBLE_EQ(b.hit_rate, 0.25);
  EXPECT_DOUBLE_EQ(a.throughput_rps, b.throughput_rps);
  EXPECT_DOUBLE_EQ(b.throughput_rps, 1.0);  // 2 requests from t=10 to t=12
  EXPECT_THAT(b.share, ElementsAre(0.5, 0.5, 0.0));
  EXPECT_EQ(b.overflow_rate, 0);
  EXPECT_EQ(b.itl_p50_s, -1);
  EXPECT_EQ(b.engine_ttft_p50_s, -1);
  ASSERT_EQ(b.series.size(), 1u);  // the window at 10 only; warm-up at t=0 makes none
  EXPECT_EQ(b.series[0].t_s, 10);
}

// Errors count as requests and errors, keep their instance share and overflow, but add no
// latency, tokens or throughput.
TEST(SummarizeTest, ErrorsCountedButNotMeasured) {
  std::vector<RequestRecord> records = {Ok(0, 0.2, 1, 0), Ok(0, 0.4, 3, 1)};
  records[0].prompt_tokens = records[1].prompt_tokens = 100;
  records[0].cached_tokens = 100;
  records[0].output_tokens = records[1].output_tokens = 10;
  RequestRecord failed = Ok(0.5, 50, -1, 1);
  failed.error = true;
  failed.overflow = true;
  failed.prompt_tokens = 1000;
  failed.output_tokens = 1000;
  records.push_back(failed);

  const RunResult r = Summary(records, 2);
  EXPECT_EQ(r.requests, 3u);
  EXPECT_EQ(r.errors, 1u);
  EXPECT_DOUBLE_EQ(r.ttft_p50_s, 0.3);
  EXPECT_DOUBLE_EQ(r.ttft_p99_s, 0.398);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.5);
  EXPECT_DOUBLE_EQ(r.throughput_rps, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s, 20.0 / 3.0);
  EXPECT_THAT(r.share, ElementsAre(1.0 / 3.0, 2.0 / 3.0));
  EXPECT_DOUBLE_EQ(r.overflow_rate, 1.0 / 3.0);
}

// Hit rate is token-weighted (sum cached / sum prompt), not a mean of per-request rates.
TEST(SummarizeTest, HitRateIsTokenWeighted) {
  std::vector<RequestRecord> records(2, Ok(0, 0.1, 0.2));
  records[0].prompt_tokens = 8000;
  records[0].cached_tokens = 8000;
  records[1].prompt_tokens = 2000;
  records[1].cached_tokens = 0;
  EXPECT_DOUBLE_EQ(Summary(records).hit_rate, 0.8);
}

// Responses without a cached-token count (a vLLM without --enable-prompt-tokens-details) give a
// hit rate that is not known (NaN: "n/a", JSON null), overall and per window, not 0; failed
// requests' counts do not make it known.
TEST(SummarizeTest, HitRateNotKnownWithoutCachedCounts) {
  std::vector<RequestRecord> records = {Ok(0, 0.1, 0.2), Ok(1, 0.1, 0.2), Ok(2, 0.1, 0.2)};
  for (RequestRecord& r : records) {
    r.prompt_tokens = 1000;
    r.cached_tokens_known = false;
  }
  records[2].error = true;
  records[2].cached_tokens_known = true;
  const RunResult r = Summary(records, 0, 10);
  EXPECT_TRUE(std::isnan(r.hit_rate)) << r.hit_rate;
  ASSERT_EQ(r.series.size(), 1u);
  EXPECT_TRUE(std::isnan(r.series[0].hit_rate)) << r.series[0].hit_rate;
  EXPECT_DOUBLE_EQ(r.ttft_p50_s, 0.1);  // everything else is measured as usual
  const std::string json = ResultsJson({r});
  EXPECT_THAT(json, HasSubstr("\"hit_rate\": null"));
  auto parsed = ParseResultsJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(std::isnan((*parsed)[0].hit_rate));
  EXPECT_TRUE(std::isnan((*parsed)[0].series[0].hit_rate));
}

// Once some response carries a count, one without counts 0 cached tokens: vLLM with
// --enable-prompt-tokens-details leaves the count out exactly when it is 0.
TEST(SummarizeTest, HitRateCountsMissingCountsAsZeroOnceAnyIsKnown) {
  std::vector<RequestRecord> records(4, Ok(0, 0.1, 0.2));
  for (RequestRecord& r : records) r.prompt_tokens = 1000;
  records[0].cached_tokens = 900;
  records[1].cached_tokens = 500;
  records[2].cached_tokens_known = records[3].cached_tokens_known = false;
  const RunResult r = Summary(records, 0, 10);
  EXPECT_DOUBLE_EQ(r.hit_rate, 1400.0 / 4000.0);
  ASSERT_EQ(r.series.size(), 1u);
  EXPECT_DOUBLE_EQ(r.series[0].hit_rate, 1400.0 / 4000.0);
}

// The span runs from the first counted start to the last end, whichever request ends last.
TEST(SummarizeTest, ThroughputOverMeasuredSpan) {
  const std::vector<RequestRecord> records = {Ok(2, 0.1, 10), Ok(4, 0.1, 1), Ok(6, 0.1, 1)};
  EXPECT_DOUBLE_EQ(Summary(records).throughput_rps, 3.0 / 10.0);
}

// Shares cover counted requests with a known instance; the vector has options.instances
// entries, more when a record names a higher index.
TEST(SummarizeTest, SharesPerInstance) {
  std::vector<RequestRecord> records = {Ok(0, 0.1, 1, 0), Ok(0, 0.1, 1, 0), Ok(0, 0.1, 1, 1), Ok(0, 0.1, 1, 3),
                                        Ok(0, 0.1, 1, -1)};
  EXPECT_THAT(Summary(records, 5).share, ElementsAre(0.5, 0.25, 0.0, 0.25, 0.0));
  records.push_back(Ok(0, 0.1, 1, 6));
  EXPECT_EQ(Summary(records, 5).share.size(), 7u);
  EXPECT_DOUBLE_EQ(Summary(records, 5).share[6], 0.2);
}

// Overflow rate is the fraction of counted requests routed away from their first choice.
TEST(SummarizeTest, OverflowRate) {
  std::vector<RequestRecord> records(4, Ok(0, 0.1, 1, 0));
  records[1].overflow = true;
  EXPECT_DOUBLE_EQ(Summary(records, 1).overflow_rate, 0.25);
}

// Series windows are aligned to multiples of the window, include empty windows, and carry
// per-window hit rate, TTFT percentiles and shares.
TEST(SummarizeTest, SeriesWindows) {
  std::vector<RequestRecord> records = {Ok(12, 0.1, 1, 0), Ok(15, 0.3, 1, 1), Ok(21, 0.5, 1, 1), Ok(47, 0.7, 1, 0)};
  records[0].prompt_tokens = records[1].prompt_tokens = 100;
  records[0].cached_tokens = 100;
  records[3].error = true;
  const RunResult r = Summary(records, 2, 10);
  ASSERT_EQ(r.series.size(), 4u);
  EXPECT_EQ(r.series[0].t_s, 10);
  EXPECT_EQ(r.series[0].requests, 2u);
  EXPECT_DOUBLE_EQ(r.series[0].hit_rate, 0.5);
  EXPECT_DOUBLE_EQ(r.series[0].ttft_p50_s, 0.2);
  EXPECT_DOUBLE_EQ(r.series[0].ttft_p90_s, 0.28);
  EXPECT_THAT(r.series[0].share, ElementsAre(0.5, 0.5));
  EXPECT_EQ(r.series[1].t_s, 20);
  EXPECT_THAT(r.series[1].share, ElementsAre(0.0, 1.0));
  EXPECT_EQ(r.series[2].t_s, 30);
  EXPECT_EQ(r.series[2].requests, 0u);
  EXPECT_EQ(r.series[3].t_s, 40);
  EXPECT_EQ(r.series[3].requests, 1u);  // the failed request counts, but has no latency
  EXPECT_EQ(r.series[3].ttft_p50_s, 0);
  EXPECT_THAT(r.series[3].share, ElementsAre(1.0, 0.0));
}

// A window far smaller than the run is widened so that the series stays bounded.
TEST(SummarizeTest, SeriesWindowCountBounded) {
  const std::vector<RequestRecord> records = {Ok(0, 0.1, 1), Ok(1000, 0.1, 1)};
  const RunResult r = Summary(records, 0, 0.001);
  EXPECT_LE(r.series.size(), 10'000u);
  EXPECT_GE(r.series.size(), 2u);
  EXPECT_EQ(r.series.front().requests + r.series.back().requests, 2u);
}

// No records: zero counts, no distribution or series, unknown optional latencies.
TEST(SummarizeTest, EmptyInput) {
  RunResult r;
  r.strategy = "random";
  r.extra["x"] = 1;
  Summarize({}, SummaryOptions{3, 10}, r);
  EXPECT_EQ(r.strategy, "random");
  EXPECT_EQ(r.extra.at("x"), 1);
  EXPECT_EQ(r.requests, 0u);
  EXPECT_EQ(r.ttft_p50_s, 0);
  EXPECT_EQ(r.hit_rate, 0);
  EXPECT_EQ(r.throughput_rps, 0);
  EXPECT_EQ(r.overflow_rate, 0);
  EXPECT_TRUE(r.ttft_quantiles.empty());
  EXPECT_TRUE(r.series.empty());
  EXPECT_THAT(r.share, ElementsAre(0.0, 0.0, 0.0));
  EXPECT_EQ(r.itl_p50_s, -1);
  EXPECT_EQ(r.engine_ttft_p90_s, -1);
}

// ITL and engine TTFT percentiles come from the records that report them.
TEST(SummarizeTest, OptionalLatencies) {
  std::vector<RequestRecord> records(3, Ok(0, 0.5, 1));
  records[0].itl_mean_s = 0.02;
  records[1].itl_mean_s = 0.04;
  records[0].engine_ttft_s = 0.1;
  records[1].engine_ttft_s = 0.3;
  records[2].engine_ttft_s = 0.2;
  const RunResult r = Summary(records);
  EXPECT_DOUBLE_EQ(r.itl_p50_s, 0.03);
  EXPECT_DOUBLE_EQ(r.engine_ttft_p50_s, 0.2);
  EXPECT_DOUBLE_EQ(r.engine_ttft_p90_s, 0.28);
}

// Summarize overwrites an earlier summary instead of adding to it.
TEST(SummarizeTest, ReplacesPreviousFigures) {
  RunResult r;
  Summarize({Ok(0, 1, 2, 0), Ok(5, 1, 2, 1)}, SummaryOptions{2, 1}, r);
  Summarize({Ok(0, 0.5, 1, 0)}, SummaryOptions{1, 0}, r);
  EXPECT_EQ(r.requests, 1u);
  EXPECT_THAT(r.share, ElementsAre(1.0));
  EXPECT_TRUE(r.series.empty());
  EXPECT_EQ(r.ttft_quantiles.size(), 101u);
}

// Percentile of an empty vector is 0; of one value, that value.
TEST(PercentileTest, EdgeCases) {
  std::vector<double> empty;
  EXPECT_EQ(Percentile(empty, 0.5), 0);
  std::vector<double> one = {3};
  EXPECT_EQ(Percentile(one, 0.99), 3);
}

// ---- JSON ------------------------------------------------------------------------------------

void ExpectSameDouble(double a, double b, const std::string& what) {
  if (std::isnan(a)) {
    EXPECT_TRUE(std::isnan(b)) << what;
  } else {
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what << ": " << a << " vs " << b;
  }
}

void ExpectSameRun(const RunResult& a, const RunResult& b) {
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.workload, b.workload);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(a.instances, b.instances);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.ttft_kind, b.ttft_kind);
  EXPECT_EQ(a.settings, b.settings);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.errors, b.errors);
  const std::pair<const char*, double RunResult::*> fields[] = {
      {"ttft_p50_s", &RunResult::ttft_p50_s},
      {"ttft_p90_s", &RunResult::ttft_p90_s},
      {"ttft_p99_s", &RunResult::ttft_p99_s},
      {"ttft_mean_s", &RunResult::ttft_mean_s},
      {"e2e_p50_s", &RunResult::e2e_p50_s},
      {"e2e_p90_s", &RunResult::e2e_p90_s},
      {"itl_p50_s", &RunResult::itl_p50_s},
      {"engine_ttft_p50_s", &RunResult::engine_ttft_p50_s},
      {"engine_ttft_p90_s", &RunResult::engine_ttft_p90_s},
      {"engine_ttft_p99_s", &RunResult::engine_ttft_p99_s},
      {"hit_rate", &RunResult::hit_rate},
      {"throughput_rps", &RunResult::throughput_rps},
      {"output_tokens_per_s", &RunResult::output_tokens_per_s},
      {"overflow_rate", &RunResult::overflow_rate},
  };
  for (const auto& [name, m] : fields) ExpectSameDouble(a.*m, b.*m, name);
  ASSERT_EQ(a.share.size(), b.share.size());
  for (size_t i = 0; i < a.share.size(); ++i) ExpectSameDouble(a.share[i], b.share[i], "share");
  EXPECT_EQ(a.extra, b.extra);
  ASSERT_EQ(a.ttft_quantiles.size(), b.ttft_quantiles.size());
  for (size_t i = 0; i < a.ttft_quantiles.size(); ++i) {
    ExpectSameDouble(a.ttft_quantiles[i], b.ttft_quantiles[i], "quantile");
  }
  ASSERT_EQ(a.series.size(), b.series.size());
  for (size_t i = 0; i < a.series.size(); ++i) {
    ExpectSameDouble(a.series[i].t_s, b.series[i].t_s, "t_s");
    EXPECT_EQ(a.series[i].requests, b.series[i].requests);
    ExpectSameDouble(a.series[i].hit_rate, b.series[i].hit_rate, "series hit_rate");
    ExpectSameDouble(a.series[i].ttft_p50_s, b.series[i].ttft_p50_s, "series p50");
    ExpectSameDouble(a.series[i].ttft_p90_s, b.series[i].ttft_p90_s, "series p90");
    EXPECT_EQ(a.series[i].share, b.series[i].share);
  }
}

RunResult AwkwardRun() {
  RunResult r;
  r.source = "simulate";
  r.workload = "long-context \"quoted\"\n\ttab \x01 \xC3\xA9t\xC3\xA9 \\";
  r.strategy = "prefix-aware-least-loaded";
  r.instances = 4'294'967'295u;
  r.seed = 18'446'744'073'709'551'615ull;
  r.ttft_kind = "modelled";
  r.settings = {{"prefix_length", 2048}, {"load_pct", 0.7}, {"rate_rps", 1.0 / 3.0}};
  r.requests = 1'000'000'000'000ull;
  r.errors = 7;
  r.ttft_p50_s = 0.1;
  r.ttft_p90_s = 1e-300;
  r.ttft_p99_s = 5e-324;  // the smallest subnormal
  r.ttft_mean_s = 1.7976931348623157e308;
  r.e2e_p50_s = 123456789.123456789;
  r.e2e_p90_s = 2.0 / 3.0;
  r.itl_p50_s = -1;
  r.engine_ttft_p50_s = 0.063;
  r.engine_ttft_p90_s = 0.28;
  r.engine_ttft_p99_s = 1e21;
  r.hit_rate = 0.8200000000000001;
  r.throughput_rps = 34.2;
  r.output_tokens_per_s = 4377.6;
  r.share = {0.133, 0.154, 0.142857142857142857};
  r.overflow_rate = 0.021;
  r.extra = {{"lru_bound_hit_rate", 0.95}, {"routing_overhead_p50_s", 1.3e-3}};
  for (int i = 0; i <= 100; ++i) r.ttft_quantiles.push_back(0.05 + i * 0.0123);
  r.series = {SeriesPoint{0, 10, 0.25, 0.4, 0.7, {0.5, 0.5}}, SeriesPoint{10, 0, 0, 0, 0, {0, 0}}};
  return r;
}

// Every field survives ResultsJson -> ParseResultsJson bit for bit.
TEST(ResultsJsonTest, RoundTripIsExact) {
  const std::vector<RunResult> runs = {AwkwardRun(), RunResult{}};
  const std::string json = ResultsJson(runs);
  Result<std::vector<RunResult>> parsed = ParseResultsJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString() << "\n" << json;
  ASSERT_EQ(parsed->size(), 2u);
  ExpectSameRun(runs[0], (*parsed)[0]);
  ExpectSameRun(runs[1], (*parsed)[1]);
  EXPECT_EQ(ResultsJson(*parsed), json);
}

// Random bit patterns (where a parser that multiplies by powers of ten goes wrong) read back
// exactly.
TEST(ResultsJsonTest, RandomDoublesReadBackExactly) {
  std::mt19937_64 rng(42);
  RunResult r;
  while (r.ttft_quantiles.size() < 3000) {
    const uint64_t bits = rng();
    double d = 0;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) r.ttft_quantiles.push_back(d);
  }
  for (int i = 0; i < 1000; ++i) {
    r.ttft_quantiles.push_back(std::uniform_real_distribution<double>(0, 10)(rng));
  }
  Result<std::vector<RunResult>> parsed = ParseResultsJson(ResultsJson({r}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ExpectSameRun(r, (*parsed)[0]);
}

// NaN and infinity are written as null (never as invalid JSON) and read back as NaN.
TEST(ResultsJsonTest, NonFiniteBecomesNull) {
  RunResult r;
  r.ttft_p50_s = std::numeric_limits<double>::quiet_NaN();
  r.hit_rate = std::numeric_limits<double>::infinity();
  r.extra["bad"] = -std::numeric_limits<double>::infinity();
  r.share = {std::numeric_limits<double>::quiet_NaN()};
  const std::string json = ResultsJson({r});
  EXPECT_THAT(json, ::testing::Not(HasSubstr("nan")));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("inf")));
  EXPECT_THAT(json, HasSubstr("\"ttft_p50_s\": null"));
  Result<std::vector<RunResult>> parsed = ParseResultsJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_TRUE(std::isnan((*parsed)[0].ttft_p50_s));
  EXPECT_TRUE(std::isnan((*parsed)[0].hit_rate));
  EXPECT_TRUE(std::isnan((*parsed)[0].extra.at("bad")));
  EXPECT_TRUE(std::isnan((*parsed)[0].share[0]));
}

// A name that is not valid UTF-8 still yields JSON that parses (bad bytes become U+FFFD).
TEST(ResultsJsonTest, InvalidUtf8IsRepaired) {
  RunResult r;
  r.strategy = "bad\xFF\xC3";
  Result<std::vector<RunResult>> parsed = ParseResultsJson(ResultsJson({r}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ((*parsed)[0].strategy, "bad\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Numbers are plain JSON numbers in their natural form.
TEST(ResultsJsonTest, NumbersAreReadable) {
  RunResult r;
  r.settings["prefix_length"] = 2048;
  r.hit_rate = 0.931;
  const std::string json = ResultsJson({r});
  EXPECT_THAT(json, HasSubstr("\"prefix_length\": 2048"));
  EXPECT_THAT(json, HasSubstr("\"hit_rate\": 0.931"));
  EXPECT_EQ(ResultsJson({}), "[]\n");
  Result<std::vector<RunResult>> empty = ParseResultsJson("[]");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// Missing fields keep their defaults; unknown fields are ignored.
TEST(ParseResultsJsonTest, LenientAboutFields) {
  Result<std::vector<RunResult>> parsed =
      ParseResultsJson(R"([{"strategy": "random", "future_field": {"a": [1, 2]}, "hit_rate": 1}])");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ((*parsed)[0].strategy, "random");
  EXPECT_EQ((*parsed)[0].hit_rate, 1);
  EXPECT_EQ((*parsed)[0].itl_p50_s, -1);
  EXPECT_EQ((*parsed)[0].engine_ttft_p50_s, -1);
}

// Bad input is InvalidArgument with a message naming where it is wrong.
TEST(ParseResultsJsonTest, Errors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "results JSON"},
      {"[{]", "results JSON"},
      {"[] x", "results JSON"},
      {"{}", "runs: expected an array"},
      {"[1]", "runs[0]: expected an object"},
      {R"([{}, {"strategy": 3}])", "runs[1].strategy: expected a string"},
      {R"([{"instances": -1}])", "runs[0].instances: expected a non-negative integer"},
      {R"([{"instances": 4294967296}])", "runs[0].instances: 4294967296 is larger"},
      {R"([{"seed": 1.5}])", "runs[0].seed: expected a non-negative integer"},
      {R"([{"hit_rate": "high"}])", "runs[0].hit_rate: expected a number"},
      {R"([{"share": [0.5, "x"]}])", "runs[0].share[1]: expected a number"},
      {R"([{"share": 1}])", "runs[0].share: expected an array"},
      {R"([{"settings": {"load_pct": true}}])", "runs[0].settings.load_pct: expected a number"},
      {R"([{"extra": []}])", "runs[0].extra: expected an object"},
      {R"([{"series": {}}])", "runs[0].series: expected an array"},
      {R"([{"series": [{"t_s": 0}, 5]}])", "runs[0].series[1]: expected an object"},
      {R"([{"series": [{"requests": -2}]}])", "runs[0].series[0].requests"},
      {R"([{"series": [{"share": [null, {}]}]}])", "runs[0].series[0].share[1]"},
      {R"([{"ttft_p50_s": 1e400}])", "results JSON"},
  };
  for (const auto& [input, message] : cases) {
    Result<std::vector<RunResult>> parsed = ParseResultsJson(input);
    ASSERT_FALSE(parsed.ok()) << input;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << input;
    EXPECT_THAT(parsed.status().message(), HasSubstr(message)) << input;
  }
}

// ---- CSV and files ---------------------------------------------------------------------------

// One header line with the scalar fields, share, then the union of settings.* and extra.*
// columns; a run without a setting leaves its cell empty; strings are quoted when needed.
TEST(ResultsCsvTest, HeaderAndRows) {
  RunResult a;
  a.source = "simulate";
  a.workload = "long-context";
  a.strategy = "random";
  a.instances = 3;
  a.seed = 1;
  a.ttft_kind = "modelled";
  a.requests = 10;
  a.ttft_p50_s = 0.25;
  a.share = {0.25, 0.5, 0.25};
  a.settings["prefix_length"] = 2048;
  RunResult b = a;
  b.strategy = "odd, \"name\"";
  b.settings.clear();
  b.settings["load_pct"] = 70;
  b.extra["lru_bound_hit_rate"] = 0.9;
  b.hit_rate = std::numeric_limits<double>::quiet_NaN();

  const std::string csv = ResultsCsv({a, b});
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < csv.size();) {
    const size_t nl = csv.find('\n', pos);
    lines.push_back(csv.substr(pos, nl - pos));
    pos = nl + 1;
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "source,workload,strategy,instances,seed,ttft_kind,requests,errors,ttft_p50_s,"
            "ttft_p90_s,ttft_p99_s,ttft_mean_s,e2e_p50_s,e2e_p90_s,itl_p50_s,engine_ttft_p50_s,"
            "engine_ttft_p90_s,engine_ttft_p99_s,hit_rate,throughput_rps,output_tokens_per_s,"
            "overflow_rate,share,settings.load_pct,settings.prefix_length,"
            "extra.lru_bound_hit_rate");
  EXPECT_EQ(lines[1],
            "simulate,long-context,random,3,1,modelled,10,0,0.25,0,0,0,0,0,-1,-1,-1,-1,0,0,0,0,"
            "0.25;0.5;0.25,,2048,");
  EXPECT_EQ(lines[2],
            "simulate,long-context,\"odd, \"\"name\"\"\",3,1,modelled,10,0,0.25,0,0,0,0,0,-1,-1,"
            "-1,-1,,0,0,0,0.25;0.5;0.25,70,,0.9");
}

// WriteFile replaces the file's content; ReadFile returns it; failures name the path.
// Per tenant class: the share of prompt tokens found cached, and the P90 waits in the gateway's
// queue (a request not queued waited 0) and in the engine's, over successful requests only.
TEST(FlowFiguresTest, WhereEachTenantsTimeWent) {
  std::vector<RequestRecord> records;
  for (int i = 0; i < 10; ++i) {
    RequestRecord r = Ok(i, 0.1 + i, 0.2 + i);
    r.tenant = 0;
    r.prompt_tokens = 100;
    r.cached_tokens = 90;
    r.queue_s = i < 5 ? -1 : i;  // half not queued
    r.engine_queue_s = i / 10.0;
    records.push_back(r);
  }
  RequestRecord b = Ok(0, 0.5, 1);
  b.tenant = 1;
  b.prompt_tokens = 400;
  b.cached_tokens = 100;
  records.push_back(b);  // no engine queue reported
  RequestRecord unknown = Ok(1, 0.5, 1);
  unknown.tenant = 1;
  unknown.prompt_tokens = 1000;
  unknown.cached_tokens_known = false;  // left out of the hit rate
  records.push_back(unknown);
  RequestRecord refused;
  refused.tenant = 1;
  refused.error = refused.refused = true;
  refused.prompt_tokens = 1000;
  refused.queue_s = 50;
  records.push_back(refused);
  RunResult r;
  AddFlowFigures(records, {{"a", 0, 0}, {"b", 0, 0}}, /*ceiling=*/true, r);
  EXPECT_DOUBLE_EQ(r.extra.at("tenant.a.hit_rate"), 0.9);
  EXPECT_DOUBLE_EQ(r.extra.at("tenant.a.queue_wait_p90_s"), 8.1);  // 0 x5, 5..9
  // In flight from routing to the last byte, over the span 0..18.2 s: a's 0.2..4.2 s unqueued and
  // 0.2 s x5 after their waits; b's two completed 1 s each (the refused one never ran).
  EXPECT_NEAR(r.extra.at("tenant.a.in_flight_mean"), 12.0 / 18.2, 1e-9);
  EXPECT_NEAR(r.extra.at("tenant.b.in_flight_mean"), 2.0 / 18.2, 1e-9);
  EXPECT_DOUBLE_EQ(r.extra.at("tenant.a.engine_queue_p90_s"), 0.81);
  EXPECT_DOUBLE_EQ(r.extra.at("tenant.b.hit_rate"), 0.25);  // the refused request's tokens do not count
  EXPECT_DOUBLE_EQ(r.extra.at("tenant.b.queue_wait_p90_s"), 0);
  EXPECT_FALSE(r.extra.contains("tenant.b.engine_queue_p90_s"));
  const std::string lines = FlowLines({r}, {{"a", 0, 0}, {"b", 0, 0}});
  EXPECT_THAT(lines, HasSubstr("hit rate 90.0%, queue wait P90 8.100 s, engine queue P90 0.810 s\n"));
  EXPECT_THAT(lines, HasSubstr("hit rate 25.0%, queue wait P90 0.000 s\n"));
  // Without a ceiling (bench: the client does not see the gateway's queue) no queue wait, and no
  // hit rate for a class whose cached counts are all unknown.
  RunResult open;
  AddFlowFigures({unknown}, {{"a", 0, 0}, {"b", 0, 0}}, /*ceiling=*/false, open);
  EXPECT_FALSE(open.extra.contains("tenant.b.queue_wait_p90_s"));
  EXPECT_FALSE(open.extra.contains("tenant.b.hit_rate"));
  EXPECT_THAT(FlowLines({open}, {{"a", 0, 0}, {"b", 0, 0}}), HasSubstr(" completed/s\n"));
}

TEST(FileTest, WriteAndRead) {
  const std::string path = ::testing::TempDir() + "/report_results_test.json";
  ASSERT_TRUE(WriteFile(path, "first").ok());
  ASSERT_TRUE(WriteFile(path, "[1, 2]\n").ok());
  Result<std::string> content = ReadFile(path);
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "[1, 2]\n");

  const std::string bad = ::testing::TempDir() + "/no/such/dir/out.json";
  const Status s = WriteFile(bad, "x");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr(bad));
  EXPECT_EQ(ReadFile(bad).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace prefix_router::report
