// What the router needs to know about a request, extracted from its bytes.
//
// A ParsedRequest holds views into the parser that produced it (or into the caller's body and
// headers for the native API): it is valid until that parser's next Parse call and while the
// body lives. RouteRequestFor() turns it into the core's RouteRequest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/policy.h"
#include "core/prefix_key.h"

namespace prefix_router::api {

enum class ApiKind {
  kChatCompletions,  // POST /v1/chat/completions: key from message characters
  kCompletions,      // POST /v1/completions: key from prompt characters
  kNative,           // POST /invocations: key from raw body bytes
  kResponses,        // POST /v1/responses: key from instructions, then input
  // Routed by `model` alone, with no prefix key (no cache to reuse): the pool's balancing,
  // least-outstanding-requests in a prefix-aware pool.
  kEmbeddings,  // POST /v1/embeddings
  kTokenize,    // POST /tokenize (vLLM); `model` optional
  kDetokenize,  // POST /detokenize (vLLM); `model` optional
};

// The prompt tokens a request is estimated to carry, from its body's size: about 4 bytes per
// token for English text (the usual rule for GPT and Llama 3 tokenizers; engine_model/tokenizer.h
// measures 3.9 characters a token on its test prose). JSON syntax and fields other than the prompt count too, so short
// requests are overestimated by a few tokens; images sent as base64 count as their text size.
// Cheap (no tokenizer on the request path), the same in the gateway and the simulator, and
// only used to weigh load (RoutingOptions::load_measure) and to meter tenants.
inline uint32_t EstimatePromptTokens(size_t body_bytes) {
  const size_t tokens = (body_bytes + 3) / 4;
  return tokens > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(tokens);
}

// How much of a request's text a pool keys: cache-aware and kv-aware pools their whole block
// chain's worth (block_bytes x max_blocks, at most 64 MiB), the others their prefix_length.
inline uint32_t KeyedLength(const RoutingOptions& o) {
  if (!UsesBlockChain(o.strategy)) return o.prefix_length;
  const uint64_t n = uint64_t{o.cache_aware.block_bytes} * o.cache_aware.max_blocks;
  return static_cast<uint32_t>(n < (64ull << 20) ? n : (64ull << 20));
}

// True for the APIs whose requests carry a prefix key worth routing by.
inline bool HasPrefixKey(ApiKind api) {
  return api != ApiKind::kEmbeddings && api != ApiKind::kTokenize && api != ApiKind::kDetokenize;
}

struct ParsedRequest {
  ApiKind api = ApiKind::kNative;
  // The name that selects eligible instances: the OpenAI `model` (base model or LoRA adapter),
  // or the native X-Amzn-SageMaker-Inference-Component header ("" = default pool).
  std::string_view served_name;
  std::string_view routing_group;  // prompt_cache_key or X-Amzn-SageMaker-Prefix-Aware-Id
  bool stream = false;             // OpenAI `stream`; always false for native
  PrefixKey key;
  size_t prefix_units = 0;  // characters (OpenAI) or bytes (native) that were keyed
};

inline RouteRequest RouteRequestFor(const ParsedRequest& p) { return RouteRequest{p.served_name, p.key, {}}; }

}  // namespace prefix_router::api
