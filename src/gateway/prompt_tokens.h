// Prompt tokens for kv-aware routing: the request's token ids as the engines will see them, so
// that the policy can match them against the token blocks the engines report in their KV
// events (core/kv_events.h; RouteRequest::prompt_tokens).
//
// The tokens come from the engine-compatible tokenizer and chat template of the engine model
// (engine_model/tokenizer.h), through the emulator's own request parser
// (engine_model/engine_request.h), so a request routed to the emulator yields exactly the tokens whose
// blocks that emulator publishes.
//
// Or, with the pool's `tokenizer: engine`, from the engine itself: the gateway POSTs vLLM's
// /tokenize request (TokenizeQueryFor: the body's messages and chat-template fields, or its
// prompt) to a routable instance of the pool and routes on the answer's token ids
// (ParseTokenizeAnswer). The trade-off:
//   - local: no I/O; one extra JSON parse and a linear pass over the prompt in the gateway
//     (microseconds per kilobyte). Exact for the emulator only: with a real model's tokenizer
//     the ids differ, no reported block matches, and kv-aware decides as cache-aware does.
//   - engine: exact tokens for any model, chat template and adapter, as the engine computes
//     them; costs one round trip to an instance and that engine's tokenizer CPU per request,
//     before the decision (docs/proof.md measures it on loopback), and depends on the instance
//     answering: a failure or timeouts.tokenize (default 1 s) routes that request without
//     tokens (cache-aware's view), counted in prefix_router_tokenize_requests_total.
// A completion prompt given as token ids needs neither: the ids are the tokens.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/request.h"
#include "core/policy.h"
#include "core/status.h"

namespace prefix_router::gateway {

// True for pools whose policy routes on prompt tokens: the strategies that read the engines' KV
// events (kv-aware, dynamo-kv; core/policy.h UsesKvEvents).
bool WantsPromptTokens(const RoutingOptions& options);

// The prompt's token ids as the engine emulator computes them for this body on `api`'s path
// (chat messages through the chat template; a completion prompt; the native API's either
// shape). InvalidArgument when the engine would refuse the body; then the request is routed
// without tokens (the engine answers the error).
Result<std::vector<uint32_t>> EnginePromptTokens(api::ApiKind api, std::string_view body);

// tokenizer: engine. The /tokenize request for this body in vLLM's shape: for chat messages
// (the chat API, or a native body with "messages") the members model, messages, tools,
// chat_template, chat_template_kwargs, add_generation_prompt, continue_final_message,
// add_special_tokens, documents and mm_processor_kwargs, copied verbatim; for a completion
// prompt (the completions API, or a native body with "prompt" or TGI's "inputs") model, the
// prompt (the first of several) and add_special_tokens. A prompt of token ids needs no request:
// `tokens` holds them. InvalidArgument when the body has no prompt (the engine answers it).
struct TokenizeQuery {
  std::string body;              // POST /tokenize with this, unless has_tokens
  std::vector<uint32_t> tokens;  // the prompt's ids, when the body gives them
  bool has_tokens = false;
};
Result<TokenizeQuery> TokenizeQueryFor(api::ApiKind api, std::string_view body);

// The "tokens" of a /tokenize answer ({"count", "max_model_len", "tokens": [ids], ...}), each
// below 2^32; more than `max_tokens` of them is ResourceExhausted, a malformed answer
// InvalidArgument.
Result<std::vector<uint32_t>> ParseTokenizeAnswer(std::string_view body, size_t max_tokens);

}  // namespace prefix_router::gateway
