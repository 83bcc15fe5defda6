#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/peer_policies.h"
#include "core/policy.h"
#include "report/chart.h"
#include "report/text.h"

namespace prefix_router::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The swept settings the report recognises; "instances" is RunResult::instances. "gateways"
// (simulate --gateways) is recorded only when it is not 1 or when a sweep varies it.
constexpr std::string_view kSweepKeys[] = {"prefix_length", "concurrency_threshold", "load_pct", "gateways",
                                           "instances"};
// Above this many runs in one block, charts keep the first run of each strategy.
constexpr size_t kMaxChartRuns = 10;
// Time series are merged down to at most this many points per line.
constexpr size_t kMaxSeriesPoints = 240;

// ---- Grouping --------------------------------------------------------------------------------

// Runs that are compared with each other: same workload, fleet size, source and TTFT kind.
struct Block {
  std::string workload, source, ttft_kind;
  uint32_t instances = 0;
  std::vector<const RunResult*> runs;  // random first, then by strategy, seed and settings
  std::set<uint64_t> seeds;
  std::set<std::string> varying;  // settings keys whose values differ between runs
};

// Baselines first, then strategies in the order they first appear.
int StrategyRank(const std::string& s, const std::vector<std::string>& order) {
  if (s == StrategyName(Strategy::kRandom)) return 0;
  if (s == StrategyName(Strategy::kLeastOutstanding)) return 1;
  if (s == StrategyName(Strategy::kRoundRobin)) return 2;
  return 3 + static_cast<int>(std::find(order.begin(), order.end(), s) - order.begin());
}

std::vector<Block> MakeBlocks(const std::vector<RunResult>& runs) {
  std::vector<std::string> order;
  for (const RunResult& r : runs) {
    if (std::find(order.begin(), order.end(), r.strategy) == order.end()) {
      order.push_back(r.strategy);
    }
  }
  std::vector<Block> blocks;
  for (const RunResult& r : runs) {
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const Block& b) {
      return b.workload == r.workload && b.instances == r.instances && b.source == r.source &&
             b.ttft_kind == r.ttft_kind;
    });
    if (it == blocks.end()) {
      blocks.push_back(Block{r.workload, r.source, r.ttft_kind, r.instances, {}, {}, {}});
      it = blocks.end() - 1;
    }
    it->runs.push_back(&r);
    it->seeds.insert(r.seed);
  }
  for (Block& b : blocks) {
    std::stable_sort(b.runs.begin(), b.runs.end(), [&](const RunResult* a, const RunResult* c) {
      const int ra = StrategyRank(a->strategy, order), rc = StrategyRank(c->strategy, order);
      if (ra != rc) return ra < rc;
      if (a->seed != c->seed) return a->seed < c->seed;
      return a->settings < c->settings;
    });
    std::map<std::string, std::set<double>> values;
    for (const RunResult* r : b.runs) {
      for (const auto& [k, v] : r->settings) values[k].insert(v);
    }
    for (const auto& [k, vs] : values) {
      if (vs.size() > 1) b.varying.insert(k);
    }
    // When a sweep coordinate varies, settings derived from it (rate_rps follows load_pct)
    // would only lengthen the labels: keep the coordinates.
    std::set<std::string> coordinates;
    for (std::string_view k : kSweepKeys) {
      if (b.varying.count(std::string(k)) > 0) coordinates.insert(std::string(k));
    }
    if (!coordinates.empty()) b.varying = std::move(coordinates);
  }
  return blocks;
}

// The row name: the strategy (marked when it is the gateway's default, core/policy.h), then the
// seed and the varying settings when they tell rows apart.
std::string RowLabel(const Block& b, const RunResult& r) {
  std::string label = r.strategy.empty() ? "(unnamed)" : r.strategy;
  if (r.strategy == StrategyName(kDefaultStrategy)) label += " (default)";
  if (b.seeds.size() > 1) label += fmt::format(" seed {}", r.seed);
  for (const std::string& k : b.varying) {
    auto it = r.settings.find(k);
    if (it != r.settings.end()) label += fmt::format(" {}={}", k, FormatValue(it->second));
  }
  return label;
}

// The random run `r` is compared with: same block and seed, and among those the one whose
// settings agree with r's on the most shared keys (a load sweep compares equal loads).
const RunResult* Baseline(const Block& b, const RunResult& r) {
  if (r.strategy == StrategyName(Strategy::kRandom)) return nullptr;
  const RunResult* best = nullptr;
  int best_mismatch = 0, best_match = 0;
  for (const RunResult* c : b.runs) {
    if (c->strategy != StrategyName(Strategy::kRandom) || c->seed != r.seed) continue;
    int match = 0, mismatch = 0;
    for (const auto& [k, v] : r.settings) {
      auto it = c->settings.find(k);
      if (it == c->settings.end()) continue;
      (it->second == v ? match : mismatch) += 1;
    }
    if (best == nullptr || mismatch < best_mismatch || (mismatch == best_mismatch && match > best_match)) {
      best = c;
      best_mismatch = mismatch;
      best_match = match;
    }
  }
  return best;
}

// Relative change against a baseline; NaN when either side is unknown.
double Change(double value, double base) {
  if (!(base > 0) || !(value >= 0) || !std::isfinite(value)) return kNaN;
  return (value - base) / base;
}

double Extra(const RunResult& r, const char* key) {
  auto it = r.extra.find(key);
  return it == r.extra.end() ? kNaN : it->second;
}

bool AnyExtra(const std::vector<const RunResult*>& runs, const char* key) {
  return std::any_of(runs.begin(), runs.end(), [&](const RunResult* r) { return std::isfinite(Extra(*r, key)); });
}

bool AnyEngineTtft(const std::vector<const RunResult*>& runs) {
  return std::any_of(runs.begin(), runs.end(), [](const RunResult* r) { return r->engine_ttft_p50_s >= 0; });
}

// ---- Balance ---------------------------------------------------------------------------------

size_t FleetSize(const RunResult& r) { return r.instances > 0 ? r.instances : r.share.size(); }

struct Band {
  double lo = 0, hi = 0, ideal = 0;
};

