// Token usage read out of an OpenAI-compatible response while it streams past: the gateway's
// relay feeds every body piece it forwards, and the load generator reads its chunks and bodies
// with the same scanner, so that both count the same tokens from the same bytes.
//
// Where usage is (vLLM, SGLang, the OpenAI API, our engine emulator):
//   whole body     {"choices":[...], "usage":{...}}                      chat and text completions
//                  {"object":"response", ..., "usage":{...}}             /v1/responses
//   SSE stream     data: {"choices":[], "usage":{...}}                   the chunk a client gets
//                                                                        with stream_options
//                                                                        .include_usage
//                  data: {"type":"response.completed","response":{..., "usage":{...}}}
//   usage          {"prompt_tokens", "completion_tokens", "prompt_tokens_details":{"cached_tokens"}}
//                  or the Responses API's {"input_tokens", "output_tokens",
//                  "input_tokens_details":{"cached_tokens"}}
// Only a `usage` member of the top-level object (or of its top-level `response` object) counts;
// a stream's last complete usage object wins (vLLM's continuous_usage_stats repeats a running
// total in every chunk). prompt_tokens_details is null or absent from a vLLM without
// --enable-prompt-tokens-details, and from one with it when nothing was cached (vLLM writes it
// only for a count above 0): cached_present then stays false.
//
// Why a scanner and not a JSON parser: the relay must not slow down or allocate for it. The
// scanner is a byte-at-a-time state machine of fixed size (a bit stack of 64 nesting levels, a
// 24-byte key buffer, a few counters) that never looks back at earlier pieces, so a body or an
// SSE event split anywhere (inside a key, a number, a CRLF) reads the same as in one piece. It
// does not validate JSON: bytes that are not JSON (an SSE `[DONE]`, a truncated body) at worst
// yield no usage. Keys written with escapes (\u0075sage) are not recognised; no server does that.
//
// Thread-compatible: one scanner per response.
#pragma once

#include <cstdint>
#include <string_view>

namespace prefix_router::api {

struct ResponseUsage {
  bool present = false;         // a complete usage object was seen
  uint32_t prompt_tokens = 0;   // prompt_tokens (input_tokens); counts saturate at 2^32-1
  uint32_t cached_tokens = 0;   // 0 unless cached_present
  bool cached_present = false;  // prompt_tokens_details.cached_tokens was a number
  uint32_t completion_tokens = 0;
};

class UsageScanner {
 public:
  enum class Framing {
    kJson,  // the body is one JSON document
    kSse,   // the body is a text/event-stream: each event's data is a JSON document
  };

  explicit UsageScanner(Framing framing = Framing::kJson) : framing_(framing) {}

  // The next piece of the body, in order. Never allocates.
  void Feed(std::string_view bytes);
  // The last complete usage object seen so far (present false: none).
  const ResponseUsage& usage() const { return result_; }

 private:
  enum class Target : uint8_t { kNone, kUsage, kResponse, kPrompt, kCompletion, kDetails, kCached };
  enum class Line : uint8_t { kField, kSpace, kData, kSkip };

  void JsonByte(char c);
  void ResetDocument();
  void KeyEnded();
  void NumberEnded();
  void Open(bool object);
  void Close();
  bool TopIsObject() const { return depth_ > 0 && depth_ <= 64 && (kinds_ >> (depth_ - 1)) & 1; }

  Framing framing_;
  ResponseUsage result_;
  ResponseUsage current_;  // the usage object being read

  // JSON state of the current document.
  uint64_t kinds_ = 0;  // bit d-1 set: the container at depth d is an object (depths 1..64)
  uint32_t depth_ = 0;
  uint32_t usage_depth_ = 0;     // depth of the open usage object's members (0: none open)
  uint32_t details_depth_ = 0;   // ... of its prompt_tokens_details object
  uint32_t response_depth_ = 0;  // ... of the top-level `response` object
  bool done_ = false;            // the top-level value ended (or the bytes are not JSON)
  bool in_string_ = false;
  bool escape_ = false;
  bool string_is_key_ = false;
  bool expect_key_ = false;
  bool in_number_ = false;
  bool number_negative_ = false;
  bool number_integral_ = true;    // no '.', 'e' yet: digits still count
  Target target_ = Target::kNone;  // what the value after the last key is
  uint64_t number_ = 0;
  char key_[24] = {};
  uint8_t key_len_ = 0;
  bool key_long_ = false;  // longer than key_ or escaped: matches nothing

  // SSE framing.
  Line line_ = Line::kField;
  uint8_t field_matched_ = 0;  // bytes of "data:" matched at the start of the line
  bool line_empty_ = true;     // nothing on this line yet
  bool after_cr_ = false;      // the last byte was CR (a following LF ends the same line)
  bool event_has_data_ = false;
};

}  // namespace prefix_router::api
