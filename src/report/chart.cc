#include "report/chart.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "report/text.h"

namespace prefix_router::report::chart {
namespace {

// Line charts: a 440 x 280 canvas; the 12 px labels render at about 9.5 px in a phone's ~350 px
// of content and at about 14 px in one of two desktop columns.
constexpr double kWidth = 440, kHeight = 280;
constexpr double kLeft = 66, kRight = 14, kTop = 14, kBottom = 46;
// Share bars: small multiples, several per row on a desktop.
constexpr double kBarWidth = 320, kBarHeight = 170;
constexpr double kBarLeft = 44, kBarRight = 8, kBarTop = 10, kBarBottom = 26;

struct Scale {
  bool log = false;
  double lo = 0, hi = 1;  // data range shown
  double p0 = 0, p1 = 1;  // pixel positions of lo and hi

  double T(double v) const { return log ? std::log10(std::max(v, lo)) : v; }
  double operator()(double v) const {
    const double t = std::clamp(T(v), T(lo), T(hi));
    return p0 + (t - T(lo)) / (T(hi) - T(lo)) * (p1 - p0);
  }
};

struct ResolvedAxis {
  Scale scale;
  std::vector<double> ticks;
};

// Makes lo < hi on the transformed axis.
void Widen(bool log, double& lo, double& hi) {
  if (hi > lo) return;
  if (log) {
    lo /= 2;
    hi *= 2;
  } else {
    const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
}

ResolvedAxis Resolve(const Axis& axis, const std::vector<double>& data, double p0, double p1) {
  ResolvedAxis r;
  r.scale.log = axis.log;
  r.scale.p0 = p0;
  r.scale.p1 = p1;
  const auto usable = [&](double v) { return std::isfinite(v) && (!axis.log || v > 0); };
  if (!axis.ticks.empty()) {
    for (double t : axis.ticks) {
      if (usable(t)) r.ticks.push_back(t);
    }
    std::sort(r.ticks.begin(), r.ticks.end());
    r.ticks.erase(std::unique(r.ticks.begin(), r.ticks.end()), r.ticks.end());
  }
  if (!r.ticks.empty()) {
    double lo = r.ticks.front(), hi = r.ticks.back();
    Widen(axis.log, lo, hi);
    // Markers at the first and last tick stay inside the frame.
    if (axis.log) {
      const double pad = std::pow(hi / lo, 0.05);
      lo /= pad;
      hi *= pad;
    } else {
      const double pad = (hi - lo) * 0.05;
      lo -= pad;
      hi += pad;
    }
    r.scale.lo = lo;
    r.scale.hi = hi;
    return r;
  }
  double lo = 0, hi = 0;
  if (std::isfinite(axis.min) && std::isfinite(axis.max) && usable(axis.min)) {
    lo = axis.min;
    hi = axis.max;
  } else {
    bool any = false;
    for (double v : data) {
      if (!usable(v)) continue;
      lo = any ? std::min(lo, v) : v;
      hi = any ? std::max(hi, v) : v;
      any = true;
    }
    if (!any) {
      lo = axis.log ? 1 : 0;
      hi = axis.log ? 10 : 1;
    }
    if (axis.from_zero && !axis.log) {
      lo = std::min(lo, 0.0);
      hi = std::max(hi, 0.0);
    }
  }
  Widen(axis.log, lo, hi);
  std::vector<double> ticks = axis.log ? LogTicks(lo, hi) : LinearTicks(lo, hi, 5);
  const bool fixed = std::isfinite(axis.min) && std::isfinite(axis.max);
  if (fixed) {
    r.scale.lo = lo;
    r.scale.hi = hi;
    for (double t : ticks) {
      if (t >= lo - 1e-12 * std::fabs(hi - lo) && t <= hi + 1e-12 * std::fabs(hi - lo)) {
        r.ticks.push_back(t);
      }
    }
  } else {
    r.scale.lo = ticks.front();
    r.scale.hi = ticks.back();
    r.ticks = std::move(ticks);
  }
  return r;
}

std::string Num(double v) { return fmt::format("{:.1f}", v); }

// Keeps at most about ten tick labels.
std::vector<double> Thin(const std::vector<double>& ticks) {
  if (ticks.size() <= 10) return ticks;
  const size_t step = (ticks.size() + 7) / 8;
  std::vector<double> out;
  for (size_t i = 0; i < ticks.size(); i += step) out.push_back(ticks[i]);
  return out;
}

}  // namespace

namespace {

// m * 10^e computed so that the result is the double nearest the decimal (0.6, not
// 0.6000000000000001), which keeps tick labels and equality tests clean.
double Decimal(double m, int e) { return e >= 0 ? m * std::pow(10.0, e) : m / std::pow(10.0, -e); }

}  // namespace

std::vector<double> LinearTicks(double lo, double hi, int target) {
  Widen(false, lo, hi);
  const double raw = (hi - lo) / std::max(target, 1);
  const int e = static_cast<int>(std::floor(std::log10(raw)));
  const double f = raw / Decimal(1, e);
  const double m = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  const double step = Decimal(m, e);
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last && ticks.size() < 100; k += 1) {
    ticks.push_back(k == 0 ? 0.0 : Decimal(k * m, e));
  }
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  if (!(lo > 0)) lo = hi > 0 ? hi / 10 : 1;
  Widen(true, lo, hi);
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  std::vector<double> ticks;
  if (e1 - e0 > 3) {
    for (int e = e0; e <= e1; ++e) ticks.push_back(Decimal(1, e));
    return ticks;
  }
  std::vector<double> grid;
  for (int e = e0; e <= e1; ++e) {
    for (double m : {1.0, 2.0, 5.0}) grid.push_back(Decimal(m, e));
  }
  // The largest grid value at or below lo through the smallest at or above hi.
  size_t a = 0, b = grid.size() - 1;
  for (size_t i = 0; i < grid.size(); ++i) {
    if (grid[i] <= lo * (1 + 1e-9)) a = i;
  }
  for (size_t i = grid.size(); i-- > 0;) {
    if (grid[i] >= hi * (1 - 1e-9)) b = i;
  }
  ticks.assign(grid.begin() + static_cast<std::ptrdiff_t>(a), grid.begin() + static_cast<std::ptrdiff_t>(b) + 1);
  if (ticks.size() > 7) {
    // Labels would touch on a phone: keep 1 and 5 per decade (and both ends of the range).
    std::vector<double> thinned;
    for (size_t i = 0; i < ticks.size(); ++i) {
      const size_t g = a + i;  // grid index: g % 3 == 1 is a "2"
      if (g % 3 != 1 || i == 0 || i + 1 == ticks.size()) thinned.push_back(ticks[i]);
    }
    ticks = std::move(thinned);
  }
  return ticks;
}

std::string TickLabel(double v, Format format) {
  switch (format) {
    case Format::kSeconds:
      if (v == 0) return "0";
      if (std::fabs(v) < 1) return fmt::format("{:g} ms", std::round(v * 1e6) / 1e3);
      return fmt::format("{:g} s", v);
    case Format::kPercent: return fmt::format("{:g}%", std::round(v * 1e5) / 1e3);
    case Format::kNumber: break;
  }
  if (std::fabs(v) >= 1e6 && v == std::floor(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

std::string RenderLineChart(const LineChart& chart) {
  std::vector<double> xs, ys;
  for (const Line& line : chart.lines) {
    for (const Points& seg : line.segments) {
      for (const auto& [x, y] : seg) {
        xs.push_back(x);
        ys.push_back(y);
      }
    }
  }
  const ResolvedAxis x = Resolve(chart.x, xs, kLeft, kWidth - kRight);
  const ResolvedAxis y = Resolve(chart.y, ys, kHeight - kBottom, kTop);
  const double bottom = kHeight - kBottom, right = kWidth - kRight;

  std::string out = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {:g} {:g}\" width=\"100%\" role=\"img\" "
      "aria-label=\"{}\">",
      kWidth, kHeight, HtmlEscape(chart.description));
  out += "<g class=\"grid\">";
  for (double t : y.ticks) {
    const double py = y.scale(t);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", Num(kLeft), Num(py), Num(right), Num(py));
  }
  for (double t : Thin(x.ticks)) {
    const double px = x.scale(t);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", Num(px), Num(kTop), Num(px), Num(bottom));
  }
  out += "</g><g class=\"axis\">";
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", Num(kLeft), Num(kTop), Num(bottom));
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>", Num(kLeft), Num(bottom), Num(right));
  for (double t : y.ticks) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", Num(kLeft - 6), Num(y.scale(t) + 4),
                       HtmlEscape(TickLabel(t, chart.y.format)));
  }
  for (double t : Thin(x.ticks)) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", Num(x.scale(t)), Num(bottom + 17),
                       HtmlEscape(TickLabel(t, chart.x.format)));
  }
  out += fmt::format("<text class=\"title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                     Num((kLeft + right) / 2), Num(kHeight - 8), HtmlEscape(chart.x.title));
  out += fmt::format(
      "<text class=\"title\" transform=\"rotate(-90)\" x=\"{}\" y=\"14\" "
      "text-anchor=\"middle\">{}</text>",
      Num(-(kTop + bottom) / 2), HtmlEscape(chart.y.title));
  out += "</g>";

  for (const Line& line : chart.lines) {
    const std::string dash = line.dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", HtmlEscape(line.dash));
    const std::string color = HtmlEscape(line.color);
    for (const Points& raw : line.segments) {
      Points seg;  // a NaN read back from a results file must not reach the SVG
      for (const auto& p : raw) {
        if (std::isfinite(p.first) && std::isfinite(p.second)) seg.push_back(p);
      }
      if (seg.empty()) continue;
      out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"", color, dash);
      for (size_t i = 0; i < seg.size(); ++i) {
        if (i > 0) out += ' ';
        out += Num(x.scale(seg[i].first));
        out += ',';
        out += Num(y.scale(seg[i].second));
      }
      out += fmt::format("\"><title>{}</title></polyline>", HtmlEscape(line.label));
      if (!line.markers) continue;
      for (const auto& [px, py] : seg) {
        out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"><title>{}: {}, {}</title></circle>",
                           Num(x.scale(px)), Num(y.scale(py)), color, HtmlEscape(line.label),
                           HtmlEscape(TickLabel(px, chart.x.format)), HtmlEscape(TickLabel(py, chart.y.format)));
      }
    }
  }
  out += "</svg>";
  return out;
}

