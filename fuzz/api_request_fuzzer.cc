// libFuzzer target: request bytes -> routing values (src/api), for the three APIs.
//
// The first bytes of the input choose how the rest is parsed, so one corpus covers every API
// and prefix length (fuzz/make_corpus.py writes seeds in this layout):
//
//   byte 0     bits 0-1: API (0 chat/completions, 1 completions, 2 and 3 native)
//              bit 2: amplify (see below); bit 3: routing-group header present (native);
//              bit 4: inference-component header present (native)
//              bit 5: key normalisation with excluded fields (canonical JSON on the native
//              API; no effect on OpenAI); bit 6: with excluded patterns (both APIs)
//   bytes 1-2  prefix_length, little endian (0..65535; the router accepts 1024..65536, the
//              parsers any value)
//   byte 3     the byte that fills the padding of the padded parse (the caller's padding is
//              whatever follows the body in its buffer: it must never change the result)
//   byte 4     amplify count
//   native:    byte 5 group length, byte 6 component length, then the group and component
//              bytes (present or not per the flags)
//   the rest   the body. With amplify on and the body of the form A 0xFF B 0xFF C, the body
//              becomes A + B repeated (1 + 64 x count) times + C, capped at 1 MiB, so that short
//              inputs reach gigantic strings and long arrays (0xFF never occurs in UTF-8).
//
// Beyond "no crash, no sanitizer report", every input is checked against the parsers'
// contract (api/openai_request.h, api/native_request.h, core/prefix_key.h); a violation
// aborts with a message, which libFuzzer reports as a crash.
#include <simdjson.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/key_normalisation.h"
#include "api/native_request.h"
#include "api/openai_request.h"
#include "api/request.h"
#include "core/prefix_key.h"

