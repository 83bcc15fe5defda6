#include "bench/decision_cases.h"

#include <cstdio>
#include <cstdlib>

#include "api/request.h"
#include "core/block_chain.h"
#include "core/rng.h"

namespace prefix_router::bench {
namespace {

constexpr const char* kWords[] = {
    "the",      "model",   "returns",        "a",        "summary", "of",         "each",    "document",
    "section",  "with",    "cited",          "sources",  "and",     "keeps",      "answers", "short",
    "résumé",   "naïve",   "café",           "日本語の", "文書",    "要約",       "😀",       "Straße",
    "function", "returns", "\\\"quoted\\\"", "\\n",      "\\u00e9", "tab\\there", "{json}",  "x<y>z"};

void AppendText(std::string& out, size_t approx_bytes, uint64_t seed) {
  Rng rng(seed);
  const size_t start = out.size();
  while (out.size() - start < approx_bytes) {
    out += kWords[rng.Uniform(sizeof(kWords) / sizeof(kWords[0]))];
    out += rng.Uniform(12) == 0 ? ". " : " ";
  }
}

size_t (*heap_meter)() = nullptr;
size_t LiveBytes() { return heap_meter ? heap_meter() : 0; }

[[noreturn]] void Die(const Status& s) {
  std::fprintf(stderr, "decision_cases: %s\n", s.ToString().c_str());
  std::abort();
}

}  // namespace

std::string ChatRequest8kTokens() {
  std::string body = R"({"model":"llama","stream":true,"max_tokens":128,"messages":[)";
  body += R"({"role":"system","content":"You are a careful assistant. Reference material follows.\n)";
  AppendText(body, 31'500, 7);
  body += R"("},{"role":"user","content":"Summarise section 3 in two sentences."}]})";
  return body;
}

std::string NativeBody(size_t bytes) {
  std::string body = R"({"inputs":")";
  AppendText(body, bytes, 11);
  body.resize(bytes - 3);
  body += "\"}";
  body.resize(bytes, ' ');
  return body;
}

std::shared_ptr<const FleetSnapshot> MakeFleet(uint32_t n) {
  std::vector<InstanceSpec> specs;
  for (uint32_t i = 0; i < n; ++i) {
    specs.push_back({"instance-" + std::to_string(i), "http://127.0.0.1:" + std::to_string(9000 + i), 1, {"llama"}});
  }
  auto fleet = FleetSnapshot::Create(std::move(specs));
  if (!fleet.ok()) Die(fleet.status());
  return *fleet;
}

void SetHeapMeter(size_t (*live_bytes)()) { heap_meter = live_bytes; }

PaddedBody::PaddedBody(std::string text) : storage(std::move(text)), size(storage.size()) {
  storage.append(api::kBodyPadding, '\0');
}

