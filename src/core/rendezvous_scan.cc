#include "core/rendezvous_scan.h"

#include <array>
#include <bit>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12's AVX-512 headers start some vectors from an uninitialised one that every lane then
// overwrites, which -Wmaybe-uninitialized reports at each use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define PR_RENDEZVOUS_X86 1
#endif

namespace prefix_router::rendezvous_scan {
namespace {

bool Before(uint64_t score, uint32_t index, uint64_t other_score, uint32_t other_index) {
  return score != other_score ? score > other_score : index < other_index;
}

// The running best two of a merge, in the scalar order: score, then index, then position (the
// scalar loop keeps the first of equals; a merge may offer them out of order).
struct TopTwo {
  size_t first = kNone, second = kNone;
  uint64_t first_score = 0, second_score = 0;
  uint32_t first_index = 0, second_index = 0;
  static bool Ahead(size_t position, uint32_t index, uint64_t score, size_t other_position, uint32_t other_index,
                    uint64_t other_score) {
    if (score != other_score || index != other_index) return Before(score, index, other_score, other_index);
    return position < other_position;
  }
  void Offer(size_t position, uint32_t index, uint64_t score) {
    if (first == kNone || Ahead(position, index, score, first, first_index, first_score)) {
      second = first;
      second_score = first_score;
      second_index = first_index;
      first = position;
      first_score = score;
      first_index = index;
    } else if (second == kNone || Ahead(position, index, score, second, second_index, second_score)) {
      second = position;
      second_score = score;
      second_index = index;
    }
  }
};

// The reference: one candidate at a time.
namespace scalar {

size_t Best(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n) {
  size_t best = 0;
  uint64_t best_score = RendezvousHash(key, seeds[c[0]]);
  for (size_t k = 1; k < n; ++k) {
    const uint64_t s = RendezvousHash(key, seeds[c[k]]);
    if (Before(s, c[k], best_score, c[best])) {
      best = k;
      best_score = s;
    }
  }
  return best;
}

BestTwo BestTwoOf(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n) {
  TopTwo top;
  for (size_t k = 0; k < n; ++k) top.Offer(k, c[k], RendezvousHash(key, seeds[c[k]]));
  return {top.first, top.second};
}

void Scores(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n, uint64_t* out) {
  for (size_t k = 0; k < n; ++k) out[k] = RendezvousHash(key, seeds[c[k]]);
}

size_t CountAbove(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n, uint64_t score,
                  uint64_t skip_seed) {
  size_t count = 0;
  for (size_t k = 0; k < n; ++k) {
    const uint64_t seed = seeds[c[k]];
    count += seed != skip_seed && RendezvousHash(key, seed) > score;
  }
  return count;
}

}  // namespace scalar

#ifdef PR_RENDEZVOUS_X86

// The vector kernel keeps, per lane, the best (and second best) score seen and its position,
// comparing scores strictly. Equal scores mean equal seeds (the hash is a bijection of
// key ^ seed), which a fleet does not have; should two candidates still tie in one lane, the
// lane could not tell their order by index, so the kernel notes any equality and answers with
// the scalar loop instead. Lanes are merged in the scalar order; the last n % 8 candidates are
// offered one by one.

constexpr uint64_t kNoPosition = UINT64_MAX;
// Fewer candidates than this take the scalar loop: the scan is a fraction of a microsecond either
// way, and code using 512-bit registers can lower the core's clock for what follows (Intel's
// AVX-512 frequency licences), which cost more than it saved on 64-instance fleets.
constexpr size_t kVectorFrom = 256;

namespace avx512 {

#define PR_AVX512 __attribute__((target("avx512f,avx512dq")))
constexpr size_t kWidth = 8;

// The seeds of eight candidates (positions k .. k+7): one load when they are consecutive
// instances (gathers cost several times more on the CPUs measured).
PR_AVX512 inline __m512i Gather(const uint64_t* seeds, const uint32_t* c) {
  const __m256i index = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
  const __m256i run = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(c[0])), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(index, run)) == -1) return _mm512_loadu_si512(seeds + c[0]);
  return _mm512_i32gather_epi64(index, seeds, 8);
}

// RendezvousHash of eight (key, seed) pairs (the 64-bit multiply is AVX-512DQ's).
PR_AVX512 inline __m512i Hash(__m512i key, __m512i seed) {
  __m512i x = _mm512_xor_si512(key, seed);
  x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 27));
  x = _mm512_mullo_epi64(x, _mm512_set1_epi64(static_cast<int64_t>(kRendezvousMul1)));
  x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
  x = _mm512_mullo_epi64(x, _mm512_set1_epi64(static_cast<int64_t>(kRendezvousMul2)));
  return _mm512_xor_si512(x, _mm512_srli_epi64(x, 27));
}

