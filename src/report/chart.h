// Inline SVG charts for the HTML report (internal to the report library): line charts with
// linear or logarithmic axes, per-instance share bars with a balance band, and HTML legends.
//
// Every chart is one <svg> element with a viewBox and width="100%", so it scales to the width of
// its container (a phone at ~380 px or a desktop column) without scripts, fonts or links; styling
// comes from the report's inline CSS classes (.chart, .grid, .axis). Labels are escaped here.
//
// Thread-safety: pure functions.
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace prefix_router::report::chart {

enum class Format { kNumber, kPercent, kSeconds };

struct Axis {
  std::string title;
  Format format = Format::kNumber;
  bool log = false;        // base-10 spacing; values <= 0 are clamped to the axis minimum
  bool from_zero = false;  // linear axes: include 0 in the range
  // A fixed range when both are finite; otherwise the data's range, widened to nice ticks.
  double min = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  // Ticks at exactly these values (e.g. the values of a sweep); empty = automatic.
  std::vector<double> ticks;
};

using Points = std::vector<std::pair<double, double>>;

struct Line {
  std::string label;             // legend and tooltip text
  std::string color;             // CSS colour
  std::string dash;              // SVG stroke-dasharray, "" for solid
  std::vector<Points> segments;  // each drawn as one polyline (gaps between segments)
  bool markers = false;          // a dot at every point (sparse data such as sweeps)
};

struct LineChart {
  std::string description;  // for screen readers (aria-label)
  Axis x, y;
  std::vector<Line> lines;
};

std::string RenderLineChart(const LineChart& chart);

// An HTML list of line swatches and labels; lines with the same label appear once.
std::string RenderLegend(const std::vector<Line>& lines);

struct ShareChart {
  std::string description;
  std::vector<double> share;        // fraction of requests per instance
  double band_lo = 0, band_hi = 0;  // the acceptable balance band, drawn shaded
  double ideal = 0;                 // 1 / instances, drawn dashed
  std::string color;
};

std::string RenderShareChart(const ShareChart& chart);

// Ticks on a 1-2-5 grid that cover [lo, hi] with about `target` steps.
std::vector<double> LinearTicks(double lo, double hi, int target);
// 1-2-5 ticks per decade covering [lo, hi] (lo > 0); 1-5 beyond seven ticks, powers of ten only
// beyond three decades.
std::vector<double> LogTicks(double lo, double hi);
// "250 ms", "1.5 s", "40%", "2048".
std::string TickLabel(double v, Format format);

}  // namespace prefix_router::report::chart
