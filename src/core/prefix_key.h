// PrefixKey: the 128-bit routing key of a request, and the builders that compute it.
//
// A key covers the leading part of a request (its "prefix") and, when present, the routing
// group (tenant identifier). Equal prefixes in different groups give unrelated keys, so
// tenants place independently; the group gives routing isolation only, not data isolation.
//
// What "prefix" means depends on the API, as the managed service defines it:
//   - native invoke API: the first `prefix_length` bytes of the raw body, exactly as received;
//   - OpenAI-compatible API: the first `prefix_length` characters (Unicode code points) of the
//     text extracted from the request (see api/openai_request.h for the extraction). A code
//     point is never split: the cut falls on a character boundary.
// A text shorter than `prefix_length` is keyed on all of it.
//
// Hashing is XXH3-128 with fixed seeds, so two processes (router replicas, the simulator)
// compute the same key for the same input; there is no per-process seed.
//
// Thread-safety: PrefixKey is a value. A TextPrefixHasher belongs to one thread at a time.
#pragma once

// TextPrefixHasher embeds an XXH3_state_t by value, whose definition xxhash.h only exposes
// under XXH_STATIC_LINKING_ONLY (the state layout is tied to the library version we link).
#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY
#endif
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prefix_router {

struct PrefixKey {
  uint64_t low = 0;
  uint64_t high = 0;

  // The 64 bits placement uses (the key is already uniformly distributed).
  uint64_t placement_hash() const { return low; }
  std::string ToHex() const;  // 32 lowercase hex digits, high then low
  friend bool operator==(const PrefixKey&, const PrefixKey&) = default;
};

// How a pool turns a request into the input of its key, beyond the API's definition above
// (docs/normalisation.md). Plain data: the api library compiles it (api/key_normalisation.h)
// and validates it; the core only carries it with the pool's other options.
//   canonical_json    native API: key the canonical form of a JSON body (sorted object keys,
//                     no insignificant whitespace, one string escaping, normalised numbers)
//                     instead of its raw bytes; non-JSON bodies keep their raw bytes.
//   exclude_fields    native API: JSON fields left out of the canonical form (implies it);
//                     "name", "a.b.c", "*" for any one key. No effect on the OpenAI API.
//   exclude_patterns  regular expressions whose matches are removed from the keyed text: the
//                     OpenAI API's message and prompt text; native string values in canonical
//                     form.
struct KeyNormalisation {
  bool canonical_json = false;
  std::vector<std::string> exclude_fields;
  std::vector<std::string> exclude_patterns;

  bool enabled() const { return canonical_json || !exclude_fields.empty() || !exclude_patterns.empty(); }
  bool operator==(const KeyNormalisation&) const = default;
};

// Routing group limits for the native header X-Amzn-SageMaker-Prefix-Aware-Id.
inline constexpr size_t kMaxRoutingGroupLength = 64;

// Combines the hash of a prefix with the routing group ("" = no group).
PrefixKey CombineWithGroup(XXH128_hash_t prefix_hash, std::string_view group);

// Native invoke API: the first `prefix_length` bytes of `body`.
PrefixKey NativePrefixKey(std::string_view body, size_t prefix_length, std::string_view group);

// UTF-8 helpers (input assumed valid UTF-8; invalid input is counted, never over-read).
// Number of code points in `s`.
size_t CountCodePoints(std::string_view s);
// Byte length of the longest prefix of `s` holding at most `max_chars` code points, ending on
// a code point boundary; `*chars` receives how many code points that prefix holds.
size_t Utf8PrefixBytes(std::string_view s, size_t max_chars, size_t* chars);

// Hashes the first `max_chars` code points of a text given in pieces, without copying it.
// Pieces after the limit is reached are ignored. Optionally records the keyed text.
class TextPrefixHasher {
 public:
  // `record`, when not null, receives the text that was keyed (for tests and `route --explain`).
  explicit TextPrefixHasher(size_t max_chars, std::string* record = nullptr);
  TextPrefixHasher(const TextPrefixHasher&) = delete;
  TextPrefixHasher& operator=(const TextPrefixHasher&) = delete;

  // Appends a piece of valid UTF-8. Returns false once the limit is reached.
  bool Append(std::string_view utf8);
  bool full() const { return chars_ >= max_chars_; }
  size_t chars() const { return chars_; }
  size_t remaining_chars() const { return max_chars_ - chars_; }
  size_t bytes() const { return bytes_; }
  PrefixKey Finish(std::string_view group);

 private:
  XXH3_state_t state_;
  size_t max_chars_;
  size_t chars_ = 0;
  size_t bytes_ = 0;
  std::string* record_;
};

}  // namespace prefix_router