// The published benchmark saw every one of 7 instances receive 13.3% to 15.4% of requests;
// other fleet sizes get the same relative tolerance (+-7.5% of the ideal share).
Band BalanceBand(size_t instances) {
  if (instances == 0) return {};
  if (instances == 7) return {0.133, 0.154, 1.0 / 7};
  const double ideal = 1.0 / static_cast<double>(instances);
  return {ideal * 0.925, ideal * 1.075, ideal};
}

bool ShareKnown(const RunResult& r) {
  return std::any_of(r.share.begin(), r.share.end(), [](double s) { return std::isfinite(s); });
}

std::pair<double, double> ShareRange(const RunResult& r) {
  double lo = kNaN, hi = kNaN;
  for (double s : r.share) {
    if (!std::isfinite(s)) continue;
    lo = std::isnan(lo) ? s : std::min(lo, s);
    hi = std::isnan(hi) ? s : std::max(hi, s);
  }
  return {lo, hi};
}

std::string FormatShareRange(const RunResult& r) {
  if (!ShareKnown(r)) return "-";
  const auto [lo, hi] = ShareRange(r);
  return fmt::format("{:.1f}-{:.1f}%", lo * 100, hi * 100);
}

bool ShareInBand(const RunResult& r) {
  if (!ShareKnown(r)) return true;
  const Band band = BalanceBand(FleetSize(r));
  const auto [lo, hi] = ShareRange(r);
  // Compare at the displayed precision so that "13.3-15.4%" never reads as out of band.
  return std::round(lo * 1000) >= std::round(band.lo * 1000) && std::round(hi * 1000) <= std::round(band.hi * 1000);
}

std::string FormatThroughput(double rps) {
  if (!std::isfinite(rps)) return "-";
  return rps < 10 ? fmt::format("{:.2f} rps", rps) : fmt::format("{:.1f} rps", rps);
}

std::string FormatMaybeSeconds(double s) { return s >= 0 ? FormatSeconds(s) : "-"; }

std::string TtftKindText(const std::string& kind) {
  if (kind == "modelled") return "TTFT modelled (engine model clock)";
  if (kind == "client") return "TTFT client-measured";
  if (kind.empty()) return "";
  return "TTFT " + kind;
}

std::string BlockTitle(const Block& b) {
  std::string t = fmt::format("workload {}, {} instances", b.workload, b.instances);
  if (b.seeds.size() == 1) {
    t += fmt::format(", seed {}", *b.seeds.begin());
  } else {
    t += ", seeds ";
    bool first = true;
    for (uint64_t s : b.seeds) {
      t += fmt::format("{}{}", first ? "" : " ", s);
      first = false;
    }
  }
  if (!b.source.empty()) t += ", " + b.source;
  if (const std::string kind = TtftKindText(b.ttft_kind); !kind.empty()) t += ", " + kind;
  return t;
}

// ---- Comparison rows (shared by the terminal and the HTML table) -----------------------------

struct Cell {
  std::string text;
  double change = kNaN;      // shown after the text when finite
  bool lower_better = true;  // colours the change in HTML
  bool warn = false;         // out of the balance band
};

struct Column {
  std::string header;
  std::string sub;  // HTML only: a second header line
  bool has_change = false;
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;
};

Table ComparisonRows(const Block& b) {
  const bool engine = AnyEngineTtft(b.runs);
  const bool lru = AnyExtra(b.runs, "lru_bound_hit_rate");
  const bool inf = AnyExtra(b.runs, "infinite_bound_hit_rate");
  const bool routing = AnyExtra(b.runs, "routing_overhead_p50_s");
  const std::string kind = b.ttft_kind.empty() ? "" : b.ttft_kind;
  Table t;
  t.columns.push_back({"strategy", "", false});
  t.columns.push_back({"TTFT P50", kind, true});
  t.columns.push_back({"P90", kind, true});
  t.columns.push_back({"P99", kind, false});
  if (engine) {
    t.columns.push_back({"engine P50", "engine's own", true});
    t.columns.push_back({"engine P90", "engine's own", true});
  }
  t.columns.push_back({"hit rate", "KV cache", false});
  if (lru) t.columns.push_back({"LRU bound", "hit rate", false});
  if (inf) t.columns.push_back({"inf bound", "hit rate", false});
  t.columns.push_back({"throughput", "", true});
  t.columns.push_back({"share min-max", "per instance", false});
  t.columns.push_back({"overflow", "", false});
  if (routing) t.columns.push_back({"routing P50", "overhead", false});
  t.columns.push_back({"errors", "", false});

  for (const RunResult* r : b.runs) {
    const RunResult* base = Baseline(b, *r);
    const auto change = [&](double v, double RunResult::*m) { return base != nullptr ? Change(v, base->*m) : kNaN; };
    std::vector<Cell> row;
    row.push_back({RowLabel(b, *r)});
    row.push_back({FormatSeconds(r->ttft_p50_s), change(r->ttft_p50_s, &RunResult::ttft_p50_s)});
    row.push_back({FormatSeconds(r->ttft_p90_s), change(r->ttft_p90_s, &RunResult::ttft_p90_s)});
    row.push_back({FormatSeconds(r->ttft_p99_s)});
    if (engine) {
      row.push_back(
          {FormatMaybeSeconds(r->engine_ttft_p50_s), change(r->engine_ttft_p50_s, &RunResult::engine_ttft_p50_s)});
      row.push_back(
          {FormatMaybeSeconds(r->engine_ttft_p90_s), change(r->engine_ttft_p90_s, &RunResult::engine_ttft_p90_s)});
    }
    row.push_back({FormatHitRate(r->hit_rate)});
    if (lru) row.push_back({FormatPercent(Extra(*r, "lru_bound_hit_rate"))});
    if (inf) row.push_back({FormatPercent(Extra(*r, "infinite_bound_hit_rate"))});
    row.push_back({FormatThroughput(r->throughput_rps), change(r->throughput_rps, &RunResult::throughput_rps), false});
    Cell share{FormatShareRange(*r)};
    share.warn = !ShareInBand(*r);
    row.push_back(share);
    row.push_back({FormatPercent(r->overflow_rate)});
    if (routing) {
      const double o = Extra(*r, "routing_overhead_p50_s");
      row.push_back({std::isfinite(o) ? FormatSeconds(o) : "-"});
    }
    row.push_back({fmt::format("{}", r->errors)});
    t.rows.push_back(std::move(row));
  }
  return t;
}

