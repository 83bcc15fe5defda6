// Estimates of the heap that standard containers hold, for indexes bounded in bytes
// (core/block_index.h, core/kv_index.h): what glibc's allocator hands out for their nodes and
// arrays, so that a bound counted with these functions is the memory really taken (measured by
// src/bench/index_bench.cc's BM_*IndexFill against mallinfo2).
//
// Pure functions.
#pragma once

#include <algorithm>
#include <cstddef>

namespace prefix_router::heap_bytes {

// What the allocator hands out for `n` bytes (glibc: 8 bytes of header, 16-byte steps, at least
// 32), so a hash-map node is counted as the memory it takes.
constexpr size_t AllocBytes(size_t n) { return std::max<size_t>(32, (n + 8 + 15) / 16 * 16); }

// An array's block: a large one (from glibc's least mmap threshold, 128 KiB) may be mapped on
// its own, in whole 4 KiB pages.
constexpr size_t ArrayBytes(size_t n) {
  if (n == 0) return 0;
  return n < (128u << 10) ? AllocBytes(n) : (n + 16 + 4095) / 4096 * 4096;
}

// A std::unordered_map with integer keys: its nodes (the next pointer and the value; std::hash of
// an integer caches no hash code) and its bucket array (a single bucket is built in).
template <typename Map>
size_t MapBytes(const Map& m) {
  constexpr size_t node = AllocBytes(sizeof(void*) + sizeof(typename Map::value_type));
  const size_t buckets = m.bucket_count() > 1 ? ArrayBytes(m.bucket_count() * sizeof(void*)) : 0;
  return m.size() * node + buckets;
}

// A boost::unordered_flat_map (open addressing, no nodes): one block for its slots (capacity,
// bucket_count(), of them: groups of 15, less one for the sentinel) and each group's 16 bytes of
// metadata, rounded to whole elements as Boost allocates it.
template <typename Map>
size_t FlatMapBytes(const Map& m) {
  const size_t slots = m.bucket_count();
  if (slots == 0) return 0;
  constexpr size_t value = sizeof(typename Map::value_type);
  const size_t groups = (slots + 1) / 15;
  const size_t bytes = value * slots + 16 * (groups + 1) - 1;
  return ArrayBytes((bytes + value - 1) / value * value);
}

// A std::vector's capacity.
template <typename Vec>
size_t VectorBytes(const Vec& v) {
  return ArrayBytes(v.capacity() * sizeof(typename Vec::value_type));
}

}  // namespace prefix_router::heap_bytes
