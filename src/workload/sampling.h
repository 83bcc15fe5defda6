// Random draws for the generated workloads, all from the project's Rng (so a workload is
// reproducible from its seed): lognormal lengths, uniform integers, geometric turn counts and
// Zipf popularity over a finite set.
//
// Lengths of prompts and replies in published LLM traces (ShareGPT, LMSYS-Chat, Azure LLM
// inference traces) are heavy-tailed and roughly lognormal, which is why most sizes here are
// "median and sigma, clamped"; popularity of shared contexts is skewed, hence Zipf.
//
// Thread-safety: ZipfTable is immutable after construction; the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace prefix_router::workload {

// A standard normal draw (Box-Muller, one of the pair).
double NormalDraw(Rng& rng);

// round(median * exp(sigma * N(0,1))) clamped to [lo, hi]. REQUIRES: lo <= hi.
uint32_t LogNormalInt(Rng& rng, double median, double sigma, uint32_t lo, uint32_t hi);

// A lognormal length: median, sigma, clamped to [min, max].
struct Lengths {
  double median = 0;
  double sigma = 0;
  uint32_t min = 0;
  uint32_t max = 0;

  uint32_t Draw(Rng& rng) const { return LogNormalInt(rng, median, sigma, min, max); }
};

// Uniform in [lo, hi]. REQUIRES: lo <= hi.
uint32_t UniformInt(Rng& rng, uint32_t lo, uint32_t hi);

// Geometric on {1, 2, ...} with the given mean (success probability 1/mean), clamped to
// [1, max]. REQUIRES: mean >= 1, max >= 1.
uint32_t GeometricInt(Rng& rng, double mean, uint32_t max);
// The mean of that clamped distribution: E[min(K, max)] = (1 - (1-p)^max) / p.
double GeometricClampedMean(double mean, uint32_t max);

// Zipf popularity over ranks 0..n-1: P(rank k) proportional to 1 / (k+1)^s (s = 0: uniform).
class ZipfTable {
 public:
  // REQUIRES: n >= 1, s >= 0.
  ZipfTable(size_t n, double s);

  size_t size() const { return cdf_.size(); }
  // The probability of rank k.
  double Probability(size_t k) const;
  // One rank.
  size_t Draw(Rng& rng) const;
  // `k` distinct ranks, each drawn with probability proportional to its weight among the ranks
  // not drawn yet (sampling without replacement, in draw order). REQUIRES: k <= size().
  std::vector<size_t> DrawDistinct(Rng& rng, size_t k) const;

 private:
  std::vector<double> weight_;  // normalized
  std::vector<double> cdf_;     // cdf_[k] = sum of weight_[0..k]
};

}  // namespace prefix_router::workload
