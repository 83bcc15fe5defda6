// The OpenAI-compatible API: routing values from /v1/chat/completions, /v1/completions,
// /v1/responses, /v1/embeddings and vLLM's /tokenize and /detokenize.
//
// The prefix is counted in characters (Unicode code points) of a text extracted from the
// request, so JSON formatting, escapes and field order do not change the key. The extraction:
//
//   chat       for each message, in order:
//                role  U+001F  part_1 U+001D part_2 ... U+001D part_n  U+001E
//              where a part is, for string content, the whole string; for array content, each
//              element in order: a "text" part gives its `text`, a "refusal" part its
//              `refusal`, any other part (image_url, input_audio, file, ...) gives U+001A
//              followed by 16 hex digits of a digest of the whole part (field-order
//              insensitive), so different images give different keys. Null or absent content
//              gives no part. Other message fields (name, tool_calls, ...) are not keyed.
//   completions  the prompt: a string as is; an array of strings joined by U+001E; an array
//              of token ids as decimal numbers separated by spaces; an array of such arrays
//              joined by U+001E.
//   responses  `instructions` (a string; null or absent gives nothing) followed by U+001E,
//              then `input`, whatever the order of the two in the body: a string as is; an
//              array of items, each keyed like a chat message (role U+001F parts U+001E, where
//              input_text and output_text parts give their `text` as well), except items without
//              a `role` (function_call, function_call_output, reasoning, item_reference, ...),
//              which give U+001A, 16 hex digits of their digest, U+001E. `input` is optional.
//              Conversation state kept by the engine (previous_response_id) is not keyed.
//   embeddings, tokenize, detokenize  no text and no key: only `model` is read (required for
//              embeddings; optional for vLLM's tokenize and detokenize, where none means any
//              instance).
//
// A pool's key normalisation may remove text matching its exclude_patterns from each piece of
// message or prompt text first (api/key_normalisation.h).
//
// The key is the hash of the first `prefix_length` characters of that text, combined with the
// routing group from the `prompt_cache_key` field (a string of at most 1,024 bytes; empty or
// null means none). A text shorter than `prefix_length` is keyed whole.
//
// Also read: `model` (required, a string) and `stream` (a boolean or null). Any other field is
// skipped. Malformed JSON, invalid UTF-8 or wrong types in what is read are InvalidArgument with
// a message that names the field. What is not read (skipped fields, content after the keyed
// prefix) is not validated, so that parsing costs what the key needs: such a body is relayed
// and the engine answers it with its own 400 (found by fuzz/api_request_fuzzer.cc).
//
// Thread-safety: an OpenAiRequestParser belongs to one thread at a time (one per connection or
// per I/O thread); results hold views into it, valid until its next Parse.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "api/key_normalisation.h"
#include "api/request.h"
#include "core/status.h"

namespace prefix_router::api {

// Bytes that must be readable past the end of a body passed with `padded` = true.
inline constexpr size_t kBodyPadding = 64;
inline constexpr size_t kMaxPromptCacheKeyBytes = 1024;

class OpenAiRequestParser {
 public:
  OpenAiRequestParser();
  ~OpenAiRequestParser();
  OpenAiRequestParser(const OpenAiRequestParser&) = delete;
  OpenAiRequestParser& operator=(const OpenAiRequestParser&) = delete;

  // REQUIRES: api is not kNative. When `padded`, the caller guarantees
  // kBodyPadding readable bytes after body's end (saves a copy); otherwise the body is copied
  // into a reused buffer. When `keyed_text` is not null it receives the keyed text. A
  // `normaliser` with exclude_patterns removes their matches from the message and prompt text
  // (not from roles and separators) before it is keyed.
  Result<ParsedRequest> Parse(ApiKind api, std::string_view body, uint32_t prefix_length, bool padded = false,
                              std::string* keyed_text = nullptr, const KeyNormaliser* normaliser = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefix_router::api