DecisionSetup::DecisionSetup(uint32_t instances, uint32_t prefix_length_in, Strategy strategy, FleetLoad load,
                             double balance_factor)
    : prefix_length(prefix_length_in) {
  const size_t before_fleet = LiveBytes();
  fleet = MakeFleet(instances);
  fleet_bytes = LiveBytes() - before_fleet;
  options.strategy = strategy;
  options.prefix_length = prefix_length;
  options.balance_factor = balance_factor;
  if (Status st = options.Validate(); !st.ok()) Die(st);
  // What the policy is fed below, prepared before its heap is measured.
  const bool seen = UsesBlockChain(strategy) || UsesKvEvents(strategy);
  const uint32_t holder = instances / 2;  // the instance that served the request before
  RouteRequest sent;
  KvEventBatch reported;
  PaddedBody body(ChatRequest8kTokens());
  if (UsesKvEvents(strategy)) {
    // About as many tokens as the chat request's 32 KB (4 bytes a token), ids as a tokenizer's.
    constexpr uint32_t kPromptTokens = 8000;
    constexpr uint32_t kBlockSize = 16;
    for (uint32_t j = 0; j < kPromptTokens; ++j) prompt_tokens.push_back(1000 + static_cast<uint32_t>(Mix64(j) % 127000));
    KvBlockStored stored;
    stored.block_size = kBlockSize;
    stored.medium = "GPU";
    stored.token_ids = prompt_tokens;
    for (uint32_t b = 0; b < kPromptTokens / kBlockSize; ++b) stored.block_hashes.push_back(Mix64(~uint64_t{b}));
    reported.events.push_back(std::move(stored));
  }
  if (seen) {
    auto parsed = parser.Parse(api::ApiKind::kChatCompletions, body.view(), api::KeyedLength(options), true,
                               UsesBlockChain(strategy) ? &keyed_text : nullptr);
    if (!parsed.ok()) Die(parsed.status());
    sent = api::RouteRequestFor(*parsed);
    sent.work_tokens = api::EstimatePromptTokens(body.size);
    if (UsesBlockChain(strategy)) {
      chain = BuildBlockChain(keyed_text, options.cache_aware.block_bytes, options.cache_aware.max_blocks,
                              BlockChainSeed(parsed->served_name, parsed->routing_group));
      sent.blocks = chain;
    }
    sent.prompt_tokens = prompt_tokens;
  }
  const size_t before_policy = LiveBytes();
  policy = MakePolicy(options);
  if (seen) policy->OnDispatched(sent, Decision{holder, DecisionKind::kAffinity, 0}, *fleet);
  if (UsesKvEvents(strategy)) policy->OnKvEvents(fleet->placement_seed(holder), reported);
  policy_bytes = LiveBytes() - before_policy;
  first_choice = ChatDecisionFor(*this, body);
  if (load == FleetLoad::kFirstChoiceFull) {
    fleet->state(first_choice).in_flight.store(static_cast<int32_t>(options.concurrency_threshold));
  }
}

uint32_t ChatDecision(DecisionSetup& s, const PaddedBody& body) {
  auto parsed = s.parser.Parse(api::ApiKind::kChatCompletions, body.view(), s.prefix_length, true);
  if (!parsed.ok()) Die(parsed.status());
  auto d = s.policy->Pick(api::RouteRequestFor(*parsed), *s.fleet, s.rng);
  if (!d.ok()) Die(d.status());
  return d->instance;
}

uint32_t ChatDecisionFor(DecisionSetup& s, const PaddedBody& body) {
  const bool chained = UsesBlockChain(s.options.strategy);
  auto parsed = s.parser.Parse(api::ApiKind::kChatCompletions, body.view(), api::KeyedLength(s.options), true,
                               chained ? &s.keyed_text : nullptr);
  if (!parsed.ok()) Die(parsed.status());
  RouteRequest r = api::RouteRequestFor(*parsed);
  r.work_tokens = api::EstimatePromptTokens(body.size);
  if (chained) {
    s.chain = BuildBlockChain(s.keyed_text, s.options.cache_aware.block_bytes, s.options.cache_aware.max_blocks,
                              BlockChainSeed(parsed->served_name, parsed->routing_group));
    r.blocks = s.chain;
  }
  r.prompt_tokens = s.prompt_tokens;
  auto d = s.policy->Pick(r, *s.fleet, s.rng);
  if (!d.ok()) Die(d.status());
  return d->instance;
}

uint32_t NativeDecision(DecisionSetup& s, const PaddedBody& body) {
  auto parsed = api::ParseNative(body.view(), s.prefix_length, std::string_view("tenant-7"), std::nullopt);
  if (!parsed.ok()) Die(parsed.status());
  auto d = s.policy->Pick(api::RouteRequestFor(*parsed), *s.fleet, s.rng);
  if (!d.ok()) Die(d.status());
  return d->instance;
}

uint32_t RandomDecision(DecisionSetup& s) {
  RouteRequest r{"llama", {}, {}};
  static const auto random = MakePolicy(RoutingOptions{});
  auto d = random->Pick(r, *s.fleet, s.rng);
  if (!d.ok()) Die(d.status());
  return d->instance;
}

}  // namespace prefix_router::bench