std::string RenderLegend(const std::vector<Line>& lines) {
  std::string out = "<ul class=\"legend\">";
  std::set<std::string> seen;
  for (const Line& line : lines) {
    if (!seen.insert(line.label).second) continue;
    const std::string dash = line.dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", HtmlEscape(line.dash));
    out += fmt::format(
        "<li><svg class=\"swatch\" viewBox=\"0 0 28 10\" aria-hidden=\"true\"><line x1=\"1\" "
        "y1=\"5\" x2=\"27\" y2=\"5\" stroke=\"{}\" stroke-width=\"3\"{}/></svg>{}</li>",
        HtmlEscape(line.color), dash, HtmlEscape(line.label));
  }
  out += "</ul>";
  return out;
}

std::string RenderShareChart(const ShareChart& chart) {
  const double right = kBarWidth - kBarRight, bottom = kBarHeight - kBarBottom;
  double top = std::max(chart.band_hi, chart.ideal);
  for (double s : chart.share) {
    if (std::isfinite(s)) top = std::max(top, s);
  }
  const std::vector<double> ticks = LinearTicks(0, top > 0 ? top * 1.1 : 1, 4);
  Scale y;
  y.lo = 0;
  y.hi = ticks.back();
  y.p0 = bottom;
  y.p1 = kBarTop;

  std::string out = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {:g} {:g}\" width=\"100%\" role=\"img\" "
      "aria-label=\"{}\">",
      kBarWidth, kBarHeight, HtmlEscape(chart.description));
  out += "<g class=\"grid\">";
  for (double t : ticks) {
    out +=
        fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", Num(kBarLeft), Num(y(t)), Num(right), Num(y(t)));
  }
  out += "</g>";
  if (chart.band_hi > chart.band_lo) {
    out += fmt::format(
        "<rect class=\"band\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>balance band "
        "{}-{}</title></rect>",
        Num(kBarLeft), Num(y(chart.band_hi)), Num(right - kBarLeft), Num(y(chart.band_lo) - y(chart.band_hi)),
        FormatPercent(chart.band_lo), FormatPercent(chart.band_hi));
  }
  const size_t n = chart.share.size();
  const double slot = n > 0 ? (right - kBarLeft) / static_cast<double>(n) : 0;
  const size_t label_step = std::max<size_t>(1, (n + 15) / 16);
  const std::string color = HtmlEscape(chart.color);
  for (size_t i = 0; i < n; ++i) {
    const double s = std::isfinite(chart.share[i]) ? std::max(chart.share[i], 0.0) : 0;
    const double bw = slot * 0.72;
    const double bx = kBarLeft + slot * static_cast<double>(i) + (slot - bw) / 2;
    const bool out_of_band = chart.band_hi > chart.band_lo && (s < chart.band_lo || s > chart.band_hi);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"{}><title>instance {}: "
        "{}</title></rect>",
        Num(bx), Num(y(s)), Num(bw), Num(bottom - y(s)), color, out_of_band ? " class=\"outside\"" : "", i,
        FormatPercent(s));
    if (i % label_step == 0) {
      out += fmt::format("<text class=\"small\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", Num(bx + bw / 2),
                         Num(bottom + 14), i);
    }
  }
  if (chart.ideal > 0) {
    out += fmt::format("<line class=\"ideal\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"><title>ideal {}</title></line>",
                       Num(kBarLeft), Num(y(chart.ideal)), Num(right), Num(y(chart.ideal)), FormatPercent(chart.ideal));
  }
  out += "<g class=\"axis\">";
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", Num(kBarLeft), Num(kBarTop), Num(bottom));
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>", Num(kBarLeft), Num(bottom), Num(right));
  for (double t : ticks) {
    out += fmt::format("<text class=\"small\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", Num(kBarLeft - 5),
                       Num(y(t) + 4), TickLabel(t, Format::kPercent));
  }
  out += "</g></svg>";
  return out;
}

}  // namespace prefix_router::report::chart
