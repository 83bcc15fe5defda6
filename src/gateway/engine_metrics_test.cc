#include "gateway/engine_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace prefix_router::gateway {
namespace {

// The shape vLLM V1 exports: HELP/TYPE lines, a model_name label, other metrics around.
TEST(EngineMetricsTest, ReadsVllmGauges) {
  const char* text =
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"llama\"} 3.0\n"
      "# TYPE vllm:num_requests_waiting gauge\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"llama\"} 7.0\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"llama\"} 0.25\n"
      "vllm:prompt_tokens_total{model_name=\"llama\"} 123456.0\n";
  auto r = ParseEngineMetrics(text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->running, 3);
  EXPECT_EQ(r->waiting, 7);
  EXPECT_DOUBLE_EQ(r->kv_usage, 0.25);
}

// The prefix-cache counters (tokens), summed over engines; both or neither are reported, and
// hits cannot exceed queries.
TEST(EngineMetricsTest, ReadsPrefixCacheCounters) {
  const std::string base = "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n";
  auto r = ParseEngineMetrics(base +
                              "# TYPE vllm:prefix_cache_queries counter\n"
                              "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"llama\"} 1.5e6\n"
                              "vllm:prefix_cache_queries_total{engine=\"1\",model_name=\"llama\"} 500000\n"
                              "vllm:prefix_cache_queries_created{engine=\"0\",model_name=\"llama\"} 1.7e9\n"
                              "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"llama\"} 1.2e6\n"
                              "vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"llama\"} 300000\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->prefix_cache_queries, 2e6);
  EXPECT_DOUBLE_EQ(r->prefix_cache_hits, 1.5e6);
  r = ParseEngineMetrics(base + "vllm:prefix_cache_queries_total 10\n");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan(r->prefix_cache_queries));
  EXPECT_TRUE(std::isnan(r->prefix_cache_hits));
  EXPECT_FALSE(ParseEngineMetrics(base + "vllm:prefix_cache_queries_total 10\nvllm:prefix_cache_hits_total 11\n").ok());
  EXPECT_FALSE(ParseEngineMetrics(base + "vllm:prefix_cache_queries_total -1\nvllm:prefix_cache_hits_total 0\n").ok());
}

// Data-parallel engines are one instance: counts add up, usage is their mean.
TEST(EngineMetricsTest, SumsSeriesOfSeveralEngines) {
  const char* text =
      "vllm:num_requests_running{engine=\"0\"} 2\n"
      "vllm:num_requests_running{engine=\"1\"} 5\n"
      "vllm:num_requests_waiting{engine=\"0\"} 0\n"
      "vllm:num_requests_waiting{engine=\"1\"} 1\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.2\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.6\n";
  auto r = ParseEngineMetrics(text);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->running, 7);
  EXPECT_EQ(r->waiting, 1);
  EXPECT_NEAR(r->kv_usage, 0.4, 1e-12);
}

// Up to vLLM 0.11 usage was gpu_cache_usage_perc; 0.9.2-0.10 export both: the new name wins.
TEST(EngineMetricsTest, OldUsageNameIsTheFallback) {
  auto old_only = ParseEngineMetrics("vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.5\n");
  ASSERT_TRUE(old_only.ok());
  EXPECT_DOUBLE_EQ(old_only->kv_usage, 0.5);
  EXPECT_EQ(old_only->waiting, -1);  // not reported
  auto both =
      ParseEngineMetrics("vllm:gpu_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc 0.75\nvllm:num_requests_waiting 0\n");
  ASSERT_TRUE(both.ok());
  EXPECT_DOUBLE_EQ(both->kv_usage, 0.75);
  EXPECT_EQ(both->running, -1);
}

// Label values may hold escaped quotes and braces; CRLF, timestamps and +Inf elsewhere are fine.
TEST(EngineMetricsTest, LabelsTimestampsAndOtherMetrics) {
  const char* text =
      "other_metric{a=\"x\"} +Inf\r\n"
      "vllm:num_requests_running{model_name=\"a \\\"b\\\" {c}\",x=\"\\\\\"} 4 1700000000000\r\n"
      "   \r\n"
      "vllm:num_requests_waiting 2\r\n";
  auto r = ParseEngineMetrics(text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->running, 4);
  EXPECT_EQ(r->waiting, 2);
  EXPECT_TRUE(std::isnan(r->kv_usage));
}

// Text that is not a vLLM-compatible engine's, or impossible values, are refused with the line.
TEST(EngineMetricsTest, RefusesMissingAndImpossibleValues) {
  EXPECT_EQ(ParseEngineMetrics("").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseEngineMetrics("up 1\n# vllm:num_requests_running 3\n").status().code(), StatusCode::kNotFound);
  for (const char* bad :
       {"vllm:num_requests_running -1\n", "vllm:num_requests_running NaN\n", "vllm:num_requests_running +Inf\n",
        "vllm:num_requests_running 3e9\n", "vllm:num_requests_running\n", "vllm:num_requests_running{a=\"} 1\n",
        "vllm:num_requests_running 1x\n", "vllm:kv_cache_usage_perc 1.5\n"}) {
    auto r = ParseEngineMetrics(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("metrics line 1"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace prefix_router::gateway
