// The engine emulator's view of an OpenAI-compatible request, and the responses it writes.
//
// Parsing here is the engine's, not the router's: it needs the whole prompt (to tokenize it
// through the chat template), max_tokens and the streaming options. Boost.JSON is fast enough
// for an emulator that should serve thousands of requests per second on one core.
//
// Accepted bodies:
//   /v1/chat/completions  {"model", "messages": [{"role", "content": string | parts | null}],
//                          "max_tokens" | "max_completion_tokens" (default 128), "stream",
//                          "stream_options": {"include_usage"}}
//   /v1/completions       {"model", "prompt": string | [string] | [ids] (first prompt used),
//                          "max_tokens" (default 16), "stream", "stream_options"}
//   /invocations          either of the above shapes (messages or prompt), or the TGI shape
//                          {"inputs": string, "parameters": {"max_new_tokens"}}
//
// Values only; no I/O. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine_model/tokenizer.h"

namespace prefix_router::engine_model {

enum class RequestShape { kChat, kCompletion, kTgi };

struct EngineHttpRequest {
  RequestShape shape = RequestShape::kChat;
  std::string model;                                // "" = the base model
  std::vector<engine_model::ChatMessage> messages;  // kChat
  std::string prompt;                               // kCompletion / kTgi text prompt
  std::vector<uint32_t> prompt_ids;                 // kCompletion given as token ids
  bool prompt_is_ids = false;
  uint32_t max_tokens = 16;
  bool stream = false;
  bool include_usage = false;
};

inline constexpr uint32_t kDefaultChatMaxTokens = 128;
inline constexpr uint32_t kDefaultCompletionMaxTokens = 16;

// `path` selects the API: "/v1/chat/completions", "/v1/completions" or "/invocations".
Result<EngineHttpRequest> ParseEngineRequest(std::string_view path, std::string_view body);

// The prompt's token ids, through the chat template for chat requests.
std::vector<uint32_t> PromptTokens(const EngineHttpRequest& r);

// POST /tokenize in vLLM's shape: {"model", "messages", "add_generation_prompt" (default
// true)} tokenizes a chat through the chat template; {"model", "prompt": string | [ids],
// "add_special_tokens" (default true: <|begin_of_text|> first)} a completion prompt (ids are
// returned as given). For the same messages or prompt, the tokens are those a generation
// request gets (PromptTokens), so a router may route on them (gateway/prompt_tokens.h).
struct TokenizeRequest {
  std::string model;  // "" = the base model
  std::vector<uint32_t> tokens;
};
Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body);
// {"count":N,"max_model_len":L,"tokens":[...],"token_strs":null}
std::string TokenizeResponseBody(const std::vector<uint32_t>& tokens, uint32_t max_model_len);

// `usage` as vLLM writes it. vLLM reports the prompt tokens served from its prefix cache
// (`prompt_tokens_details.cached_tokens`) only when started with --enable-prompt-tokens-details
// (off by default), and even then only when the count is above 0
// (vllm/entrypoints/openai/serving_chat.py: `if self.enable_prompt_tokens_details and
// num_cached_tokens`). Otherwise a whole response carries `"prompt_tokens_details": null`
// (pydantic's model_dump keeps None) and a stream's usage chunk has no such member (its chunks
// are dumped with exclude_none).
struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
  bool prompt_tokens_details = false;  // the engine runs with --enable-prompt-tokens-details
};

// Whole responses and stream chunks in OpenAI's shapes. `id` like "chatcmpl-42".
std::string CompletionBody(const EngineHttpRequest& r, const std::string& id, int64_t created, const std::string& text,
                           const Usage& usage);
// One SSE event ("data: {...}\n\n") carrying `text` (the first chunk of a chat stream also
// carries the assistant role).
std::string StreamChunk(const EngineHttpRequest& r, const std::string& id, int64_t created, const std::string& text,
                        bool first);
// The final event with finish_reason "length", then the usage event if requested, then
// "data: [DONE]\n\n".
std::string StreamEnd(const EngineHttpRequest& r, const std::string& id, int64_t created, const Usage& usage);
// vLLM's error shape (since 0.10.1, OpenAI-compatible):
// {"error":{"message":...,"type":"NotFoundError","param":null,"code":404}}.
std::string VllmErrorBody(int status, std::string_view type, std::string_view message);

}  // namespace prefix_router::engine_model
