// Request bodies and fleets for measuring whole routing decisions, shared by the Google
// Benchmark suite (decision_bench) and the instruction counter (decision_probe), so both
// measure exactly the same work.
//
// A "decision" is what the gateway does per request before it forwards anything: parse the body
// (OpenAI API) or take its bytes (native API), extract and hash the prefix, validate the routing
// group, and pick an instance with the prefix-aware policy on an idle fleet.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/native_request.h"
#include "api/openai_request.h"
#include "core/fleet.h"
#include "core/policy.h"
#include "core/rng.h"

namespace prefix_router::bench {

// An ~8,000-token chat request (~32 KB): a long system prompt with JSON escapes (quotes,
// newlines, \u sequences) and non-ASCII text (accents, CJK, emoji), then a short question.
std::string ChatRequest8kTokens();
// A native invoke body of exactly `bytes` bytes (JSON-looking, with varied content).
std::string NativeBody(size_t bytes);
// `n` instances named instance-0 .. instance-(n-1), equal weights, all serving "llama".
std::shared_ptr<const FleetSnapshot> MakeFleet(uint32_t n);

// A body stored with the padding simdjson needs, as the gateway's read buffer holds it.
struct PaddedBody {
  explicit PaddedBody(std::string text);
  std::string_view view() const { return {storage.data(), size}; }
  std::string storage;
  size_t size;
};

// Everything one decision needs, prepared outside the timed loop.
struct DecisionSetup {
  DecisionSetup(uint32_t instances, uint32_t prefix_length);
  std::shared_ptr<const FleetSnapshot> fleet;
  std::unique_ptr<Policy> policy;
  api::OpenAiRequestParser parser;
  Rng rng{42};
  uint32_t prefix_length;
};

// One whole decision; returns the chosen instance index (so the work cannot be optimised out).
// Aborts on a parse or pick error: benchmark inputs are valid by construction.
uint32_t ChatDecision(DecisionSetup& s, const PaddedBody& body);
uint32_t NativeDecision(DecisionSetup& s, const PaddedBody& body);
// The baseline: a content-blind random pick (no parsing, no hashing).
uint32_t RandomDecision(DecisionSetup& s);

}  // namespace prefix_router::bench
