#include "bench/decision_cases.h"

#include <cstdio>
#include <cstdlib>

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

PaddedBody::PaddedBody(std::string text) : storage(std::move(text)), size(storage.size()) {
  storage.append(api::kBodyPadding, '\0');
}

DecisionSetup::DecisionSetup(uint32_t instances, uint32_t prefix_length_in)
    : fleet(MakeFleet(instances)), prefix_length(prefix_length_in) {
  RoutingOptions options;
  options.strategy = Strategy::kPrefixAware;
  options.prefix_length = prefix_length;
  if (Status st = options.Validate(); !st.ok()) Die(st);
  policy = MakePolicy(options);
}

uint32_t ChatDecision(DecisionSetup& s, const PaddedBody& body) {
  auto parsed = s.parser.Parse(api::ApiKind::kChatCompletions, body.view(), s.prefix_length, true);
  if (!parsed.ok()) Die(parsed.status());
  auto d = s.policy->Pick(api::RouteRequestFor(*parsed), *s.fleet, s.rng);
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