// Offers the lanes' candidates (scores, positions) to a merge.
PR_AVX512 inline void Offer(TopTwo& top, const uint32_t* c, __m512i lane_scores, __m512i lane_at) {
  std::array<uint64_t, kWidth> scores, at;
  _mm512_storeu_si512(scores.data(), lane_scores);
  _mm512_storeu_si512(at.data(), lane_at);
  for (size_t l = 0; l < kWidth; ++l) {
    if (at[l] != kNoPosition) top.Offer(at[l], c[at[l]], scores[l]);
  }
}

template <bool kSecond>
PR_AVX512 BestTwo Scan(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n) {
  if (n < kVectorFrom) return kSecond ? scalar::BestTwoOf(key, seeds, c, n) : BestTwo{scalar::Best(key, seeds, c, n), kNone};
  const __m512i keys = _mm512_set1_epi64(static_cast<int64_t>(key));
  const __m512i step = _mm512_set1_epi64(kWidth);
  __m512i position = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  __m512i best = _mm512_setzero_si512(), best_at = _mm512_set1_epi64(-1);  // score 0, no position
  __m512i next = best, next_at = best_at;
  __mmask8 equal = 0;
  size_t k = 0;
  for (; k + kWidth <= n; k += kWidth) {
    const __m512i s = Hash(keys, Gather(seeds, c + k));
    const __mmask8 above_best = _mm512_cmpgt_epu64_mask(s, best);
    equal |= _mm512_cmpeq_epu64_mask(s, best);
    if constexpr (kSecond) {
      const __mmask8 above_next = _mm512_cmpgt_epu64_mask(s, next);
      equal |= _mm512_cmpeq_epu64_mask(s, next);
      next = _mm512_mask_blend_epi64(above_best, _mm512_mask_blend_epi64(above_next, next, s), best);
      next_at = _mm512_mask_blend_epi64(above_best, _mm512_mask_blend_epi64(above_next, next_at, position), best_at);
    }
    best = _mm512_mask_blend_epi64(above_best, best, s);
    best_at = _mm512_mask_blend_epi64(above_best, best_at, position);
    position = _mm512_add_epi64(position, step);
  }
  if (equal != 0) return scalar::BestTwoOf(key, seeds, c, n);
  TopTwo top;
  Offer(top, c, best, best_at);
  if constexpr (kSecond) Offer(top, c, next, next_at);
  for (; k < n; ++k) top.Offer(k, c[k], RendezvousHash(key, seeds[c[k]]));
  return {top.first, top.second};
}

PR_AVX512 size_t Best(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n) {
  return Scan<false>(key, seeds, c, n).first;
}
PR_AVX512 BestTwo BestTwoOf(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n) {
  return Scan<true>(key, seeds, c, n);
}

PR_AVX512 void Scores(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n, uint64_t* out) {
  if (n < kVectorFrom) return scalar::Scores(key, seeds, c, n, out);
  const __m512i keys = _mm512_set1_epi64(static_cast<int64_t>(key));
  size_t k = 0;
  for (; k + kWidth <= n; k += kWidth) _mm512_storeu_si512(out + k, Hash(keys, Gather(seeds, c + k)));
  for (; k < n; ++k) out[k] = RendezvousHash(key, seeds[c[k]]);
}

PR_AVX512 size_t CountAbove(uint64_t key, const uint64_t* seeds, const uint32_t* c, size_t n, uint64_t score,
                            uint64_t skip_seed) {
  if (n < kVectorFrom) return scalar::CountAbove(key, seeds, c, n, score, skip_seed);
  const __m512i keys = _mm512_set1_epi64(static_cast<int64_t>(key));
  const __m512i threshold = _mm512_set1_epi64(static_cast<int64_t>(score));
  const __m512i skip = _mm512_set1_epi64(static_cast<int64_t>(skip_seed));
  size_t count = 0, k = 0;
  for (; k + kWidth <= n; k += kWidth) {
    const __m512i seed = Gather(seeds, c + k);
    const __mmask8 other = _mm512_cmpneq_epu64_mask(seed, skip);
    const __mmask8 counted = _mm512_mask_cmpgt_epu64_mask(other, Hash(keys, seed), threshold);
    count += static_cast<size_t>(std::popcount(static_cast<unsigned>(counted)));
  }
  return count + scalar::CountAbove(key, seeds, c + k, n - k, score, skip_seed);
}

#undef PR_AVX512
}  // namespace avx512

#endif  // PR_RENDEZVOUS_X86

std::vector<Kernel> Detect() {
  std::vector<Kernel> kernels{{"scalar", scalar::Best, scalar::BestTwoOf, scalar::Scores, scalar::CountAbove}};
#ifdef PR_RENDEZVOUS_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) {
    kernels.push_back({"avx512", avx512::Best, avx512::BestTwoOf, avx512::Scores, avx512::CountAbove});
  }
#endif
  return kernels;
}

const std::vector<Kernel>& Kernels() {
  static const std::vector<Kernel> kernels = Detect();
  return kernels;
}

}  // namespace

std::span<const Kernel> Available() { return Kernels(); }

const Kernel& Best() {
  static const Kernel& best = Kernels().back();
  return best;
}

}  // namespace prefix_router::rendezvous_scan
