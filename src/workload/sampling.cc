#include "workload/sampling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace prefix_router::workload {

double NormalDraw(Rng& rng) {
  // 1 - U is in (0, 1], so the logarithm is finite.
  const double u1 = 1.0 - rng.NextDouble();
  const double u2 = rng.NextDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint32_t LogNormalInt(Rng& rng, double median, double sigma, uint32_t lo, uint32_t hi) {
  const double x = std::round(median * std::exp(sigma * NormalDraw(rng)));
  if (!(x >= lo)) return lo;  // also catches NaN
  if (x >= hi) return hi;
  return static_cast<uint32_t>(x);
}

uint32_t UniformInt(Rng& rng, uint32_t lo, uint32_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi) - lo + 1;
  if (span > UINT32_MAX) return static_cast<uint32_t>(rng.Next());
  return lo + rng.Uniform(static_cast<uint32_t>(span));
}

uint32_t GeometricInt(Rng& rng, double mean, uint32_t max) {
  if (mean <= 1.0 || max <= 1) return 1;
  const double p = 1.0 / mean;
  const double u = 1.0 - rng.NextDouble();  // (0, 1]
  const double k = 1.0 + std::floor(std::log(u) / std::log1p(-p));
  if (!(k < max)) return max;
  return static_cast<uint32_t>(k);
}

double GeometricClampedMean(double mean, uint32_t max) {
  if (mean <= 1.0 || max <= 1) return 1.0;
  const double p = 1.0 / mean;
  return (1.0 - std::pow(1.0 - p, static_cast<double>(max))) / p;
}

ZipfTable::ZipfTable(size_t n, double s) : weight_(n), cdf_(n) {
  double total = 0;
  for (size_t k = 0; k < n; ++k) {
    weight_[k] = s == 0 ? 1.0 : std::pow(static_cast<double>(k + 1), -s);
    total += weight_[k];
  }
  double acc = 0;
  for (size_t k = 0; k < n; ++k) {
    weight_[k] /= total;
    acc += weight_[k];
    cdf_[k] = acc;
  }
  cdf_.back() = 1.0;
}

double ZipfTable::Probability(size_t k) const { return weight_[k]; }

size_t ZipfTable::Draw(Rng& rng) const {
  const double u = rng.NextDouble();
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  return std::min<size_t>(static_cast<size_t>(it - cdf_.begin()), cdf_.size() - 1);
}

std::vector<size_t> ZipfTable::DrawDistinct(Rng& rng, size_t k) const {
  // Draw a point in the remaining mass, then walk it past the intervals of the ranks already
  // taken (in rank order): an exact draw without replacement in O(k log n), with no rejection
  // loop that a steep exponent could make arbitrarily long.
  std::vector<size_t> drawn;
  std::vector<size_t> taken;  // sorted
  drawn.reserve(k);
  taken.reserve(k);
  double taken_mass = 0;
  for (size_t i = 0; i < k; ++i) {
    double pos = rng.NextDouble() * (1.0 - taken_mass);
    for (size_t t : taken) {
      const double start = t == 0 ? 0.0 : cdf_[t - 1];
      if (start <= pos) {
        pos += weight_[t];
      } else {
        break;
      }
    }
    size_t r = static_cast<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), pos) - cdf_.begin());
    r = std::min(r, cdf_.size() - 1);
    // Rounding can land on a taken rank or past the end: take the nearest free one.
    auto is_taken = [&](size_t x) { return std::binary_search(taken.begin(), taken.end(), x); };
    if (is_taken(r)) {
      size_t up = r;
      while (up < cdf_.size() && is_taken(up)) ++up;
      if (up < cdf_.size()) {
        r = up;
      } else {
        while (is_taken(r)) --r;
      }
    }
    drawn.push_back(r);
    taken.insert(std::upper_bound(taken.begin(), taken.end(), r), r);
    taken_mass += weight_[r];
  }
  return drawn;
}

}  // namespace prefix_router::workload
