#include "workload/workload.h"

#include <array>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "workload/generators.h"

namespace prefix_router::workload {
namespace {

constexpr std::array<std::string_view, 7> kNames = {"long-context", "sharegpt-like", "agentic",
                                                    "rag",          "noisy-native",  "trace",
                                                    "mooncake"};

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when it is malformed.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t len = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return len;
}

uint64_t Load8(const char* p) {
  uint64_t x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

// Non-zero when any of the 8 bytes in `x` is a control character, '"', '\\' or non-ASCII (the
// classic SWAR byte tests: a byte is below n when (b - n) borrows into its high bit).
uint64_t AttentionMask(uint64_t x) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  const auto has_zero = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  const uint64_t below_space = (x - kOnes * 0x20) & ~x & kHigh;
  return (x & kHigh) | below_space | has_zero(x ^ (kOnes * '"')) | has_zero(x ^ (kOnes * '\\'));
}

#if defined(__SSE2__)
// Whether the 16 bytes at `p` are all plain ASCII (0x20..0x7f) other than '"' and '\\'. A signed
// compare below 0x20 also catches bytes >= 0x80, which are negative as signed chars.
bool PlainBlock16(const char* p) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i bad = _mm_or_si128(
      _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
      _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
  return _mm_movemask_epi8(bad) == 0;
}
#endif

// Appends `s` as a JSON string. Control characters are escaped, and malformed UTF-8 bytes
// become U+FFFD, so the body is valid JSON whatever the text holds.
void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  size_t run = 0;  // start of the pending run of bytes copied as they are
  size_t i = 0;
  const auto flush = [&](size_t end) {
    out.append(s.data() + run, end - run);
  };
  while (i < s.size()) {
    // Skip plain ASCII in blocks: generated prompts are tens of KB of it.
#if defined(__SSE2__)
    while (i + 16 <= s.size() && PlainBlock16(s.data() + i)) i += 16;
#endif
    while (i + 8 <= s.size() && AttentionMask(Load8(s.data() + i)) == 0) i += 8;
    if (i >= s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(s, i);
      if (len > 0) {
        i += len;
        continue;
      }
      flush(i);
      out += "\xEF\xBF\xBD";
      run = ++i;
      continue;
    }
    flush(i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
    }
    run = ++i;
  }
  flush(i);
  out += '"';
}

void AppendMessages(std::string& out, const std::vector<Message>& messages) {
  out += "\"messages\":[";
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += ',';
    out += "{\"role\":";
    AppendJsonString(out, messages[i].role);
    out += ",\"content\":";
    AppendJsonString(out, messages[i].content);
    out += '}';
  }
  out += ']';
}

// {"model", "messages" | "prompt", "max_tokens", "stream", ["stream_options"],
//  ["prompt_cache_key"]}.
std::string OpenAiBody(const Request& r, bool chat, bool stream, std::string_view default_model,
                       bool with_group) {
  size_t size = 128 + r.prompt.size() + r.routing_group.size() + r.model.size();
  for (const Message& m : r.messages) size += m.content.size() + m.role.size() + 32;
  std::string out;
  out.reserve(size + size / 16);
  out += "{\"model\":";
  AppendJsonString(out, r.model.empty() ? default_model : std::string_view(r.model));
  out += ',';
  if (chat) {
    AppendMessages(out, r.messages);
  } else {
    out += "\"prompt\":";
    AppendJsonString(out, r.prompt);
  }
  out += ",\"max_tokens\":";
  out += std::to_string(r.max_tokens);
  out += stream ? ",\"stream\":true,\"stream_options\":{\"include_usage\":true}"
                : ",\"stream\":false";
  if (with_group && !r.routing_group.empty()) {
    out += ",\"prompt_cache_key\":";
    AppendJsonString(out, r.routing_group);
  }
  out += '}';
  return out;
}

}  // namespace

std::vector<std::string_view> WorkloadNames() { return {kNames.begin(), kNames.end()}; }

Result<std::unique_ptr<Workload>> MakeWorkload(std::string_view name, const ParamMap& params,
                                               uint64_t seed) {
  if (name == "long-context") return MakeLongContext(params, seed);
  if (name == "sharegpt-like") return MakeShareGptLike(params, seed);
  if (name == "agentic") return MakeAgentic(params, seed);
  if (name == "rag") return MakeRag(params, seed);
  if (name == "noisy-native") return MakeNoisyNative(params, seed);
  if (name == "trace") return MakeTrace(params, seed);
  if (name == "mooncake") return MakeMooncake(params, seed);
  std::string list;
  for (std::string_view n : kNames) {
    if (!list.empty()) list += ", ";
    list += n;
  }
  return Status::InvalidArgument("unknown workload '" + std::string(name) + "' (known: " + list +
                                 ")");
}

std::string RenderBody(const Request& r, bool stream, std::string_view default_model) {
  switch (r.api) {
    case api::ApiKind::kChatCompletions:
      return OpenAiBody(r, /*chat=*/true, stream, default_model, /*with_group=*/true);
    case api::ApiKind::kCompletions:
      return OpenAiBody(r, /*chat=*/false, stream, default_model, /*with_group=*/true);
    case api::ApiKind::kNative:
      // The routing group travels in the X-Amzn-SageMaker-Prefix-Aware-Id header.
      if (!r.body.empty()) return r.body;
      return OpenAiBody(r, /*chat=*/!r.messages.empty(), stream, default_model,
                        /*with_group=*/false);
    default:  // the workloads generate none of the other APIs
      break;
  }
  return {};
}

std::string_view PathFor(api::ApiKind api) {
  switch (api) {
    case api::ApiKind::kChatCompletions:
      return "/v1/chat/completions";
    case api::ApiKind::kCompletions:
      return "/v1/completions";
    case api::ApiKind::kNative:
      return "/invocations";
    default:
      break;
  }
  return "/v1/chat/completions";
}

}  // namespace prefix_router::workload
