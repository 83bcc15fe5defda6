#include "metrics/metrics.h"

#include <gtest/gtest.h>
#include <regex.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace prefix_router::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Renders a registry holding one gauge set to `v`, and returns the sample's value text.
std::string RenderedGaugeValue(double v) {
  Registry registry;
  registry.AddGauge("g", "").WithLabels({}).Set(v);
  const std::string text = registry.Render();
  const std::string prefix = "# HELP g \n# TYPE g gauge\ng ";
  EXPECT_EQ(text.substr(0, prefix.size()), prefix) << text;
  return text.substr(prefix.size(), text.size() - prefix.size() - 1);  // drop trailing '\n'
}

// The rest of the line after `prefix` in `text`, or "" if `prefix` is absent.
std::string ValueAfter(const std::string& text, const std::string& prefix) {
  const size_t start = text.find(prefix);
  if (start == std::string::npos) return "";
  const size_t value = start + prefix.size();
  return text.substr(value, text.find('\n', value) - value);
}

// Counter children render sorted by label values, whatever order they were created in.
TEST(MetricsTest, CounterFamilyRendersChildrenSortedByLabelValues) {
  Registry registry;
  auto& requests = registry.AddCounter("requests_total", "Requests routed.", {"pool", "code"});
  requests.WithLabels({"llama", "500"}).Inc();
  requests.WithLabels({"gemma", "200"}).Inc(3);
  requests.WithLabels({"llama", "200"}).Inc(7);
  EXPECT_EQ(registry.Render(),
            "# HELP requests_total Requests routed.\n"
            "# TYPE requests_total counter\n"
            "requests_total{pool=\"gemma\",code=\"200\"} 3\n"
            "requests_total{pool=\"llama\",code=\"200\"} 7\n"
            "requests_total{pool=\"llama\",code=\"500\"} 1\n");
}

// Families render in registration order, not sorted by name.
TEST(MetricsTest, FamiliesRenderInRegistrationOrder) {
  Registry registry;
  registry.AddCounter("zeta_total", "z").WithLabels({}).Inc();
  registry.AddGauge("alpha", "a").WithLabels({}).Set(2);
  EXPECT_EQ(registry.Render(),
            "# HELP zeta_total z\n# TYPE zeta_total counter\nzeta_total 1\n"
            "# HELP alpha a\n# TYPE alpha gauge\nalpha 2\n");
}

// Gauge Set replaces the value and Add moves it both ways.
TEST(MetricsTest, GaugeSetAndAdd) {
  Registry registry;
  Gauge& in_flight = registry.AddGauge("in_flight", "Requests in flight.", {"instance"}).WithLabels({"a"});
  in_flight.Set(5);
  in_flight.Add(2.5);
  in_flight.Add(-4);
  EXPECT_EQ(in_flight.Value(), 3.5);
  EXPECT_EQ(registry.Render(),
            "# HELP in_flight Requests in flight.\n"
            "# TYPE in_flight gauge\n"
            "in_flight{instance=\"a\"} 3.5\n");
}

