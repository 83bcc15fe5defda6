// Prompt tokens for kv-aware routing: the request's token ids as the engines will see them, so
// that the policy can match them against the token blocks the engines report in their KV
// events (core/kv_events.h; RouteRequest::prompt_tokens).
//
// The tokens come from the engine-compatible tokenizer and chat template of the engine model
// (engine_model/tokenizer.h), through the emulator's own request parser
// (engine/engine_request.h), so a request routed to the emulator yields exactly the tokens whose
// blocks that emulator publishes.
//
// Trade-off against asking the engine (vLLM's POST /tokenize, with the same chat template the
// engine applies): /tokenize gives the exact tokens of a real engine with any model's tokenizer,
// but costs a network round trip (and the engine's tokenizer CPU) per request before the
// routing decision, and fails when the engine does; the local tokenizer costs one extra JSON
// parse and a linear tokenization of the prompt in the gateway (microseconds per kilobyte), but
// matches real engines only as far as their tokenizer is this one. With a real vLLM fleet the
// local tokens do not match the engines' blocks, and kv-aware then decides as cache-aware does;
// a /tokenize mode is not built yet.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
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

}  // namespace prefix_router::gateway
