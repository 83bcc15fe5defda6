// Request bodies and fleets for measuring whole routing decisions, shared by the Google
// Benchmark suite (decision_bench) and the instruction counter (decision_probe), so both
// measure exactly the same work.
//
// A "decision" is what the gateway does per request before it forwards anything: parse the body
// (OpenAI API) or take its bytes (native API), extract and hash the prefix, validate the routing
// group, and pick an instance with the pool's policy (prefix-aware unless a case names another).
// cache-aware and kv-aware decisions also key the whole text and build its block chain, as the
// gateway does for them (gateway/request_path.cc); kv-aware's prompt token ids are given (the
// gateway's local tokenizer is measured by scripts/tokenize-cost.sh, not here).
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

// The fleet's state when the decision is made.
enum class FleetLoad {
  kIdle,
  // The request's first choice holds ConcurrencyThreshold requests, so the decision goes down
  // the preference order (prefix-aware) or to the next cheapest instance (cache-aware, kv-aware).
  kFirstChoiceFull,
};

// Everything one decision needs, prepared outside the timed loop. For cache-aware, kv-aware and
// dynamo-kv the policy has seen the chat request once, dispatched to the middle instance (and,
// for the strategies that read KV events, that instance reported its prompt's blocks stored), so
// that the decision finds it cached there.
struct DecisionSetup {
  DecisionSetup(uint32_t instances, uint32_t prefix_length, Strategy strategy = Strategy::kPrefixAware,
                FleetLoad load = FleetLoad::kIdle, double balance_factor = kDefaultBalanceFactor);
  std::shared_ptr<const FleetSnapshot> fleet;
  std::unique_ptr<Policy> policy;
  RoutingOptions options;
  api::OpenAiRequestParser parser;
  std::string keyed_text;                // cache-aware, kv-aware: the parser's keyed text
  std::vector<uint64_t> chain;           // its block chain, rebuilt per decision
  std::vector<uint32_t> prompt_tokens;   // kv-aware, dynamo-kv: the chat request's token ids
  Rng rng{42};
  uint32_t prefix_length;
  uint32_t first_choice = 0;  // the idle fleet's choice for the chat request
  // Heap the fleet snapshot took, and the policy with the state the setup fed it (before the first
  // decision), as the meter given to SetHeapMeter counts them; 0 without a meter.
  size_t fleet_bytes = 0;
  size_t policy_bytes = 0;
};

// A function returning the bytes the process has allocated and not freed (decision_probe counts
// them in its operator new and delete); DecisionSetup measures its parts with it.
void SetHeapMeter(size_t (*live_bytes)());

// One whole decision; returns the chosen instance index (so the work cannot be optimised out).
// Aborts on a parse or pick error: benchmark inputs are valid by construction.
uint32_t ChatDecision(DecisionSetup& s, const PaddedBody& body);
uint32_t NativeDecision(DecisionSetup& s, const PaddedBody& body);
// The chat request's decision under s.options.strategy (ChatDecision is prefix-aware's: the same
// for that strategy).
uint32_t ChatDecisionFor(DecisionSetup& s, const PaddedBody& body);
// The baseline: a content-blind random pick (no parsing, no hashing).
uint32_t RandomDecision(DecisionSetup& s);

}  // namespace prefix_router::bench