// Buckets render cumulative (a value equal to a bound counts in it), +Inf = _count, then _sum.
TEST(MetricsTest, HistogramRendersCumulativeBucketsSumAndCount) {
  Registry registry;
  auto& latency = registry.AddHistogram("latency_seconds", "Latency.", {"pool"}, {0.5, 1, 2.5});
  Histogram& h = latency.WithLabels({"a"});
  for (double v : {0.25, 0.5, 1.0, 2.0, 3.0}) h.Observe(v);
  EXPECT_EQ(registry.Render(),
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{pool=\"a\",le=\"0.5\"} 2\n"
            "latency_seconds_bucket{pool=\"a\",le=\"1\"} 3\n"
            "latency_seconds_bucket{pool=\"a\",le=\"2.5\"} 4\n"
            "latency_seconds_bucket{pool=\"a\",le=\"+Inf\"} 5\n"
            "latency_seconds_sum{pool=\"a\"} 6.75\n"
            "latency_seconds_count{pool=\"a\"} 5\n");
}

// Bucket choice follows le: v <= bound; above the last bound, and NaN, go to +Inf.
TEST(MetricsTest, HistogramBucketBoundaries) {
  Histogram h({1, 2});
  h.Observe(-kInf);
  h.Observe(1);                   // equal to a bound: that bucket
  h.Observe(1.0000000000000002);  // just above: the next one
  h.Observe(2);
  h.Observe(2.5);
  h.Observe(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(h.BucketCount(0), 2u);
  EXPECT_EQ(h.BucketCount(1), 2u);
  EXPECT_EQ(h.BucketCount(2), 2u);
  EXPECT_EQ(h.Count(), 6u);
}

// A trailing +Inf bound is the implicit bucket and is not rendered twice.
TEST(MetricsTest, HistogramTrailingInfBoundIsImplicit) {
  Histogram h({1, kInf});
  EXPECT_EQ(h.UpperBounds(), std::vector<double>{1});
  h.Observe(5);
  EXPECT_EQ(h.BucketCount(1), 1u);
}

// Label values escape backslash, quote and newline; help escapes backslash and newline only.
TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  Registry registry;
  registry.AddCounter("escapes_total", "Path C:\\dir \"quoted\"\nsecond line", {"v"}).WithLabels({"a\\b\"c"}).Inc();
  EXPECT_EQ(registry.Render(),
            "# HELP escapes_total Path C:\\\\dir \"quoted\"\\nsecond line\n"
            "# TYPE escapes_total counter\n"
            "escapes_total{v=\"a\\\\b\\\"c\"} 1\n");
}

// A label value that is not valid UTF-8, holds a control character (LF, NUL, ...) or is over
// kMaxLabelValueBytes becomes "invalid": one series for all of them, nothing raw in the text.
TEST(MetricsTest, InvalidLabelValuesBecomeInvalid) {
  Registry registry;
  auto& family = registry.AddCounter("values_total", "Values.", {"v"});
  for (const std::string& bad : {std::string("a\nb"), std::string("nul\0x", 5), std::string("\xff\xfe"),
                                 std::string("\x7f"), std::string(kMaxLabelValueBytes + 1, 'x')}) {
    EXPECT_FALSE(IsValidLabelValue(bad)) << ::testing::PrintToString(bad);
    family.WithLabels({bad}).Inc();
  }
  EXPECT_TRUE(IsValidLabelValue("llama-3.1 8B \xc3\xa9t\xc3\xa9"));
  EXPECT_TRUE(IsValidLabelValue(std::string(kMaxLabelValueBytes, 'x')));
  family.WithLabels({"ok"}).Inc();
  EXPECT_EQ(registry.Render(),
            "# HELP values_total Values.\n"
            "# TYPE values_total counter\n"
            "values_total{v=\"invalid\"} 5\n"
            "values_total{v=\"ok\"} 1\n");
}

// A family at its series limit sends new label values to its all-"other" child and counts the
// overflow under the family's name; existing children keep counting on their own.
TEST(MetricsTest, SeriesLimitSendsNewValuesToOther) {
  Registry registry;
  auto& overflow = registry.AddCounter("overflow_total", "Overflows.", {"metric"});
  auto& family = registry.AddCounter("by_model_total", "By model.", {"model", "kind"});
  registry.SetSeriesLimit(3, &overflow);
  for (int i = 0; i < 1000; ++i) family.WithLabels({"m" + std::to_string(i % 500), "k"}).Inc();
  family.WithLabels({"m0", "k"}).Inc();
  EXPECT_EQ(registry.Render(),
            "# HELP overflow_total Overflows.\n"
            "# TYPE overflow_total counter\n"
            "overflow_total{metric=\"by_model_total\"} 994\n"
            "# HELP by_model_total By model.\n"
            "# TYPE by_model_total counter\n"
            "by_model_total{model=\"m0\",kind=\"k\"} 3\n"
            "by_model_total{model=\"m1\",kind=\"k\"} 2\n"
            "by_model_total{model=\"m2\",kind=\"k\"} 2\n"
            "by_model_total{model=\"other\",kind=\"other\"} 994\n");
}

// Metrics without labels render without braces; a label-less histogram keeps only le.
TEST(MetricsTest, MetricsWithoutLabelsRenderWithoutBraces) {
  Registry registry;
  registry.AddCounter("up_total", "Up.").WithLabels({}).Inc(2);
  registry.AddHistogram("size_bytes", "Size.", {}, {10}).WithLabels({}).Observe(4);
  EXPECT_EQ(registry.Render(),
            "# HELP up_total Up.\n# TYPE up_total counter\nup_total 2\n"
            "# HELP size_bytes Size.\n# TYPE size_bytes histogram\n"
            "size_bytes_bucket{le=\"10\"} 1\n"
            "size_bytes_bucket{le=\"+Inf\"} 1\n"
            "size_bytes_sum 4\n"
            "size_bytes_count 1\n");
}

// A family nobody has touched renders only its HELP and TYPE lines.
TEST(MetricsTest, EmptyFamilyRendersOnlyHelpAndType) {
  Registry registry;
  registry.AddCounter("errors_total", "Errors.", {"kind"});
  registry.AddHistogram("wait_seconds", "Wait.", {"pool"}, Histogram::LatencyBuckets());
  EXPECT_EQ(registry.Render(),
            "# HELP errors_total Errors.\n# TYPE errors_total counter\n"
            "# HELP wait_seconds Wait.\n# TYPE wait_seconds histogram\n");
  EXPECT_EQ(Registry().Render(), "");
}

// Every Render runs every collector first, so gauges show live state at scrape time.
TEST(MetricsTest, CollectorRunsOnEachRender) {
  Registry registry;
  Gauge& healthy = registry.AddGauge("healthy_instances", "Healthy.").WithLabels({});
  int calls = 0;
  registry.AddCollector([&] { healthy.Set(++calls * 10); });
  EXPECT_NE(registry.Render().find("healthy_instances 10\n"), std::string::npos);
  EXPECT_NE(registry.Render().find("healthy_instances 20\n"), std::string::npos);
  EXPECT_EQ(calls, 2);
}

// Four threads incrementing one child lose no increments.
TEST(MetricsTest, ConcurrentIncrementsAreExact) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100'000;
  Registry registry;
  auto& family = registry.AddCounter("hits_total", "Hits.", {"pool"});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Counter& c = family.WithLabels({"a"});  // every thread resolves the child itself
      for (int i = 0; i < kPerThread; ++i) c.Inc();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(family.WithLabels({"a"}).Value(), uint64_t{kThreads} * kPerThread);
  EXPECT_NE(registry.Render().find("hits_total{pool=\"a\"} 400000\n"), std::string::npos);
}

