// KeyNormaliser: the compiled form of a pool's KeyNormalisation (core/prefix_key.h), which makes
// equivalent requests produce the same routing input (docs/normalisation.md).
//
// The managed service keys the native API on raw body bytes, so JSON whitespace, field order
// and early dynamic metadata (a request id, a timestamp) scatter requests that share a context;
// on the OpenAI API the extracted text removes formatting but not dynamic text inside the
// messages. What a normaliser does:
//
//   native API  when any setting is on: the key is computed over the first prefix_length bytes
//               of the body's canonical JSON instead of its raw bytes:
//                 - object members sorted by their key's UTF-8 bytes (ties keep document order),
//                   members named by `exclude_fields` left out;
//                 - no whitespace outside strings;
//                 - strings (keys and values) re-escaped as RFC 8785 does: \" \\ \b \f \n \r
//                   \t, other control characters as \u00xx, everything else as UTF-8 bytes,
//                   after removing every `exclude_patterns` match from string values;
//                 - integers that fit 64 bits in decimal; every other number as the shortest
//                   decimal that reads back as the same double (1.0, 1e0 and 10E-1 give "1"),
//                   in exponent form from 2^63 in magnitude on (7.3e19 gives "7.3e+19", not
//                   an integer literal beyond 64 bits), so that canonical text parses again.
//               A body that is not JSON (or is deeper than 64 levels or larger than
//               kMaxCanonicalBodyBytes) is keyed on its raw bytes, as without normalisation.
//               A body already in canonical form keys exactly as its raw bytes would.
//   OpenAI API  `exclude_patterns` matches are removed from each text piece (message content,
//               text part, prompt string) before it joins the keyed text. `canonical_json` and
//               `exclude_fields` do nothing: that key is already built from message text only.
//
// Field paths: "name" is a member of the top-level object; "a.b.c" descends through objects;
// a segment "*" matches any one key; arrays are transparent (a path continues into every
// element of an array it meets). A key containing '.' can only be matched with "*".
//
// Patterns: Perl syntax (Boost.Regex), over UTF-8 bytes; `.` does not match a newline; every
// pattern is tried at each position as one alternation, the leftmost match is removed. A
// pattern that can match the empty string is rejected at load. The scan of a piece stops
// where the key's budget is filled: a match must end within kPatternLookahead bytes after the
// last byte the key can still take, longer matches are not seen.
//
// Thread-safety: a KeyNormaliser is immutable and shared by all threads. CanonicalNativePrefix
// uses a per-thread parser (simdjson DOM) whose capacity grows to the largest body seen.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/prefix_key.h"
#include "core/status.h"

namespace prefix_router::api {

inline constexpr size_t kMaxExcludeFields = 64;
inline constexpr size_t kMaxExcludePatterns = 32;
inline constexpr size_t kMaxFieldPathSegments = 16;
inline constexpr size_t kMaxCanonicalDepth = 64;
inline constexpr size_t kMaxCanonicalBodyBytes = 16u << 20;
inline constexpr size_t kPatternLookahead = 1024;

// Where kept text goes: the OpenAI key's TextPrefixHasher or the native canonical output.
class KeyTextSink {
 public:
  virtual ~KeyTextSink() = default;
  // Takes a piece of kept text; false once the key's budget is full.
  virtual bool Append(std::string_view kept) = 0;
  // An upper bound on how many more bytes of input it can still take (0 = full).
  virtual size_t MaxBytesWanted() const = 0;
};

class KeyNormaliser {
 public:
  // InvalidArgument naming the setting ("exclude_fields[1]: ...", "exclude_patterns[0]: ...").
  static Result<std::shared_ptr<const KeyNormaliser>> Create(const KeyNormalisation& options);
  ~KeyNormaliser();
  KeyNormaliser(const KeyNormaliser&) = delete;
  KeyNormaliser& operator=(const KeyNormaliser&) = delete;

  const KeyNormalisation& options() const { return options_; }
  bool has_patterns() const { return !options_.exclude_patterns.empty(); }

  // Native API: the first `prefix_length` bytes of `body`'s canonical form into `out`. False
  // (and `out` unspecified) when the body is not canonicalisable JSON; key its raw bytes then.
  bool CanonicalNativePrefix(std::string_view body, size_t prefix_length, std::string& out) const;

  // Passes `text` to `sink` with every pattern match removed, until the sink is full.
  void AppendFiltered(std::string_view text, KeyTextSink& sink) const;

 private:
  struct Impl;
  explicit KeyNormaliser(KeyNormalisation options);

  KeyNormalisation options_;
  std::unique_ptr<Impl> impl_;
};

// A sink over the OpenAI key's hasher: it counts characters, so it may want up to 4 bytes each.
class HasherSink final : public KeyTextSink {
 public:
  explicit HasherSink(TextPrefixHasher& hasher) : h_(hasher) {}
  bool Append(std::string_view kept) override { return h_.Append(kept); }
  size_t MaxBytesWanted() const override { return h_.remaining_chars() * 4; }

 private:
  TextPrefixHasher& h_;
};

}  // namespace prefix_router::api