// ---- HTML pieces -----------------------------------------------------------------------------

// Okabe-Ito colours (distinguishable with the common colour-vision deficiencies, readable on
// white); the known strategies keep the same colour in every report.
class Palette {
 public:
  explicit Palette(const std::vector<RunResult>& runs) {
    const std::string prefix_aware(StrategyName(Strategy::kPrefixAware));
    colors_ = {{std::string(StrategyName(Strategy::kRandom)), "#7a7a7a"},
               {std::string(StrategyName(Strategy::kLeastOutstanding)), "#e69f00"},
               {std::string(StrategyName(Strategy::kRoundRobin)), "#8c564b"},
               {prefix_aware, "#0072b2"},
               {prefix_aware + "-least-loaded", "#cc79a7"},
               {prefix_aware + "-next-preferred", "#009e73"}};
    // Colours no known strategy uses, for the others in order of appearance.
    const char* pool[] = {"#d55e00", "#56b4e9", "#000000", "#b8860b", "#6a3d9a", "#e31a1c"};
    size_t next = 0;
    for (const RunResult& r : runs) {
      if (colors_.count(r.strategy) > 0) continue;
      colors_[r.strategy] = pool[next++ % std::size(pool)];
    }
  }
  const std::string& Color(const std::string& strategy) const {
    static const std::string kFallback = "#000000";
    auto it = colors_.find(strategy);
    return it == colors_.end() ? kFallback : it->second;
  }

 private:
  std::map<std::string, std::string> colors_;
};

// Distinguishes runs of the same strategy within one chart.
const char* DashFor(size_t variant) {
  static const char* kDashes[] = {"", "7 4", "2 3", "10 3 2 3", "4 2 1 2"};
  return kDashes[variant % std::size(kDashes)];
}