// Four threads observing into one histogram lose no observations, bucket counts or sum.
TEST(MetricsTest, ConcurrentObservationsAreExact) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 100'000;
  Registry registry;
  Histogram& h = registry.AddHistogram("obs", "Obs.", {}, {1, 2}).WithLabels({});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // Halves and small integers: every partial sum is exact in a double.
      for (int i = 0; i < kPerThread; ++i) h.Observe(i % 2 == 0 ? 0.5 : 3);
    });
  }
  for (auto& t : threads) t.join();
  constexpr uint64_t kTotal = uint64_t{kThreads} * kPerThread;
  EXPECT_EQ(h.Count(), kTotal);
  EXPECT_EQ(h.BucketCount(0), kTotal / 2);
  EXPECT_EQ(h.BucketCount(1), 0u);
  EXPECT_EQ(h.BucketCount(2), kTotal / 2);
  EXPECT_EQ(h.Sum(), 0.5 * (kTotal / 2) + 3.0 * (kTotal / 2));
  EXPECT_NE(registry.Render().find("obs_sum 700000\nobs_count 400000\n"), std::string::npos);
}

// Scrapes during concurrent updates and child creation always show +Inf equal to _count.
TEST(MetricsTest, RenderDuringUpdatesIsConsistent) {
  Registry registry;
  Histogram& h = registry.AddHistogram("h", "H.", {}, {1}).WithLabels({});
  auto& hits = registry.AddCounter("hits_total", "Hits.", {"shard"});
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 20'000; ++i) {
        h.Observe(i % 3);
        hits.WithLabels({std::to_string((i + t) % 50)}).Inc();
      }
    });
  }
  std::thread scraper([&] {
    while (!done.load()) {
      const std::string text = registry.Render();
      const std::string inf_value = ValueAfter(text, "h_bucket{le=\"+Inf\"} ");
      const std::string count_value = ValueAfter(text, "h_count ");
      ASSERT_FALSE(count_value.empty()) << text;
      EXPECT_EQ(inf_value, count_value);
    }
  });
  for (auto& w : writers) w.join();
  done.store(true);
  scraper.join();
  EXPECT_EQ(h.Count(), 40'000u);
  uint64_t total = 0;
  for (int shard = 0; shard < 50; ++shard) {
    total += hits.WithLabels({std::to_string(shard)}).Value();
  }
  EXPECT_EQ(total, 40'000u);
}

// The same label values give the same child, still valid after many other children were added.
TEST(MetricsTest, WithLabelsReturnsSameReferenceForSameValues) {
  Registry registry;
  auto& family = registry.AddGauge("load", "Load.", {"instance", "pool"});
  Gauge& first = family.WithLabels({"a", "p"});
  EXPECT_NE(&first, &family.WithLabels({"a", "q"}));
  EXPECT_NE(&first, &family.WithLabels({"b", "p"}));
  for (int i = 0; i < 1000; ++i) family.WithLabels({std::to_string(i), "p"});
  const std::string a = "a";  // a runtime string, not the same literal
  EXPECT_EQ(&first, &family.WithLabels({a, "p"}));
}

// The per-thread cache of children (ThreadChildCache) returns each thread the child of exactly
// the values it asks for: many values, so that cache slots collide, values that concatenate
// alike, two families with the same values, and several threads at once.
TEST(MetricsTest, CachedLookupsFindTheRightChild) {
  Registry registry;
  auto& a = registry.AddCounter("a_total", "A.", {"x", "y"});
  auto& b = registry.AddCounter("b_total", "B.", {"x", "y"});
  constexpr int kThreads = 4;
  constexpr int kValues = 1000;
  constexpr int kRounds = 5;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kValues; ++i) {
          const std::string v = std::to_string(i);
          a.WithLabels({v, "1"}).Inc();
          a.WithLabels({v + "1", ""}).Inc(2);  // the same bytes as {v, "1"}, split elsewhere
          b.WithLabels({v, "1"}).Inc(3);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  constexpr uint64_t kEach = kThreads * kRounds;
  for (int i = 0; i < kValues; ++i) {
    const std::string v = std::to_string(i);
    EXPECT_EQ(a.WithLabels({v, "1"}).Value(), kEach) << v;
    EXPECT_EQ(a.WithLabels({v + "1", ""}).Value(), kEach * 2) << v;
    EXPECT_EQ(b.WithLabels({v, "1"}).Value(), kEach * 3) << v;
  }
}

// A family made where a destroyed one was (the same address, the same name and values) starts
// from its own children, never from those the cache knew for the old one.
TEST(MetricsTest, ANewFamilyDoesNotFindAnOldFamilysChildren) {
  for (int i = 0; i < 50; ++i) {
    auto registry = std::make_unique<Registry>();
    auto& family = registry->AddCounter("c_total", "C.", {"x"});
    family.WithLabels({"v"}).Inc();
    EXPECT_EQ(family.WithLabels({"v"}).Value(), 1u) << "round " << i;
    EXPECT_EQ(registry->Render(), "# HELP c_total C.\n# TYPE c_total counter\nc_total{x=\"v\"} 1\n");
  }
}

// Doubles render in shortest round-trip form, with Prometheus's spellings of Inf and NaN.
TEST(MetricsTest, DoublesRenderShortestRoundTrip) {
  EXPECT_EQ(RenderedGaugeValue(0.1), "0.1");
  EXPECT_EQ(RenderedGaugeValue(3), "3");
  EXPECT_EQ(RenderedGaugeValue(-2.5), "-2.5");
  EXPECT_EQ(RenderedGaugeValue(0.1 + 0.2), "0.30000000000000004");
  // Fixed for decimal exponents in [-4, 6), scientific outside, as the Go client writes them.
  EXPECT_EQ(RenderedGaugeValue(0.0001), "0.0001");
  EXPECT_EQ(RenderedGaugeValue(0.00001), "1e-05");
  EXPECT_EQ(RenderedGaugeValue(700000), "700000");
  EXPECT_EQ(RenderedGaugeValue(1e6), "1e+06");
  EXPECT_EQ(RenderedGaugeValue(-1234567), "-1.234567e+06");
  EXPECT_EQ(RenderedGaugeValue(0), "0");
  EXPECT_EQ(RenderedGaugeValue(kInf), "+Inf");
  EXPECT_EQ(RenderedGaugeValue(-kInf), "-Inf");
  EXPECT_EQ(RenderedGaugeValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  for (double v : {1e-7, 123456789.125, 1e300, 5e-324, 2.0 / 3}) {
    EXPECT_EQ(std::strtod(RenderedGaugeValue(v).c_str(), nullptr), v) << v;
  }
}

// Integer-valued samples (counters, bucket counts) never carry a decimal point.
TEST(MetricsTest, IntegersRenderWithoutDecimalPoint) {
  Registry registry;
  registry.AddCounter("big_total", "Big.").WithLabels({}).Inc(std::numeric_limits<uint64_t>::max());
  registry.AddCounter("zero_total", "Zero.").WithLabels({});
  const std::string text = registry.Render();
  EXPECT_NE(text.find("big_total 18446744073709551615\n"), std::string::npos) << text;
  EXPECT_NE(text.find("zero_total 0\n"), std::string::npos) << text;
}

// Every sample line of a registry using every feature matches the exposition line grammar.
TEST(MetricsTest, RenderedSampleLinesParseBack) {
  Registry registry;
  auto& c = registry.AddCounter("route:decisions_total", "Decisions.", {"decision", "pool"});
  c.WithLabels({"affinity", "llama"}).Inc();
  c.WithLabels({"spill \"x\"\nnext", "a\\b"}).Inc(2);
  registry.AddGauge("ratio", "Ratio\nwith newline.").WithLabels({}).Set(-kInf);
  auto& h = registry.AddHistogram("upstream_seconds", "Upstream.", {"instance"}, Histogram::LatencyBuckets());
  h.WithLabels({"a"}).Observe(0.003);
  h.WithLabels({"b"}).Observe(100);
  registry.AddCounter("unused_total", "Unused.", {"x"});

  // The grammar's regex in POSIX ERE (\S as [^[:space:]]); glibc's regex.h rather than
  // std::regex, whose libstdc++ 12 headers warn spuriously (-Wmaybe-uninitialized) under ASan.
  regex_t sample_line;
  ASSERT_EQ(regcomp(&sample_line, R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [^[:space:]]+$)re", REG_EXTENDED | REG_NOSUB),
            0);
  const std::string text = registry.Render();
  std::istringstream lines(text);
  int samples = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("#")) continue;
    EXPECT_EQ(regexec(&sample_line, line.c_str(), 0, nullptr, 0), 0) << line;
    ++samples;
  }
  regfree(&sample_line);
  EXPECT_NE(text.find("upstream_seconds_bucket{instance=\"a\",le=\"0.0001\"} 0\n"), std::string::npos);
  EXPECT_EQ(samples, 2 + 1 + 2 * (18 + 1 + 2));
}

