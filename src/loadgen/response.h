// What the load generator reads out of a response: the content and usage of OpenAI-style
// stream chunks and whole completion bodies, and the engine emulator's x-engine-timing header.
//
// Shapes understood (vLLM, SGLang, the OpenAI API, our emulator and gateway):
//   stream chunk   {"choices":[{"delta":{"content": "..."}}]}  (chat)
//                  {"choices":[{"text": "..."}]}                (completions)
//                  {"choices":[], "usage":{...}}                (the include_usage chunk)
//                  {"error":{...}}                               (an error mid-stream, as the
//                                                                  gateway and vLLM send it)
//   whole body     {"choices":[{"message":{"content":"..."}}], "usage":{...}} (chat)
//                  {"choices":[{"text":"..."}], "usage":{...}}                (completions)
//                  [{"generated_text":"..."}] or {"generated_text":"..."}    (TGI, native)
//   usage          {"prompt_tokens", "completion_tokens",
//                   "prompt_tokens_details":{"cached_tokens"}}
//                  prompt_tokens_details is null or absent from a vLLM without
//                  --enable-prompt-tokens-details (and from one with it when nothing was
//                  cached): the usage then has no cached-token count (cached_present false).
//
// A chunk "carries content" when its first choice has non-empty `delta.content`, `text` or
// `delta.reasoning_content` / `delta.reasoning` (a reasoning model's first tokens); only content
// and text go into the reply, which is what a multi-turn client resends.
//
// Pure functions (Boost.JSON); thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "api/response_usage.h"

namespace prefix_router::loadgen {

// Read by api::UsageScanner, the gateway's reader too: bench and the gateway's token counters
// count the same tokens from the same bytes.
using Usage = api::ResponseUsage;

struct ChunkInfo {
  bool valid = false;        // the data was a JSON object
  bool has_content = false;  // carried generated content (see above)
  bool error = false;        // an `error` object
  std::string error_message;
};

// Parses one SSE data payload (not "[DONE]"). Appends the chunk's content to `*reply` and fills
// `*usage` when the chunk has a usage object.
ChunkInfo ParseStreamChunk(std::string_view data, std::string* reply, Usage* usage);

// Parses a whole (non-streaming) response body: the reply text into `*reply`, usage into
// `*usage`. Same meaning of the result's fields as for a chunk.
ChunkInfo ParseCompletionBody(std::string_view body, std::string* reply, Usage* usage);

// x-engine-timing: queue=<s>; ttft=<s>; cached=<n>; prompt=<n> (any order, unknown keys
// ignored; the emulator leaves cached= out unless it runs with --enable-prompt-tokens-details,
// and cached_tokens stays -1). False when the header has neither queue nor ttft.
struct EngineTiming {
  double queue_s = -1;
  double ttft_s = -1;
  int64_t cached_tokens = -1;
  int64_t prompt_tokens = -1;
};
bool ParseEngineTiming(std::string_view header, EngineTiming* out);

// The gateway's decision kinds that mean the request left its preferred instance.
bool IsOverflowDecision(std::string_view decision);

}  // namespace prefix_router::loadgen