const char* kCss = R"css(
*{box-sizing:border-box}
body{margin:0;background:#fff;color:#1f2328;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1080px;margin:0 auto;padding:12px 14px 40px}
h1{font-size:1.55em;margin:.4em 0}
h2{font-size:1.3em;margin:1.6em 0 .4em;padding-top:.4em;border-top:2px solid #d0d7de}
h3{font-size:1.08em;margin:1.3em 0 .4em}
h4{font-size:1em;margin:1em 0 .3em}
p{margin:.4em 0}
.note{color:#333}
.meta,.caption,figcaption{color:#57606a;font-size:.9em}
nav ul{margin:.2em 0;padding-left:1.2em}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;margin:.4em 0}
table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
th,td{padding:4px 8px;border-bottom:1px solid #e5e7eb;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f6f8fa;font-weight:600}
th small{display:block;font-weight:400;color:#57606a}
th:first-child,td:first-child{text-align:left}
td.wrap{white-space:normal;text-align:left;min-width:14em}
.chg{display:inline-block;min-width:4.2em;margin-left:.35em;font-size:.92em}
.better{color:#1a7f37}.worse{color:#cf222e}
.warn{color:#cf222e;font-weight:600}
.dot{display:inline-block;width:.7em;height:.7em;border-radius:50%;margin-right:.4em;vertical-align:baseline}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,400px),1fr));gap:14px 20px;margin:.6em 0}
.smalls{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,220px),1fr));gap:10px 16px}
figure{margin:0;min-width:0}
figcaption{margin:.2em 0}
svg.chart{display:block;width:100%;height:auto}
.chart text{font-size:12px;fill:#3d444d}
.chart text.small{font-size:11px}
.chart text.title{font-size:12.5px;fill:#1f2328}
.chart .grid line{stroke:#e8ebef;stroke-width:1}
.chart .axis line{stroke:#8c959f;stroke-width:1}
.chart .band{fill:#2da44e;fill-opacity:.14;stroke:#2da44e;stroke-opacity:.5;stroke-dasharray:4 3}
.chart .ideal{stroke:#1f2328;stroke-width:1;stroke-dasharray:5 4}
.chart rect.outside{stroke:#cf222e;stroke-width:2}
.legend{list-style:none;margin:.2em 0 0;padding:0;display:flex;flex-wrap:wrap;gap:2px 14px;font-size:.86em}
.legend li{display:flex;align-items:center;gap:5px}
svg.swatch{width:28px;height:10px;flex:none}
.ref{border-left:3px solid #d0d7de;padding:.2em .7em;color:#444;font-size:.92em}
ul.headline{margin:.3em 0;padding-left:1.2em}
code{font-size:.9em;background:#f6f8fa;padding:0 .25em;border-radius:3px}
footer{margin-top:2.5em;color:#57606a;font-size:.85em}
)css";

std::string ChangeSpan(const Cell& c) {
  if (!std::isfinite(c.change)) return "";
  const bool better = c.lower_better ? c.change < 0 : c.change > 0;
  const bool flat = std::fabs(c.change) < 0.0005;
  return fmt::format("<span class=\"chg {}\">{}</span>",
                     flat     ? ""
                     : better ? "better"
                              : "worse",
                     FormatChange(c.change));
}

std::string HtmlTable(const Table& t, const Block& b, const Palette& palette) {
  std::string out = "<div class=\"scroll\"><table><thead><tr>";
  for (const Column& c : t.columns) {
    out += "<th>" + HtmlEscape(c.header);
    if (!c.sub.empty()) out += "<small>" + HtmlEscape(c.sub) + "</small>";
    out += "</th>";
  }
  out += "</tr></thead><tbody>";
  bool any_warn = false;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    out += "<tr>";
    for (size_t j = 0; j < t.rows[i].size(); ++j) {
      const Cell& c = t.rows[i][j];
      out += "<td>";
      if (j == 0) {
        out += fmt::format("<span class=\"dot\" style=\"background:{}\"></span>",
                           HtmlEscape(palette.Color(b.runs[i]->strategy)));
      }
      if (c.warn) {
        any_warn = true;
        out += "<span class=\"warn\">" + HtmlEscape(c.text) + "*</span>";
      } else {
        out += HtmlEscape(c.text);
      }
      if (t.columns[j].has_change) out += ChangeSpan(c);
      out += "</td>";
    }
    out += "</tr>";
  }
  out += "</tbody></table></div>";
  const Band band = BalanceBand(b.instances);
  if (band.ideal > 0) {
    out += fmt::format(
        "<p class=\"caption\">Changes are against the random run of the same seed (and "
        "settings). Balance band for {} instances: {}-{} of requests per instance (ideal "
        "{}){}.</p>",
        b.instances, FormatPercent(band.lo), FormatPercent(band.hi), FormatPercent(band.ideal),
        any_warn ? "; * marks a run with an instance outside it" : "");
  }
  return out;
}

// Runs drawn in a block's charts.
std::vector<const RunResult*> ChartRuns(const Block& b) {
  if (b.runs.size() <= kMaxChartRuns) return b.runs;
  std::vector<const RunResult*> out;
  std::set<std::string> seen;
  for (const RunResult* r : b.runs) {
    if (seen.insert(r->strategy).second) out.push_back(r);
  }
  return out;
}

// A colour per strategy and a dash per run of the same strategy.
std::vector<std::string> Dashes(const std::vector<const RunResult*>& runs) {
  std::map<std::string, size_t> seen;
  std::vector<std::string> out;
  for (const RunResult* r : runs) out.emplace_back(DashFor(seen[r->strategy]++));
  return out;
}

std::string Figure(const std::string& caption, const chart::LineChart& c) {
  return "<figure><figcaption>" + HtmlEscape(caption) + "</figcaption>" + chart::RenderLineChart(c) +
         chart::RenderLegend(c.lines) + "</figure>";
}

std::string CdfFigure(const Block& b, const std::vector<const RunResult*>& runs, const Palette& palette) {
  chart::LineChart c;
  c.description = "TTFT cumulative distribution per strategy, workload " + b.workload;
  c.y = {"fraction of requests", chart::Format::kPercent, false, false, 0, 1, {}};
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  const std::vector<std::string> dashes = Dashes(runs);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunResult& r = *runs[i];
    if (r.ttft_quantiles.empty()) continue;
    chart::Line line{RowLabel(b, r), palette.Color(r.strategy), dashes[i], std::vector<chart::Points>(1), false};
    const double n = static_cast<double>(r.ttft_quantiles.size() - 1);
    for (size_t k = 0; k < r.ttft_quantiles.size(); ++k) {
      const double v = r.ttft_quantiles[k];
      line.segments[0].emplace_back(v, n > 0 ? static_cast<double>(k) / n : 1.0);
      if (v > 0) lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    c.lines.push_back(std::move(line));
  }
  if (c.lines.empty()) return "";
  // Prefix caching splits TTFTs into a fast (hit) and a slow (miss) mode often an order of
  // magnitude apart; a log axis shows both.
  const bool log = std::isfinite(lo) && hi / lo > 10;
  c.x = {std::string("TTFT") + (log ? " (log scale)" : ""), chart::Format::kSeconds, log, !log, kNaN, kNaN, {}};
  return Figure("TTFT distribution (CDF): fraction of requests with TTFT at or below x", c);
}

// A series line (hit rate or TTFT P50), merged down to kMaxSeriesPoints weighted by requests;
// empty windows break the line.
std::vector<chart::Points> SeriesSegments(const RunResult& r, double SeriesPoint::*member, double time_unit) {
  const size_t n = r.series.size();
  const size_t merge = std::max<size_t>(1, (n + kMaxSeriesPoints - 1) / kMaxSeriesPoints);
  std::vector<chart::Points> segs(1);
  for (size_t i = 0; i < n; i += merge) {
    double req = 0, t = 0, v = 0;
    for (size_t k = i; k < std::min(n, i + merge); ++k) {
      const SeriesPoint& p = r.series[k];
      // A value not known (a hit rate without cached-token counts: NaN) is a gap, as an
      // empty window is.
      if (!std::isfinite(p.*member)) continue;
      const double w = static_cast<double>(p.requests);
      req += w;
      t += p.t_s * w;
      v += p.*member * w;
    }
    if (req == 0) {
      if (!segs.back().empty()) segs.emplace_back();
      continue;
    }
    segs.back().emplace_back(t / req / time_unit, v / req);
  }
  if (segs.back().empty()) segs.pop_back();
  return segs;
}

std::string SeriesFigures(const Block& b, const std::vector<const RunResult*>& runs, const Palette& palette) {
  double t_max = 0;
  bool any = false;
  for (const RunResult* r : runs) {
    for (const SeriesPoint& p : r->series) {
      t_max = std::max(t_max, p.t_s);
      any = true;
    }
  }
  if (!any) return "";
  const bool minutes = t_max > 1200;
  const double unit = minutes ? 60 : 1;
  const std::string x_title = minutes ? "minutes since start" : "seconds since start";
  const std::vector<std::string> dashes = Dashes(runs);
  chart::LineChart hit, ttft;
  hit.description = "KV cache hit rate over time, workload " + b.workload;
  hit.x = {x_title, chart::Format::kNumber, false, true, kNaN, kNaN, {}};
  hit.y = {"hit rate", chart::Format::kPercent, false, true, 0, 1, {}};
  ttft.description = "TTFT P50 over time, workload " + b.workload;
  ttft.x = hit.x;
  ttft.y = {"TTFT P50", chart::Format::kSeconds, false, true, kNaN, kNaN, {}};
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunResult& r = *runs[i];
    if (r.series.empty()) continue;
    const std::string label = RowLabel(b, r);
    const std::string& color = palette.Color(r.strategy);
    hit.lines.push_back({label, color, dashes[i], SeriesSegments(r, &SeriesPoint::hit_rate, unit)});
    ttft.lines.push_back({label, color, dashes[i], SeriesSegments(r, &SeriesPoint::ttft_p50_s, unit)});
  }
  return Figure("KV cache hit rate over time (per window)", hit) + Figure("TTFT P50 over time (per window)", ttft);
}

std::string ShareFigures(const Block& b, const std::vector<const RunResult*>& runs, const Palette& palette) {
  std::string figs;
  for (const RunResult* r : runs) {
    if (!ShareKnown(*r)) continue;
    const Band band = BalanceBand(FleetSize(*r));
    const auto [lo, hi] = ShareRange(*r);
    chart::ShareChart c;
    c.description = "share of requests per instance, " + RowLabel(b, *r);
    c.share = r->share;
    c.band_lo = band.lo;
    c.band_hi = band.hi;
    c.ideal = band.ideal;
    c.color = palette.Color(r->strategy);
    figs += fmt::format(
        "<figure><figcaption><span class=\"dot\" style=\"background:{}\"></span>"
        "{}: {}-{}{}</figcaption>{}</figure>",
        HtmlEscape(c.color), HtmlEscape(RowLabel(b, *r)), FormatPercent(lo), FormatPercent(hi),
        ShareInBand(*r) ? "" : " (outside the band)", chart::RenderShareChart(c));
  }
  if (figs.empty()) return "";
  const Band band = BalanceBand(b.instances);
  std::string out = "<h4>Requests per instance</h4>";
  if (band.ideal > 0) {
    out += fmt::format(
        "<p class=\"caption\">Bars: share of counted requests per instance (index below). "
        "Shaded: the balance band {}-{}{}; dashed: the ideal {}. A bar outlined in red is "
        "outside the band.</p>",
        FormatPercent(band.lo), FormatPercent(band.hi),
        b.instances == 7 ? " (the published benchmark's range for 7 instances)" : " (ideal +-7.5%)",
        FormatPercent(band.ideal));
  }
  return out + "<div class=\"smalls\">" + figs + "</div>";
}

// What the article reports for the workloads it measured (Llama 3.1 70B, 7 x 8 H100, vLLM).
std::string PublishedReference(const std::string& workload) {
  const char* common =
      " Published with Llama 3.1 70B Instruct on 7 instances (8x H100 each), vLLM with prefix "
      "caching, prefix-aware vs random; each instance received 13.3-15.4% of requests and "
      "routing cost 1.3-1.9 ms per request.";
  if (workload.find("long-context") != std::string::npos) {
    return std::string(
               "Published reference (long context, 8,000-token shared prefix, 1 h): "
               "TTFT P50 -71 to -77%, P90 -33 to -37%, KV cache hit rate about 25% to up "
               "to 82%, throughput +15 to +16%.") +
           common;
  }
  if (workload.find("sharegpt") != std::string::npos) {
    return std::string(
               "Published reference (short ShareGPT-style conversations, 30 min): TTFT "
               "P50 -13 to -16%, P90 -24 to -37%, KV cache hit rate about 30% to 80%, "
               "throughput +1.7 to +2%.") +
           common;
  }
  return "";
}

std::string Headlines(const Block& b) {
  std::string items;
  size_t count = 0;
  for (const RunResult* r : b.runs) {
    const RunResult* base = Baseline(b, *r);
    if (base == nullptr) continue;
    if (++count > 6) break;
    items += fmt::format("<li><b>{}</b> vs random: TTFT P50 {}, P90 {}; hit rate {} &rarr; {}; throughput {}</li>",
                         HtmlEscape(RowLabel(b, *r)), FormatChange(Change(r->ttft_p50_s, base->ttft_p50_s)),
                         FormatChange(Change(r->ttft_p90_s, base->ttft_p90_s)), FormatHitRate(base->hit_rate),
                         FormatHitRate(r->hit_rate), FormatChange(Change(r->throughput_rps, base->throughput_rps)));
  }
  return items.empty() ? "" : "<ul class=\"headline\">" + items + "</ul>";
}

// ---- Sweeps ----------------------------------------------------------------------------------

double Coordinate(const RunResult& r, std::string_view key) {
  if (key == "instances") return r.instances;
  auto it = r.settings.find(std::string(key));
  return it == r.settings.end() ? kNaN : it->second;
}

struct Sweep {
  std::string key;
  const RunResult* first = nullptr;    // for the workload, source, kind, fixed values
  std::vector<const RunResult*> runs;  // in input order
};

// Runs of one workload, source and TTFT kind whose other sweep coordinates agree, grouped by
// one coordinate; a sweep when some strategy (and seed) has two or more values of it. Settings
// that are not sweep coordinates may differ (a load sweep changes rate_rps with load_pct).
std::vector<Sweep> FindSweeps(const std::vector<RunResult>& runs) {
  std::vector<Sweep> sweeps;
  for (std::string_view key : kSweepKeys) {
    std::vector<std::pair<std::string, Sweep>> groups;
    for (const RunResult& r : runs) {
      if (!std::isfinite(Coordinate(r, key))) continue;
      std::string sig;
      for (const std::string* s : {&r.workload, &r.source, &r.ttft_kind}) {
        sig += *s;
        sig += '\x1f';
      }
      for (std::string_view other : kSweepKeys) {
        if (other == key) continue;
        sig += fmt::format("{}={}\x1f", other, Coordinate(r, other));
      }
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == sig; });
      if (it == groups.end()) {
        groups.push_back({sig, Sweep{std::string(key), &r, {}}});
        it = groups.end() - 1;
      }
      it->second.runs.push_back(&r);
    }
    for (auto& [sig, sweep] : groups) {
      std::map<std::pair<std::string, uint64_t>, std::set<double>> values;
      bool swept = false;
      for (const RunResult* r : sweep.runs) {
        auto& vs = values[{r->strategy, r->seed}];
        vs.insert(Coordinate(*r, key));
        swept = swept || vs.size() > 1;
      }
      if (swept) sweeps.push_back(std::move(sweep));
    }
  }
  return sweeps;
}

std::string SweepSection(const Sweep& s, size_t index, const Palette& palette) {
  const RunResult& f = *s.first;
  std::vector<const RunResult*> rows = s.runs;
  std::vector<std::string> order;
  for (const RunResult* r : rows) {
    if (std::find(order.begin(), order.end(), r->strategy) == order.end()) {
      order.push_back(r->strategy);
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const RunResult* a, const RunResult* b) {
    const int ra = StrategyRank(a->strategy, order), rb = StrategyRank(b->strategy, order);
    if (ra != rb) return ra < rb;
    if (a->seed != b->seed) return a->seed < b->seed;
    return Coordinate(*a, s.key) < Coordinate(*b, s.key);
  });
  std::set<uint64_t> seeds;
  std::set<double> values;
  for (const RunResult* r : rows) {
    seeds.insert(r->seed);
    values.insert(Coordinate(*r, s.key));
  }
  const auto line_label = [&](const RunResult& r) {
    return seeds.size() > 1 ? fmt::format("{} seed {}", r.strategy, r.seed) : r.strategy;
  };

  std::string fixed;
  for (std::string_view other : kSweepKeys) {
    if (other == s.key) continue;
    const double v = Coordinate(f, other);
    if (!std::isfinite(v)) continue;
    fixed += fmt::format("{}{} {}", fixed.empty() ? "" : ", ", other, FormatValue(v));
  }
  std::string out = fmt::format("<h3 id=\"sweep{}\">{} sweep: workload {}{}{}</h3>", index, HtmlEscape(s.key),
                                HtmlEscape(f.workload), f.source.empty() ? "" : ", " + HtmlEscape(f.source),
                                f.ttft_kind.empty() ? "" : ", " + HtmlEscape(TtftKindText(f.ttft_kind)));
  if (!fixed.empty()) out += "<p class=\"meta\">Fixed: " + HtmlEscape(fixed) + "</p>";

  // Table.
  const bool lru = AnyExtra(rows, "lru_bound_hit_rate");
  const bool inf = AnyExtra(rows, "infinite_bound_hit_rate");
  out += "<div class=\"scroll\"><table><thead><tr><th>strategy</th>";
  out += "<th>" + HtmlEscape(s.key) + "</th>";
  out += "<th>TTFT P50</th><th>P90</th><th>P99</th><th>hit rate</th>";
  if (lru) out += "<th>LRU bound</th>";
  if (inf) out += "<th>inf bound</th>";
  out +=
      "<th>throughput</th><th>overflow</th><th>share min-max</th><th>requests</th></tr>"
      "</thead><tbody>";
  for (const RunResult* r : rows) {
    out += fmt::format(
        "<tr><td><span class=\"dot\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td>",
        HtmlEscape(palette.Color(r->strategy)), HtmlEscape(line_label(*r)), FormatValue(Coordinate(*r, s.key)),
        FormatSeconds(r->ttft_p50_s), FormatSeconds(r->ttft_p90_s), FormatSeconds(r->ttft_p99_s),
        FormatHitRate(r->hit_rate));
    if (lru) out += "<td>" + FormatPercent(Extra(*r, "lru_bound_hit_rate")) + "</td>";
    if (inf) out += "<td>" + FormatPercent(Extra(*r, "infinite_bound_hit_rate")) + "</td>";
    out += fmt::format("<td>{}</td><td>{}</td><td{}>{}</td><td>{}</td></tr>", FormatThroughput(r->throughput_rps),
                       FormatPercent(r->overflow_rate), ShareInBand(*r) ? "" : " class=\"warn\"", FormatShareRange(*r),
                       r->requests);
  }
  out += "</tbody></table></div>";

  // Charts: one line per strategy (and seed) through its values, in sweep order.
  std::vector<std::pair<std::string, std::vector<const RunResult*>>> lines;
  for (const RunResult* r : rows) {
    const std::string label = line_label(*r);
    if (lines.empty() || lines.back().first != label) lines.push_back({label, {}});
    auto& pts = lines.back().second;
    // One point per value: the first run with it.
    if (pts.empty() || Coordinate(*pts.back(), s.key) != Coordinate(*r, s.key)) pts.push_back(r);
  }
  const bool log_key = s.key == "prefix_length" || s.key == "concurrency_threshold";
  const bool log = log_key && *values.begin() > 0 && *values.rbegin() / *values.begin() >= 8;
  chart::Axis x{s.key + (log ? " (log scale)" : ""), chart::Format::kNumber, log, false, kNaN, kNaN, {}};
  if (values.size() <= 12) x.ticks.assign(values.begin(), values.end());

  chart::LineChart ttft, hit, overflow;
  ttft.description = "TTFT P50 and P90 against " + s.key;
  ttft.x = x;
  ttft.y = {"TTFT", chart::Format::kSeconds, false, true, kNaN, kNaN, {}};
  hit.description = "KV cache hit rate against " + s.key;
  hit.x = x;
  hit.y = {"hit rate", chart::Format::kPercent, false, true, 0, 1, {}};
  overflow.description = "overflow rate against " + s.key;
  overflow.x = x;
  overflow.y = {"overflow rate", chart::Format::kPercent, false, true, kNaN, kNaN, {}};
  bool any_overflow = false;
  for (const auto& [label, pts] : lines) {
    // A strategy run at one value only (a random baseline in a prefix-length sweep) stays in
    // the table; a line needs two points.
    if (pts.size() < 2) continue;
    const std::string& color = palette.Color(pts.front()->strategy);
    chart::Points p50, p90, rate, lru_pts, inf_pts, over;
    for (const RunResult* r : pts) {
      const double v = Coordinate(*r, s.key);
      p50.emplace_back(v, r->ttft_p50_s);
      p90.emplace_back(v, r->ttft_p90_s);
      rate.emplace_back(v, r->hit_rate);
      if (std::isfinite(Extra(*r, "lru_bound_hit_rate"))) {
        lru_pts.emplace_back(v, Extra(*r, "lru_bound_hit_rate"));
      }
      if (std::isfinite(Extra(*r, "infinite_bound_hit_rate"))) {
        inf_pts.emplace_back(v, Extra(*r, "infinite_bound_hit_rate"));
      }
      over.emplace_back(v, r->overflow_rate);
      any_overflow = any_overflow || r->overflow_rate > 0;
    }
    ttft.lines.push_back({label + " P50", color, "", {p50}, true});
    ttft.lines.push_back({label + " P90", color, "7 4", {p90}, true});
    hit.lines.push_back({label, color, "", {rate}, true});
    if (!lru_pts.empty()) hit.lines.push_back({label + " LRU bound", color, "2 3", {lru_pts}});
    if (!inf_pts.empty()) hit.lines.push_back({label + " inf bound", color, "8 3 2 3", {inf_pts}});
    overflow.lines.push_back({label, color, "", {over}, true});
  }
  out += "<div class=\"charts\">";
  out += Figure("TTFT P50 (solid) and P90 (dashed) against " + s.key, ttft);
  out += Figure("KV cache hit rate against " + s.key, hit);
  if (any_overflow) out += Figure("Overflow rate (spilled requests) against " + s.key, overflow);
  out += "</div>";
  return out;
}

std::string KeyValues(const std::map<std::string, double>& m) {
  std::string out;
  for (const auto& [k, v] : m) {
    out += fmt::format("{}<code>{}={}</code>", out.empty() ? "" : " ", HtmlEscape(k), FormatValue(v));
  }
  return out.empty() ? "-" : out;
}

std::string DetailsTable(const std::vector<RunResult>& runs, const Palette& palette) {
  std::string out =
      "<div class=\"scroll\"><table><thead><tr><th>#</th><th>strategy</th><th>workload</th>"
      "<th>instances</th><th>seed</th><th>source</th><th>TTFT kind</th><th>requests</th>"
      "<th>errors</th><th>TTFT mean</th><th>E2E P50</th><th>E2E P90</th><th>ITL P50</th>"
      "<th>engine P99</th><th>output tok/s</th><th>settings</th><th>extra</th></tr></thead>"
      "<tbody>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunResult& r = runs[i];
    out += fmt::format(
        "<tr><td>{}</td><td><span class=\"dot\" style=\"background:{}\"></span>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td class=\"wrap\">{}</td>"
        "<td class=\"wrap\">{}</td></tr>",
        i + 1, HtmlEscape(palette.Color(r.strategy)), HtmlEscape(r.strategy), HtmlEscape(r.workload), r.instances,
        r.seed, HtmlEscape(r.source), HtmlEscape(r.ttft_kind), r.requests, r.errors, FormatSeconds(r.ttft_mean_s),
        FormatSeconds(r.e2e_p50_s), FormatSeconds(r.e2e_p90_s), FormatMaybeSeconds(r.itl_p50_s),
        FormatMaybeSeconds(r.engine_ttft_p99_s), r.output_tokens_per_s, KeyValues(r.settings), KeyValues(r.extra));
  }
  out += "</tbody></table></div>";
  return out;
}

// ---- Peers -----------------------------------------------------------------------------------

// One row of the peers table: a strategy (with its prefix length when its key depends on it) on
// one experiment (workload, fleet size, source, with or without scale events), over its seeds.
struct PeerRow {
  std::string label, origin;
  size_t seeds = 0;
  double p90_lo = kNaN, p90_hi = kNaN, hit_lo = kNaN, hit_hi = kNaN, share_lo = kNaN, share_hi = kNaN;
  bool balanced = true;
};

void Widen(double v, double& lo, double& hi) {
  if (!std::isfinite(v)) return;
  lo = std::isnan(lo) ? v : std::min(lo, v);
  hi = std::isnan(hi) ? v : std::max(hi, v);
}

std::string Range(double lo, double hi, bool percent) {
  auto one = [&](double v) { return percent ? FormatPercent(v) : FormatSeconds(v); };
  if (std::isnan(lo)) return "-";
  return lo == hi ? one(lo) : one(lo) + " - " + one(hi);
}

bool KeyedByPrefixLength(const std::string& strategy) {
  return strategy.rfind(StrategyName(Strategy::kPrefixAware), 0) == 0 || strategy.rfind("haproxy-chash-bl", 0) == 0;
}

std::string PeersSection(const std::vector<RunResult>& runs) {
  bool any_peer = false;
  for (const RunResult& r : runs) any_peer = any_peer || !StrategyOrigin(r.strategy).empty();
  if (!any_peer) return "";
  struct Experiment {
    std::string title;
    std::vector<PeerRow> rows;
  };
  std::vector<Experiment> experiments;
  for (const RunResult& r : runs) {
    auto ev = r.settings.find("scale_events");
    const bool scaled = ev != r.settings.end() && ev->second > 0;
    const std::string title =
        fmt::format("{}{}, {} instances, {}", r.workload, scaled ? " with scale events" : "", r.instances, r.source);
    auto e =
        std::find_if(experiments.begin(), experiments.end(), [&](const Experiment& x) { return x.title == title; });
    if (e == experiments.end()) {
      experiments.push_back({title, {}});
      e = experiments.end() - 1;
    }
    std::string label = r.strategy;
    auto pl = r.settings.find("prefix_length");
    if (KeyedByPrefixLength(r.strategy) && pl != r.settings.end()) {
      label += fmt::format(" prefix_length={}", FormatValue(pl->second));
    }
    auto row = std::find_if(e->rows.begin(), e->rows.end(), [&](const PeerRow& x) { return x.label == label; });
    if (row == e->rows.end()) {
      const std::string origin = StrategyOrigin(r.strategy);
      e->rows.push_back({label, origin.empty() ? "ours" : origin});
      row = e->rows.end() - 1;
    }
    ++row->seeds;
    Widen(r.ttft_p90_s, row->p90_lo, row->p90_hi);
    Widen(r.hit_rate, row->hit_lo, row->hit_hi);
    if (ShareKnown(r)) {
      const auto [lo, hi] = ShareRange(r);
      Widen(lo, row->share_lo, row->share_hi);
      Widen(hi, row->share_lo, row->share_hi);
      row->balanced = row->balanced && ShareInBand(r);
    }
  }
  std::string out =
      "<section>\n<h2 id=\"peers\">Peers</h2>\n<p class=\"caption\">Every strategy of each "
      "experiment over its seeds (lowest - highest across seeds): TTFT P90, KV cache hit rate and the "
      "range of per-instance shares. Rows not marked ours are our re-implementations of the peers' "
      "published policies at their sources' defaults; the source is named in each row. A share "
      "range marked * leaves the balance band on some seed.</p>\n";
  for (const Experiment& e : experiments) {
    out += "<h3>" + HtmlEscape(e.title) +
           "</h3>\n<table>\n<thead><tr><th>strategy</th><th>what it is</th>"
           "<th>seeds</th><th>TTFT P90</th><th>hit rate</th><th>share min-max</th></tr></thead>\n<tbody>\n";
    for (const PeerRow& row : e.rows) {
      out += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>\n", HtmlEscape(row.label),
          HtmlEscape(row.origin), row.seeds, Range(row.p90_lo, row.p90_hi, false), Range(row.hit_lo, row.hit_hi, true),
          std::isnan(row.share_lo) ? std::string("-")
                                   : fmt::format("{:.1f}-{:.1f}%", row.share_lo * 100, row.share_hi * 100),
          row.balanced ? "" : "*");
    }
    out += "</tbody>\n</table>\n";
  }
  return out + "</section>\n";
}

}  // namespace

std::string ComparisonTable(const std::vector<RunResult>& runs) {
  if (runs.empty()) return "no runs\n";
  std::string out;
  for (const Block& b : MakeBlocks(runs)) {
    const Table t = ComparisonRows(b);
    // A value and its change share a column ("0.071 s -82.8%"), values padded to one width.
    std::vector<size_t> value_width(t.columns.size(), 0);
    std::vector<bool> any_change(t.columns.size(), false);
    for (const auto& row : t.rows) {
      for (size_t j = 0; j < row.size(); ++j) {
        value_width[j] = std::max(value_width[j], row[j].text.size() + (row[j].warn ? 1 : 0));
        any_change[j] = any_change[j] || std::isfinite(row[j].change);
      }
    }
    std::vector<std::vector<std::string>> grid;
    std::vector<std::string> header;
    for (const Column& c : t.columns) header.push_back(c.header);
    grid.push_back(header);
    for (const auto& row : t.rows) {
      std::vector<std::string> line;
      for (size_t j = 0; j < row.size(); ++j) {
        std::string cell = row[j].text + (row[j].warn ? "*" : "");
        if (t.columns[j].has_change && any_change[j]) {
          cell.append(value_width[j] - cell.size(), ' ');
          cell += " " + FormatChange(row[j].change);
        }
        line.push_back(std::move(cell));
      }
      grid.push_back(std::move(line));
    }
    std::vector<size_t> width(header.size(), 0);
    for (const auto& line : grid) {
      for (size_t j = 0; j < line.size(); ++j) width[j] = std::max(width[j], line[j].size());
    }
    out += BlockTitle(b) + "\n";
    for (const auto& line : grid) {
      std::string text;
      for (size_t j = 0; j < line.size(); ++j) {
        if (j > 0) text += "  ";
        text += line[j];
        text.append(width[j] - line[j].size(), ' ');
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      out += text + "\n";
    }
    const Band band = BalanceBand(b.instances);
    if (std::any_of(t.rows.begin(), t.rows.end(), [](const auto& row) {
          return std::any_of(row.begin(), row.end(), [](const Cell& c) { return c.warn; });
        })) {
      out +=
          fmt::format("* an instance outside the balance band {}-{}\n", FormatPercent(band.lo), FormatPercent(band.hi));
    }
    out += "\n";
  }
  return out;
}

std::string ReportHtml(const std::vector<RunResult>& runs, const ReportOptions& options) {
  const Palette palette(runs);
  const std::vector<Block> blocks = MakeBlocks(runs);
  const std::vector<Sweep> sweeps = FindSweeps(runs);
  const std::string peers = PeersSection(runs);
  std::vector<std::string> workloads;
  for (const Block& b : blocks) {
    if (std::find(workloads.begin(), workloads.end(), b.workload) == workloads.end()) {
      workloads.push_back(b.workload);
    }
  }

  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + HtmlEscape(options.title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n<main>\n";
  out += "<h1>" + HtmlEscape(options.title) + "</h1>\n";
  for (const std::string& note : options.notes) {
    out += "<p class=\"note\">" + HtmlEscape(note) + "</p>\n";
  }
  out += fmt::format("<p class=\"meta\">{} run{}, {} workload{}.</p>\n", runs.size(), runs.size() == 1 ? "" : "s",
                     workloads.size(), workloads.size() == 1 ? "" : "s");
  if (runs.empty()) {
    out += "<p>No runs to report.</p>\n";
  } else {
    out += "<nav><ul>";
    for (size_t w = 0; w < workloads.size(); ++w) {
      out += fmt::format("<li><a href=\"#workload{}\">workload {}</a></li>", w + 1, HtmlEscape(workloads[w]));
    }
    if (!sweeps.empty()) out += "<li><a href=\"#sweeps\">sweeps</a></li>";
    if (!peers.empty()) out += "<li><a href=\"#peers\">peers</a></li>";
    out += "<li><a href=\"#details\">run details</a></li></ul></nav>\n";
  }

  for (size_t w = 0; w < workloads.size(); ++w) {
    out += fmt::format("<section>\n<h2 id=\"workload{}\">Workload {}</h2>\n", w + 1, HtmlEscape(workloads[w]));
    if (const std::string ref = PublishedReference(workloads[w]); !ref.empty()) {
      out += "<p class=\"ref\">" + HtmlEscape(ref) + "</p>\n";
    }
    for (const Block& b : blocks) {
      if (b.workload != workloads[w]) continue;
      out += "<h3>" + HtmlEscape(BlockTitle(b)) + "</h3>\n";
      out += Headlines(b);
      out += HtmlTable(ComparisonRows(b), b, palette);
      if (AnyEngineTtft(b.runs) && b.ttft_kind != "modelled") {
        out += "<p class=\"caption\">TTFT columns are measured by the client " +
               std::string("(network, gateway and queueing included); engine columns are the ") +
               "engines' own modelled TTFT from x-engine-timing.</p>";
      }
      const std::vector<const RunResult*> chart_runs = ChartRuns(b);
      if (chart_runs.size() < b.runs.size()) {
        out +=
            "<p class=\"caption\">Charts show the first run of each strategy; the sweep "
            "section below has the rest.</p>";
      }
      out += "<div class=\"charts\">" + CdfFigure(b, chart_runs, palette) + SeriesFigures(b, chart_runs, palette) +
             "</div>\n";
      out += ShareFigures(b, chart_runs, palette) + "\n";
    }
    out += "</section>\n";
  }

  if (!sweeps.empty()) {
    out +=
        "<section>\n<h2 id=\"sweeps\">Sweeps</h2>\n<p class=\"caption\">Runs of the same "
        "workload and strategy that differ in one of prefix_length, concurrency_threshold, "
        "load_pct, gateways or instances.</p>\n";
    for (size_t i = 0; i < sweeps.size(); ++i) {
      out += SweepSection(sweeps[i], i + 1, palette) + "\n";
    }
    out += "</section>\n";
  }

  out += peers;
  if (!runs.empty()) {
    out += "<section>\n<h2 id=\"details\">Run details</h2>\n";
    out += DetailsTable(runs, palette) + "\n</section>\n";
  }
  out +=
      "<footer>Generated by prefix-router. This page is self-contained: no scripts, fonts or "
      "external resources.</footer>\n</main>\n</body>\n</html>\n";
  return out;
}

}  // namespace prefix_router::report