// Metric and label names follow Prometheus's rules; "__" label names are reserved.
TEST(MetricsTest, NameValidation) {
  EXPECT_TRUE(IsValidMetricName("http_requests_total"));
  EXPECT_TRUE(IsValidMetricName(":recording:rule_1"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_TRUE(IsValidLabelName("pool_2"));
  EXPECT_TRUE(IsValidLabelName("_x"));
  EXPECT_FALSE(IsValidLabelName(""));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("2a"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
}

// ExponentialBuckets multiplies by factor; LatencyBuckets spans 100 us to 60 s, DurationBuckets
// on to an hour, increasing.
TEST(MetricsTest, BucketHelpers) {
  EXPECT_EQ(Histogram::ExponentialBuckets(0.001, 2, 4), (std::vector<double>{0.001, 0.002, 0.004, 0.008}));
  EXPECT_EQ(Histogram::ExponentialBuckets(1, 10, 3), (std::vector<double>{1, 10, 100}));
  const std::vector<double> latency = Histogram::LatencyBuckets();
  ASSERT_EQ(latency.size(), 18u);
  EXPECT_EQ(latency.front(), 0.0001);
  EXPECT_EQ(latency.back(), 60);
  EXPECT_TRUE(std::is_sorted(latency.begin(), latency.end()));
  EXPECT_EQ(std::adjacent_find(latency.begin(), latency.end()), latency.end());
  // Request durations go on to an hour (a long generation outlasts a minute).
  const std::vector<double> duration = Histogram::DurationBuckets();
  EXPECT_TRUE(std::equal(latency.begin(), latency.end(), duration.begin()));
  EXPECT_EQ(duration.back(), 3600);
  EXPECT_TRUE(std::is_sorted(duration.begin(), duration.end()));
  EXPECT_EQ(std::adjacent_find(duration.begin(), duration.end()), duration.end());
}

// A wrong number of label values asserts in debug; in release it gets a child never rendered.
TEST(MetricsDeathTest, WrongLabelCount) {
  Registry registry;
  auto& family = registry.AddCounter("calls_total", "Calls.", {"pool"});
#ifdef NDEBUG
  family.WithLabels({"a", "extra"}).Inc();
  family.WithLabels({}).Inc();
  EXPECT_EQ(registry.Render(), "# HELP calls_total Calls.\n# TYPE calls_total counter\n");
#else
  EXPECT_DEATH(family.WithLabels({"a", "extra"}), "one value per label name");
#endif
}

// Invalid or duplicate names assert in debug; in release the family is left out of the scrape.
TEST(MetricsDeathTest, InvalidNames) {
#ifdef NDEBUG
  Registry registry;
  registry.AddCounter("bad-name", "x").WithLabels({}).Inc();
  registry.AddCounter("ok_total", "x", {"__reserved"}).WithLabels({"v"}).Inc();
  registry.AddHistogram("h", "x", {"le"}, {1}).WithLabels({"v"}).Observe(1);
  registry.AddGauge("dup", "first").WithLabels({}).Set(1);
  registry.AddGauge("dup", "second").WithLabels({}).Set(2);
  EXPECT_EQ(registry.Render(), "# HELP dup first\n# TYPE dup gauge\ndup 1\n");
#else
  EXPECT_DEATH(Registry().AddCounter("bad-name", "x"), "metric name");
  EXPECT_DEATH(Registry().AddCounter("ok_total", "x", {"__reserved"}), "label names");
  EXPECT_DEATH(Registry().AddGauge("ok", "x", {"a", "a"}), "distinct");
  EXPECT_DEATH(Registry().AddHistogram("h", "x", {"le"}, {1}), "reserved");
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddGauge("dup", "first");
        registry.AddGauge("dup", "second");
      },
      "registered twice");
#endif
}

}  // namespace
}  // namespace prefix_router::metrics