namespace {

using namespace prefix_router;
using namespace prefix_router::api;

[[noreturn]] void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "api_request_fuzzer: invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

#define CHECK(cond, ...)                                 \
  do {                                                   \
    if (!(cond)) Fail(#cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// A Parse result copied out of the parser, so it outlives the parser's next Parse.
struct Outcome {
  Status status;
  std::string served_name;
  std::string routing_group;
  bool stream = false;
  PrefixKey key;
  size_t prefix_units = 0;
  std::string text;  // keyed text (OpenAI only)
};

Outcome Copy(const Result<ParsedRequest>& r, const std::string& text = "") {
  Outcome o;
  if (!r.ok()) {
    o.status = r.status();
    return o;
  }
  o.served_name = std::string(r->served_name);
  o.routing_group = std::string(r->routing_group);
  o.stream = r->stream;
  o.key = r->key;
  o.prefix_units = r->prefix_units;
  o.text = text;
  return o;
}

// Parses and copies the result out before the parser is used again.
Outcome Run(OpenAiRequestParser& parser, ApiKind api, std::string_view body, uint32_t prefix_length,
            bool padded = false, const KeyNormaliser* norm = nullptr) {
  std::string text;
  Result<ParsedRequest> r = parser.Parse(api, body, prefix_length, padded, &text, norm);
  return Copy(r, text);
}

std::string Describe(const Outcome& o) {
  if (!o.status.ok()) return o.status.ToString();
  return "model='" + o.served_name + "' group='" + o.routing_group + "' units=" + std::to_string(o.prefix_units) +
         " key=" + o.key.ToHex();
}

// Equal values, or equal errors. `same_message`: the error's text must match too (not for the
// padded parse, where simdjson may read a truncated last token on into the padding and so
// describe the same broken body differently).
bool SameOutcome(const Outcome& a, const Outcome& b, bool same_message = true) {
  if (a.status.ok() != b.status.ok()) return false;
  if (!a.status.ok()) {
    return a.status.code() == b.status.code() && (!same_message || a.status.message() == b.status.message());
  }
  return a.served_name == b.served_name && a.routing_group == b.routing_group && a.stream == b.stream &&
         a.key == b.key && a.prefix_units == b.prefix_units && a.text == b.text;
}

// The key the OpenAI API must give for a keyed text: the hash of exactly those characters.
PrefixKey KeyOfText(std::string_view text, std::string_view group) {
  TextPrefixHasher h(text.size() + 1);
  h.Append(text);
  return h.Finish(group);
}

// The fuzzed key normalisations (bits 5 and 6 of byte 0). Patterns are bounded (shorter than
// kPatternLookahead), so that a shorter prefix still keys a prefix of the same text.
const KeyNormaliser* NormaliserFor(bool fields, bool patterns) {
  static const auto make = [](bool f, bool p) {
    KeyNormalisation k;
    k.canonical_json = f;
    if (f) k.exclude_fields = {"id", "metadata.*", "a.*.b", "*"};
    if (p) k.exclude_patterns = {"[0-9]{4}-[0-9]{2}-[0-9]{2}", "req-[0-9a-f]{8}", "\\u00"};
    auto n = KeyNormaliser::Create(k);
    if (!n.ok()) Fail("normaliser", n.status().message());
    return *n;
  };
  static const std::shared_ptr<const KeyNormaliser> all[4] = {nullptr, make(false, true), make(true, false),
                                                              make(true, true)};
  return all[(fields ? 2 : 0) + (patterns ? 1 : 0)].get();
}

void CheckOpenAi(ApiKind api, std::string_view body, uint32_t prefix_length, char pad, const KeyNormaliser* norm) {
  // One parser reused, as a connection's thread does, and a second one (whose previous input
  // was a different one) for the padded path: leftover state would show as a difference.
  static OpenAiRequestParser reused;
  static OpenAiRequestParser other;
  const Outcome first = Run(reused, api, body, prefix_length, false, norm);
  const Outcome again = Run(reused, api, body, prefix_length, false, norm);
  CHECK(SameOutcome(first, again), Describe(first) + " then " + Describe(again));

  std::string padded(body);
  padded.append(kBodyPadding, pad);
  const Outcome in_place = Run(other, api, std::string_view(padded.data(), body.size()), prefix_length, true, norm);
  CHECK(SameOutcome(first, in_place, /*same_message=*/false), Describe(first) + " vs padded " + Describe(in_place));

  if (!first.status.ok()) {
    CHECK(first.status.code() == StatusCode::kInvalidArgument, first.status.ToString());
    CHECK(!first.status.message().empty());
    return;
  }
  // A successful parse: the key covers at most prefix_length characters, cut on a character
  // boundary of valid UTF-8, and is exactly the hash of the keyed text and the group.
  CHECK(first.prefix_units <= prefix_length, Describe(first));
  CHECK(simdjson::validate_utf8(first.text.data(), first.text.size()), Describe(first));
  CHECK(CountCodePoints(first.text) == first.prefix_units, Describe(first));
  CHECK(first.key == KeyOfText(first.text, first.routing_group), Describe(first));
  CHECK(first.routing_group.size() <= kMaxPromptCacheKeyBytes, Describe(first));
  CHECK(simdjson::validate_utf8(first.served_name.data(), first.served_name.size()));

  // A shorter prefix keys a prefix of the same text; the other values do not depend on it (the
  // gateway parses with the longest prefix_length in use, then again with the pool's own).
  const uint32_t shorter = prefix_length / 2;
  const Outcome half = Run(reused, api, body, shorter, false, norm);
  if (!half.status.ok()) {
    // Only a body that is not JSON at all may be accepted at one length and refused at another:
    // the parsers validate what they read (api/openai_request.h), and on a broken document
    // simdjson's On-Demand reader meets the break at a point that depends on what was read.
    simdjson::dom::parser dom;
    CHECK(dom.parse(body.data(), body.size()).error() != simdjson::SUCCESS,
          Describe(first) + " but at " + std::to_string(shorter) + ": " + Describe(half));
    return;
  }
  CHECK(half.prefix_units == std::min<size_t>(shorter, first.prefix_units), Describe(half));
  CHECK(first.text.compare(0, half.text.size(), half.text) == 0, Describe(half));
  CHECK(
      half.served_name == first.served_name && half.routing_group == first.routing_group && half.stream == first.stream,
      Describe(half));
  if (first.prefix_units < prefix_length) {
    // The whole text was keyed: a longer prefix changes nothing.
    const Outcome longer = Run(reused, api, body, prefix_length + 1, false, norm);
    CHECK(SameOutcome(first, longer), Describe(first) + " vs longer " + Describe(longer));
  }
}

void CheckNative(std::string_view body, uint32_t prefix_length, std::optional<std::string_view> group,
                 std::optional<std::string_view> component) {
  const Outcome first = Copy(ParseNative(body, prefix_length, group, component));
  const Outcome again = Copy(ParseNative(body, prefix_length, group, component));
  CHECK(SameOutcome(first, again), Describe(first) + " then " + Describe(again));

  const bool group_ok = !group || ValidateRoutingGroupHeader(*group).ok();
  CHECK(first.status.ok() == group_ok, Describe(first));
  if (group) {
    const bool printable = !group->empty() && group->size() <= kMaxRoutingGroupLength &&
                           std::all_of(group->begin(), group->end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
    CHECK(group_ok == printable, std::string(*group));
  }
  if (!first.status.ok()) {
    CHECK(first.status.code() == StatusCode::kInvalidArgument, first.status.ToString());
    return;
  }
  const size_t n = std::min<size_t>(body.size(), prefix_length);
  CHECK(first.prefix_units == n, Describe(first));
  CHECK(first.served_name == component.value_or(""), Describe(first));
  CHECK(first.routing_group == group.value_or(""), Describe(first));
  CHECK(!first.stream);
  // Only the first prefix_length bytes count: the cut body keys alike, and so does any tail.
  const Outcome cut = Copy(ParseNative(body.substr(0, n), prefix_length, group, component));
  CHECK(cut.key == first.key, Describe(first) + " vs cut " + Describe(cut));
  const std::string longer = std::string(body) + "tail";
  const Outcome tail = Copy(ParseNative(longer, prefix_length, group, component));
  CHECK((tail.key == first.key) == (body.size() >= prefix_length), Describe(first) + " vs tail " + Describe(tail));
}

// Native with a normaliser: the key is the hash of the keyed bytes (the canonical prefix, or
// the raw bytes when the body is not JSON); the canonical form is a function of the body and
// prefix-consistent, and (without patterns) canonicalising it again changes nothing.
void CheckNativeNormalised(std::string_view body, uint32_t prefix_length, std::optional<std::string_view> group,
                           const KeyNormaliser& norm) {
  std::string keyed;
  const Result<ParsedRequest> r = ParseNative(body, prefix_length, group, std::nullopt, &norm, &keyed);
  const Outcome first = Copy(r);
  std::string again_keyed;
  const Outcome again = Copy(ParseNative(body, prefix_length, group, std::nullopt, &norm, &again_keyed));
  CHECK(SameOutcome(first, again) && keyed == again_keyed, Describe(first) + " then " + Describe(again));
  if (!first.status.ok()) return;
  CHECK(keyed.size() == first.prefix_units && first.prefix_units <= prefix_length, Describe(first));
  CHECK(first.key == NativePrefixKey(keyed, prefix_length, first.routing_group), Describe(first));
  std::string canonical;
  if (!norm.CanonicalNativePrefix(body, prefix_length, canonical)) {
    CHECK(first.key == NativePrefixKey(body, prefix_length, first.routing_group), Describe(first));
    return;
  }
  CHECK(canonical == keyed, Describe(first));
  std::string half;
  CHECK(norm.CanonicalNativePrefix(body, prefix_length / 2, half));
  CHECK(canonical.compare(0, half.size(), half) == 0 &&
            half.size() == std::min<size_t>(canonical.size(), prefix_length / 2),
        half + " vs " + canonical);
  if (!norm.has_patterns() && canonical.size() < prefix_length) {
    std::string twice;
    CHECK(norm.CanonicalNativePrefix(canonical, prefix_length, twice), canonical);
    CHECK(twice == canonical, twice + " vs " + canonical);
  }
}

// A B C -> A + B x count + C when the body holds two 0xFF markers (see the file comment).
std::string Amplify(std::string_view body, uint8_t count) {
  const size_t m1 = body.find('\xff');
  if (m1 == std::string_view::npos) return std::string(body);
  const size_t m2 = body.find('\xff', m1 + 1);
  if (m2 == std::string_view::npos) return std::string(body);
  const std::string_view a = body.substr(0, m1);
  const std::string_view b = body.substr(m1 + 1, m2 - m1 - 1);
  const std::string_view c = body.substr(m2 + 1);
  constexpr size_t kMaxBytes = 1 << 20;
  size_t reps = 1 + 64 * static_cast<size_t>(count);
  if (!b.empty()) reps = std::min(reps, kMaxBytes / b.size());
  std::string out(a);
  out.reserve(a.size() + b.size() * reps + c.size());
  for (size_t i = 0; i < reps && !b.empty(); ++i) out.append(b);
  out.append(c);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kHeader = 5;
  if (size < kHeader) return 0;
  const uint8_t flags = data[0];
  const uint32_t prefix_length = data[1] | (static_cast<uint32_t>(data[2]) << 8);
  const char pad = static_cast<char>(data[3]);
  const uint8_t amplify_count = data[4];
  std::string_view rest(reinterpret_cast<const char*>(data) + kHeader, size - kHeader);

  const unsigned api_bits = flags & 3;
  if (api_bits <= 1) {
    const ApiKind api = api_bits == 0 ? ApiKind::kChatCompletions : ApiKind::kCompletions;
    const std::string body = (flags & 4) ? Amplify(rest, amplify_count) : std::string(rest);
    CheckOpenAi(api, body, prefix_length, pad, NormaliserFor(false, flags & 64));
    return 0;
  }

  if (rest.size() < 2) return 0;
  const size_t group_len = static_cast<uint8_t>(rest[0]);
  const size_t component_len = static_cast<uint8_t>(rest[1]);
  rest.remove_prefix(2);
  std::optional<std::string_view> group;
  std::optional<std::string_view> component;
  if (flags & 8) {
    if (rest.size() < group_len) return 0;
    group = rest.substr(0, group_len);
    rest.remove_prefix(group_len);
  }
  if (flags & 16) {
    if (rest.size() < component_len) return 0;
    component = rest.substr(0, component_len);
    rest.remove_prefix(component_len);
  }
  const std::string body = (flags & 4) ? Amplify(rest, amplify_count) : std::string(rest);
  if (flags & (32 | 64)) {
    CheckNativeNormalised(body, prefix_length, group, *NormaliserFor(flags & 32, flags & 64));
  } else {
    CheckNative(body, prefix_length, group, component);
  }
  return 0;
}
