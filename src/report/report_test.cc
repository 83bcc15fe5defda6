#include "report/report.h"

#include <limits>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/policy.h"
#include "report/chart.h"

namespace prefix_router::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunResult MakeRun(const std::string& strategy, double p50, double p90, double rps, uint64_t seed = 1) {
  RunResult r;
  r.source = "simulate";
  r.workload = "long-context";
  r.strategy = strategy;
  r.instances = 7;
  r.seed = seed;
  r.ttft_kind = "modelled";
  r.requests = 1000;
  r.ttft_p50_s = p50;
  r.ttft_p90_s = p90;
  r.ttft_p99_s = p90 * 1.5;
  r.hit_rate = strategy == "random" ? 0.248 : 0.931;
  r.throughput_rps = rps;
  r.share = {0.139, 0.141, 0.143, 0.145, 0.147, 0.143, 0.142};
  for (int i = 0; i <= 100; ++i) r.ttft_quantiles.push_back(p50 * (0.2 + i / 50.0));
  return r;
}

std::vector<RunResult> ThreeStrategies() {
  return {MakeRun("random", 0.4, 0.7, 30), MakeRun("least-outstanding-requests", 0.38, 0.6, 30.3),
          MakeRun("prefix-aware", 0.1, 0.35, 33)};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::string LineStartingWith(const std::string& text, const std::string& prefix) {
  for (const std::string& l : Lines(text)) {
    if (l.rfind(prefix, 0) == 0) return l;
  }
  return "";
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

// The <svg>...</svg> whose aria-label starts with `label`.
std::string SvgWithLabel(const std::string& html, const std::string& label) {
  const size_t at = html.find("aria-label=\"" + label);
  if (at == std::string::npos) return "";
  const size_t start = html.rfind("<svg", at);
  const size_t end = html.find("</svg>", at);
  return html.substr(start, end - start);
}

// ---- ComparisonTable -------------------------------------------------------------------------

// Each strategy's TTFT and throughput changes are computed against the random run.
TEST(ComparisonTableTest, ChangesAgainstRandom) {
  const std::string t = ComparisonTable(ThreeStrategies());
  EXPECT_THAT(t, HasSubstr("workload long-context, 7 instances, seed 1"));
  EXPECT_THAT(t, HasSubstr("TTFT modelled"));
  const std::string pa = LineStartingWith(t, "prefix-aware ");
  EXPECT_THAT(pa, HasSubstr("0.100 s -75.0%"));
  EXPECT_THAT(pa, HasSubstr("0.350 s -50.0%"));
  EXPECT_THAT(pa, HasSubstr("33.0 rps +10.0%"));
  EXPECT_THAT(pa, HasSubstr("93.1%"));
  EXPECT_THAT(pa, HasSubstr("13.9-14.7%"));
  const std::string lor = LineStartingWith(t, "least-outstanding-requests ");
  EXPECT_THAT(lor, HasSubstr("-5.0%"));
  EXPECT_THAT(lor, HasSubstr("+1.0%"));
  const std::string random = LineStartingWith(t, "random ");
  ASSERT_FALSE(random.empty());
  EXPECT_THAT(random, Not(HasSubstr("+")));
  EXPECT_THAT(random, Not(HasSubstr("-7")));
}

// Columns line up: every value of a column starts at the same offset as its header.
TEST(ComparisonTableTest, ColumnsAreAligned) {
  const std::vector<std::string> lines = Lines(ComparisonTable(ThreeStrategies()));
  ASSERT_GE(lines.size(), 5u);
  const size_t hit = lines[1].find("hit rate");
  ASSERT_NE(hit, std::string::npos);
  EXPECT_EQ(lines[2].find("24.8%"), hit);
  EXPECT_EQ(lines[4].find("93.1%"), hit);
}

// The gateway's default strategy (core/policy.h) is marked wherever its rows appear; a variant
// of it (another load weight, key normalisation) is not the default and is not marked.
TEST(ComparisonTableTest, MarksTheDefaultStrategy) {
  std::vector<RunResult> runs = ThreeStrategies();
  runs.push_back(MakeRun(std::string(StrategyName(kDefaultStrategy)), 0.09, 0.3, 33));
  runs.push_back(MakeRun(std::string(StrategyName(kDefaultStrategy)) + "+keynorm", 0.09, 0.3, 33));
  const std::string t = ComparisonTable(runs);
  const std::string name(StrategyName(kDefaultStrategy));
  EXPECT_THAT(LineStartingWith(t, name + " (default) "), HasSubstr("0.090 s"));
  EXPECT_THAT(LineStartingWith(t, name + "+keynorm "), HasSubstr("0.090 s"));
  EXPECT_THAT(t, Not(HasSubstr("+keynorm (default)")));
  EXPECT_THAT(LineStartingWith(t, "random "), Not(HasSubstr("(default)")));
}

// With several seeds, each run is compared with the random run of its own seed.
TEST(ComparisonTableTest, BaselinePerSeed) {
  std::vector<RunResult> runs = {MakeRun("random", 0.4, 0.8, 30, 1), MakeRun("random", 0.5, 1.0, 30, 2),
                                 MakeRun("prefix-aware", 0.1, 0.4, 30, 1), MakeRun("prefix-aware", 0.1, 0.4, 30, 2)};
  const std::string t = ComparisonTable(runs);
  EXPECT_THAT(t, HasSubstr("seeds 1 2"));
  EXPECT_THAT(LineStartingWith(t, "prefix-aware seed 1"), HasSubstr("-75.0%"));
  EXPECT_THAT(LineStartingWith(t, "prefix-aware seed 2"), HasSubstr("-80.0%"));
}

// In a load sweep each run is compared with the random run at the same load.
TEST(ComparisonTableTest, BaselineWithMatchingSettings) {
  std::vector<RunResult> runs;
  for (double load : {30.0, 90.0}) {
    RunResult random = MakeRun("random", load / 150, 1, 30);
    RunResult pa = MakeRun("prefix-aware", load / 300, 1, 30);
    random.settings = {{"load_pct", load}, {"rate_rps", load}};
    pa.settings = {{"load_pct", load}, {"rate_rps", load}, {"prefix_length", 2048}};
    runs.push_back(random);
    runs.push_back(pa);
  }
  const std::string t = ComparisonTable(runs);
  EXPECT_THAT(LineStartingWith(t, "prefix-aware load_pct=30 "), HasSubstr("0.100 s -50.0%"));
  EXPECT_THAT(t, Not(HasSubstr("rate_rps=")));  // derived from load_pct: not in the labels
  EXPECT_THAT(LineStartingWith(t, "prefix-aware load_pct=90"), HasSubstr("0.300 s -50.0%"));
}

// Without a random run there is nothing to compare with, so no change is printed.
TEST(ComparisonTableTest, NoRandomNoChange) {
  const std::string t = ComparisonTable({MakeRun("prefix-aware", 0.1, 0.4, 30)});
  EXPECT_THAT(t, Not(HasSubstr("+")));
  EXPECT_EQ(ComparisonTable({}), "no runs\n");
}

// Engine TTFT columns appear only when runs report them; bounds and routing overhead likewise;
// a share outside the band is marked.
TEST(ComparisonTableTest, OptionalColumns) {
  std::vector<RunResult> runs = ThreeStrategies();
  EXPECT_THAT(ComparisonTable(runs), Not(HasSubstr("engine P50")));
  EXPECT_THAT(ComparisonTable(runs), Not(HasSubstr("LRU bound")));
  for (RunResult& r : runs) {
    r.ttft_kind = "client";
    r.engine_ttft_p50_s = r.ttft_p50_s / 2;
    r.engine_ttft_p90_s = r.ttft_p90_s / 2;
    r.extra["lru_bound_hit_rate"] = 0.95;
    r.extra["routing_overhead_p50_s"] = 0.0013;
  }
  runs[0].share[0] = 0.12;
  const std::string t = ComparisonTable(runs);
  EXPECT_THAT(t, HasSubstr("engine P50"));
  EXPECT_THAT(t, HasSubstr("TTFT client-measured"));
  EXPECT_THAT(t, HasSubstr("LRU bound"));
  EXPECT_THAT(t, HasSubstr("95.0%"));
  EXPECT_THAT(t, HasSubstr("routing P50"));
  EXPECT_THAT(LineStartingWith(t, "prefix-aware"), HasSubstr("0.050 s -75.0%"));
  EXPECT_THAT(LineStartingWith(t, "random"), HasSubstr("12.0-14.7%*"));
  EXPECT_THAT(LineStartingWith(t, "prefix-aware"), Not(HasSubstr("*")));
}

// ---- ReportHtml ------------------------------------------------------------------------------

// The page loads nothing from anywhere: no URLs, scripts, imports or url() references.
TEST(ReportHtmlTest, SelfContained) {
  std::vector<RunResult> runs = ThreeStrategies();
  for (RunResult& r : runs) r.series = {SeriesPoint{0, 10, 0.5, 0.2, 0.3, {}}};
  const std::string html = ReportHtml(runs, ReportOptions{"t", {"made with http-free notes"}});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_THAT(html, HasSubstr("<meta name=\"viewport\""));
  for (const char* banned : {"http://", "https://", "<script", "@import", "url(", "<link", "<img"}) {
    EXPECT_THAT(html, Not(HasSubstr(banned))) << banned;
  }
  EXPECT_EQ(Count(html, "<svg"), Count(html, "</svg>"));
  EXPECT_THAT(html, HasSubstr("viewBox=\"0 0 440 280\" width=\"100%\""));
}

// Strategy names, notes and titles are escaped wherever they appear.
TEST(ReportHtmlTest, EscapesText) {
  std::vector<RunResult> runs = ThreeStrategies();
  runs[2].strategy = "<i>&\"x\"";
  const std::string html = ReportHtml(runs, ReportOptions{"<title>", {"a < b & c"}});
  EXPECT_THAT(html, Not(HasSubstr("<i>")));
  EXPECT_THAT(html, Not(HasSubstr("&\"x")));
  EXPECT_THAT(html, HasSubstr("&lt;i&gt;&amp;&quot;x&quot;"));
  EXPECT_THAT(html, HasSubstr("<h1>&lt;title&gt;</h1>"));
  EXPECT_THAT(html, HasSubstr("a &lt; b &amp; c"));
}

// The TTFT CDF has one polyline per strategy, each with the 101 quantile points.
TEST(ReportHtmlTest, OneCdfLinePerStrategy) {
  const std::string html = ReportHtml(ThreeStrategies(), ReportOptions{});
  const std::string cdf = SvgWithLabel(html, "TTFT cumulative distribution");
  ASSERT_FALSE(cdf.empty());
  EXPECT_EQ(Count(cdf, "<polyline"), 3u);
  const size_t points = cdf.find("points=\"");
  const size_t end = cdf.find('"', points + 8);
  EXPECT_EQ(Count(cdf.substr(points, end - points), ","), 101u);
  EXPECT_THAT(html, HasSubstr("<title>least-outstanding-requests</title>"));
  EXPECT_THAT(html, HasSubstr("(log scale)"));  // TTFTs spread over more than a decade
}

// The comparison table, the published reference and the balance band are on the page.
TEST(ReportHtmlTest, ComparisonAndBalance) {
  std::vector<RunResult> runs = ThreeStrategies();
  runs[1].share[3] = 0.20;
  const std::string html = ReportHtml(runs, ReportOptions{});
  EXPECT_THAT(html, HasSubstr("-75.0%"));
  EXPECT_THAT(html, HasSubstr("+10.0%"));
  EXPECT_THAT(html, HasSubstr("Published reference"));
  EXPECT_THAT(html, HasSubstr("13.3%-15.4%"));
  EXPECT_EQ(Count(html, "class=\"band\""), 3u);  // one share chart per strategy
  EXPECT_THAT(html, HasSubstr("outside the band"));
  EXPECT_EQ(Count(html, "class=\"outside\""), 1u);
}

// Time series charts appear when runs carry series; empty windows break the line.
TEST(ReportHtmlTest, SeriesCharts) {
  EXPECT_THAT(ReportHtml(ThreeStrategies(), {}), Not(HasSubstr("hit rate over time")));
  std::vector<RunResult> runs = ThreeStrategies();
  runs[0].series = {SeriesPoint{0, 10, 0.2, 0.4, 0.6, {}}, SeriesPoint{10, 0, 0, 0, 0, {}},
                    SeriesPoint{20, 10, 0.3, 0.4, 0.6, {}}, SeriesPoint{30, 12, 0.3, 0.4, 0.6, {}}};
  const std::string html = ReportHtml(runs, {});
  const std::string hit = SvgWithLabel(html, "KV cache hit rate over time");
  ASSERT_FALSE(hit.empty());
  EXPECT_EQ(Count(hit, "<polyline"), 2u);
  EXPECT_FALSE(SvgWithLabel(html, "TTFT P50 over time").empty());
}

// A sweep section appears only when runs of one strategy differ in a swept setting.
TEST(ReportHtmlTest, SweepSectionOnlyForSweeps) {
  std::vector<RunResult> runs = ThreeStrategies();
  for (RunResult& r : runs) r.settings = {{"prefix_length", 2048}, {"load_pct", 70}};
  const std::string plain = ReportHtml(runs, {});
  EXPECT_THAT(plain, Not(HasSubstr("id=\"sweeps\"")));
  EXPECT_THAT(plain, Not(HasSubstr(" sweep:")));

  for (double len : {1024.0, 8192.0, 32768.0}) {
    RunResult r = MakeRun("prefix-aware", 0.1 * len / 2048, 0.4, 33);
    r.settings = {{"prefix_length", len}, {"load_pct", 70}, {"rate_rps", len}};
    r.extra["lru_bound_hit_rate"] = 0.9;
    r.overflow_rate = 0.01;
    runs.push_back(r);
  }
  const std::string html = ReportHtml(runs, {});
  EXPECT_THAT(html, HasSubstr("id=\"sweeps\""));
  EXPECT_THAT(html, HasSubstr("prefix_length sweep: workload long-context"));
  EXPECT_THAT(html, Not(HasSubstr("load_pct sweep")));
  EXPECT_THAT(html, HasSubstr("Fixed: load_pct 70, instances 7"));
  const std::string ttft = SvgWithLabel(html, "TTFT P50 and P90 against prefix_length");
  ASSERT_FALSE(ttft.empty());
  EXPECT_EQ(Count(ttft, "<polyline"), 2u);  // prefix-aware P50 and P90
  EXPECT_THAT(ttft, HasSubstr(">32768<"));  // ticks at the swept values
  EXPECT_THAT(SvgWithLabel(html, "KV cache hit rate against prefix_length"), HasSubstr("LRU bound"));
  EXPECT_FALSE(SvgWithLabel(html, "overflow rate against prefix_length").empty());
}

// A fleet-size sweep compares random and prefix-aware at each size.
TEST(ReportHtmlTest, InstancesSweep) {
  std::vector<RunResult> runs;
  for (uint32_t n : {4u, 7u, 16u}) {
    for (const char* s : {"random", "prefix-aware"}) {
      RunResult r = MakeRun(s, 0.4, 0.8, 30);
      r.instances = n;
      r.share.assign(n, 1.0 / n);
      runs.push_back(r);
    }
  }
  const std::string html = ReportHtml(runs, {});
  EXPECT_THAT(html, HasSubstr("instances sweep"));
  EXPECT_EQ(Count(SvgWithLabel(html, "KV cache hit rate against instances"), "<polyline"), 2u);
  EXPECT_THAT(ComparisonTable(runs), HasSubstr("workload long-context, 16 instances"));
}

// Client and engine TTFTs are both shown and labelled when both are present.
TEST(ReportHtmlTest, ClientAndEngineTtft) {
  std::vector<RunResult> runs = ThreeStrategies();
  for (RunResult& r : runs) {
    r.ttft_kind = "client";
    r.engine_ttft_p50_s = 0.05;
    r.engine_ttft_p90_s = 0.2;
  }
  const std::string html = ReportHtml(runs, {});
  EXPECT_THAT(html, HasSubstr("TTFT P50<small>client</small>"));
  EXPECT_THAT(html, HasSubstr("engine P50<small>engine&#39;s own</small>"));
  EXPECT_THAT(html, HasSubstr("measured by the client"));
}

// The details table lists every run's settings and extra figures.
TEST(ReportHtmlTest, DetailsTable) {
  std::vector<RunResult> runs = ThreeStrategies();
  runs[1].settings["concurrency_threshold"] = 8;
  runs[2].extra["queue_depth_mean"] = 1.25;
  const std::string html = ReportHtml(runs, {});
  const std::string details = html.substr(html.find("id=\"details\""));
  EXPECT_THAT(details, HasSubstr("<code>concurrency_threshold=8</code>"));
  EXPECT_THAT(details, HasSubstr("<code>queue_depth_mean=1.25</code>"));
  EXPECT_EQ(Count(details, "<tr>"), 4u);
}

// Fifty runs with long series stay well under a megabyte.
TEST(ReportHtmlTest, SizeStaysReasonable) {
  std::vector<RunResult> runs;
  for (int i = 0; i < 50; ++i) {
    RunResult r = MakeRun(i % 2 ? "random" : "prefix-aware", 0.1 + i * 0.01, 0.5, 30, 1);
    r.workload = "workload-" + std::to_string(i / 5);
    r.settings["load_pct"] = 10 + i;
    for (int k = 0; k < 720; ++k) {
      r.series.push_back(
          SeriesPoint{k * 5.0, 40, 0.5 + 0.3 * ((k % 7) / 7.0), 0.2, 0.4, std::vector<double>(7, 1.0 / 7)});
    }
    runs.push_back(r);
  }
  const std::string html = ReportHtml(runs, {});
  EXPECT_LT(html.size(), 1'000'000u);
  EXPECT_THAT(html, HasSubstr("load_pct sweep"));
}

// Each strategy keeps one colour in every chart, and different strategies get different ones.
TEST(ReportHtmlTest, ConsistentColours) {
  std::vector<RunResult> runs = ThreeStrategies();
  for (const char* s : {"prefix-aware-least-loaded", "prefix-aware-next-preferred", "custom-a", "custom-b"}) {
    runs.push_back(MakeRun(s, 0.1, 0.3, 30));
  }
  const std::string html = ReportHtml(runs, {});
  const std::string cdf = SvgWithLabel(html, "TTFT cumulative distribution");
  std::set<std::string> colours;
  for (size_t pos = cdf.find("stroke=\""); pos != std::string::npos; pos = cdf.find("stroke=\"", pos + 1)) {
    colours.insert(cdf.substr(pos + 8, 7));
  }
  EXPECT_EQ(colours.size(), runs.size());
  EXPECT_THAT(cdf, HasSubstr("stroke=\"#0072b2\" stroke-width=\"2\" points"));
  EXPECT_THAT(SvgWithLabel(html, "share of requests per instance, prefix-aware\""), HasSubstr("fill=\"#0072b2\""));
}

// NaN read back from a file (null) never reaches the page as "nan".
TEST(ReportHtmlTest, NonFiniteValues) {
  std::vector<RunResult> runs = ThreeStrategies();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  runs[0].ttft_p50_s = nan;
  runs[1].ttft_quantiles[50] = nan;
  runs[2].share[0] = nan;
  runs[2].hit_rate = std::numeric_limits<double>::infinity();
  runs[2].series = {SeriesPoint{0, 10, nan, 0.2, 0.3, {}}, SeriesPoint{10, 10, 0.5, nan, 0.3, {}}};
  const std::string html = ReportHtml(runs, {});
  EXPECT_THAT(html, Not(HasSubstr("nan")));
  EXPECT_THAT(html, Not(HasSubstr("inf%")));
  EXPECT_THAT(ComparisonTable(runs), Not(HasSubstr("nan")));
}

// A hit rate that is not known (bench against engines that report no cached tokens: NaN) reads
// "n/a" in the terminal table, the HTML table and the headline, never 0% or "-"; its windows
// draw no hit-rate line.
TEST(ReportHtmlTest, HitRateNotKnownIsNa) {
  std::vector<RunResult> runs = ThreeStrategies();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  runs[2].hit_rate = nan;
  runs[2].series = {SeriesPoint{0, 10, nan, 0.2, 0.3, {}}, SeriesPoint{10, 10, nan, 0.2, 0.3, {}}};
  const std::string table = ComparisonTable(runs);
  EXPECT_THAT(LineStartingWith(table, "prefix-aware "), HasSubstr("n/a"));
  EXPECT_THAT(LineStartingWith(table, "prefix-aware "), Not(HasSubstr("93.1%")));
  EXPECT_THAT(LineStartingWith(table, "random "), HasSubstr("24.8%"));
  const std::string html = ReportHtml(runs, {});
  EXPECT_THAT(html, HasSubstr("<td>n/a</td>"));
  EXPECT_THAT(html, HasSubstr("hit rate 24.8% &rarr; n/a"));
  EXPECT_THAT(html, Not(HasSubstr("nan")));
  EXPECT_EQ(Count(SvgWithLabel(html, "KV cache hit rate over time"), "<polyline"), 0u);
}

// An empty run list still gives a valid page.
TEST(ReportHtmlTest, NoRuns) {
  const std::string html = ReportHtml({}, {});
  EXPECT_THAT(html, HasSubstr("No runs"));
  EXPECT_THAT(html, HasSubstr("</html>"));
}

// ---- Chart helpers ---------------------------------------------------------------------------

// Linear ticks fall on a 1-2-5 grid and cover the data.
TEST(ChartTest, LinearTicks) {
  EXPECT_THAT(chart::LinearTicks(0, 0.87, 5), ::testing::ElementsAre(0, 0.2, 0.4, 0.6, 0.8, 1));
  const std::vector<double> t = chart::LinearTicks(3, 3, 5);
  EXPECT_LE(t.front(), 3);
  EXPECT_GE(t.back(), 3);
}

// Log ticks cover the range with 1-2-5 values, or decades for wide ranges.
TEST(ChartTest, LogTicks) {
  EXPECT_THAT(chart::LogTicks(0.06, 3), ::testing::ElementsAre(0.05, 0.1, 0.2, 0.5, 1, 2, 5));
  EXPECT_THAT(chart::LogTicks(0.001, 50), ::testing::ElementsAre(0.001, 0.01, 0.1, 1, 10, 100));
  EXPECT_THAT(chart::LogTicks(0.012, 1.5), ::testing::ElementsAre(0.01, 0.05, 0.1, 0.5, 1, 2));
}

// Tick labels read naturally.
TEST(ChartTest, TickLabels) {
  EXPECT_EQ(chart::TickLabel(0.25, chart::Format::kSeconds), "250 ms");
  EXPECT_EQ(chart::TickLabel(2, chart::Format::kSeconds), "2 s");
  EXPECT_EQ(chart::TickLabel(0.07, chart::Format::kPercent), "7%");
  EXPECT_EQ(chart::TickLabel(65536, chart::Format::kNumber), "65536");
}

// With a peer's re-implementation among the runs, the report has a peers table: one row per
// strategy and experiment over its seeds, ranges across seeds, the source of each peer; scale
// runs are their own experiment; prefix-aware rows carry their prefix length.
TEST(ReportHtml, PeersTableNamesSourcesAndRangesOverSeeds) {
  std::vector<RunResult> runs;
  for (uint64_t seed : {1, 2, 3}) {
    runs.push_back(MakeRun("kv-aware", 0.07, 0.073 + 0.001 * seed, 20, seed));
    runs.push_back(MakeRun("sglang-cache-aware", 0.07, 0.08, 20, seed));
  }
  runs.push_back(MakeRun("prefix-aware", 0.07, 0.09, 20, 1));
  runs.back().settings["prefix_length"] = 8192;
  runs.push_back(MakeRun("kv-aware", 0.07, 0.1, 20, 1));
  runs.back().settings["scale_events"] = 3;
  runs.back().share = {0.1, 0.2, 0.1, 0.1, 0.2, 0.2, 0.1};
  const std::string html = ReportHtml(runs, {});
  EXPECT_THAT(html, HasSubstr("<h2 id=\"peers\">Peers</h2>"));
  EXPECT_THAT(html, HasSubstr("<h3>long-context, 7 instances, simulate</h3>"));
  EXPECT_THAT(html, HasSubstr("<h3>long-context with scale events, 7 instances, simulate</h3>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>kv-aware</td><td>ours</td><td>3</td><td>0.074 s - 0.076 s</td>"));
  EXPECT_THAT(html, HasSubstr("<td>sglang-cache-aware</td><td>our re-implementation of SGLang&#39;s"));
  EXPECT_THAT(html, HasSubstr("<td>prefix-aware prefix_length=8192</td><td>ours</td><td>1</td>"));
  EXPECT_THAT(html, HasSubstr("<td>10.0-20.0%*</td>"));  // the scale run's shares leave the band
}

// Without a peer, no peers table.
TEST(ReportHtml, NoPeersTableWithoutPeers) {
  EXPECT_THAT(ReportHtml(ThreeStrategies(), {}), Not(HasSubstr("id=\"peers\"")));
}

}  // namespace
}  // namespace prefix_router::report
