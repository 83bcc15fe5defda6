// `prefix-router route`: the routing decision for one request, explained. Reads a request body
// (a file or stdin), extracts the prefix key as the gateway would, and prints one JSON object:
// the key, how much of the request was keyed, the instances in preference order and the pick.
// Two runs with the same instances print the same order: placement has no per-process seed.
// cache-aware (the default strategy) keys the whole routing text as the gateway does and decides
// on a cold index (nothing sent before): its pick is the first instance of the preference order
// (ties go to the key's rendezvous preference), the instance the gateway would send the first
// request of this prefix to.
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "api/error.h"
#include "api/native_request.h"
#include "api/openai_request.h"
#include "api/request.h"
#include "base/json_text.h"
#include "base/utf8.h"
#include "cli/commands.h"
#include "core/block_chain.h"
#include "core/fleet.h"
#include "core/placement.h"
#include "core/policy.h"

namespace prefix_router::cli {
namespace {

struct RouteArgs {
  std::string api = "chat";
  std::vector<std::string> instances;
  uint32_t instance_count = 0;
  std::string strategy{StrategyName(kDefaultStrategy)};
  std::string spill = "next-preferred";
  uint32_t prefix_length = kDefaultPrefixLength;
  uint32_t concurrency_threshold = kDefaultConcurrencyThreshold;
  double balance_factor = kDefaultBalanceFactor;
  std::optional<std::string> group;  // absent header vs empty value matter
  std::optional<std::string> component;
  uint64_t seed = 1;
  bool show_text = false;
  std::string input = "-";
};

// "name" or "name:weight".
Result<InstanceSpec> ParseInstance(const std::string& text) {
  InstanceSpec spec;
  auto colon = text.rfind(':');
  spec.name = text.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      size_t used = 0;
      unsigned long w = std::stoul(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) throw std::invalid_argument("trailing");
      spec.weight = static_cast<uint32_t>(w);
    } catch (const std::exception&) {
      return Status::InvalidArgument("--instance '" + text + "': the weight after ':' must be a number");
    }
  }
  return spec;
}

int Fail(const Status& s) {
  std::cerr << "prefix-router route: " << s.message() << "\n";
  return 2;
}

int RunRoute(const RouteArgs& a) {
  RoutingOptions options;
  auto strategy = ParseStrategy(a.strategy);
  if (!strategy.ok()) return Fail(strategy.status());
  if (UsesKvEvents(*strategy)) {
    return Fail(
        Status::InvalidArgument(std::string(StrategyName(*strategy)) +
                                " decides from the blocks the engines report they hold; one request alone has nothing "
                                "to match (compare it with `prefix-router simulate --strategy " +
                                std::string(StrategyName(*strategy)) + "`)"));
  }
  auto spill = ParseSpillMode(a.spill);
  if (!spill.ok()) return Fail(spill.status());
  options.strategy = *strategy;
  options.spill = *spill;
  options.prefix_length = a.prefix_length;
  options.concurrency_threshold = a.concurrency_threshold;
  options.balance_factor = a.balance_factor;
  if (Status s = options.Validate(); !s.ok()) return Fail(s);

  std::vector<InstanceSpec> specs;
  for (const auto& text : a.instances) {
    auto spec = ParseInstance(text);
    if (!spec.ok()) return Fail(spec.status());
    specs.push_back(std::move(*spec));
  }
  for (uint32_t i = 0; i < a.instance_count; ++i) specs.push_back({"instance-" + std::to_string(i)});
  if (specs.empty()) return Fail(Status::InvalidArgument("give --instance NAME (repeatable) or --instances N"));
  auto fleet = FleetSnapshot::Create(std::move(specs));
  if (!fleet.ok()) return Fail(fleet.status());

  std::string body;
  if (a.input == "-") {
    body.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(a.input, std::ios::binary);
    if (!in) return Fail(Status::NotFound("cannot open " + a.input));
    body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // cache-aware keys its whole block chain's worth of text, the others prefix_length.
  const uint32_t keyed_length = api::KeyedLength(options);
  api::OpenAiRequestParser parser;
  std::string keyed_text;
  Result<api::ParsedRequest> parsed = Status::Internal("unset");
  if (a.api == "native") {
    std::optional<std::string_view> group, component;
    if (a.group) group = *a.group;
    if (a.component) component = *a.component;
    parsed = api::ParseNative(body, keyed_length, group, component);
    if (parsed.ok()) keyed_text = body.substr(0, parsed->prefix_units);
  } else if (a.api == "chat" || a.api == "completions") {
    parsed = parser.Parse(a.api == "chat" ? api::ApiKind::kChatCompletions : api::ApiKind::kCompletions, body,
                          keyed_length, false, &keyed_text);
  } else {
    return Fail(Status::InvalidArgument("--api: '" + a.api + "' is not one of chat, completions, native"));
  }
  if (!parsed.ok()) {
    // The same error the gateway would answer with.
    api::ApiError e = api::ErrorFromStatus(parsed.status());
    std::cout << R"({"http_status":)" << e.http_status << R"(,"body":)" << api::ErrorBody(e) << "}\n";
    return 1;
  }

  const FleetSnapshot& f = **fleet;
  auto policy = MakePolicy(options);
  Rng rng(a.seed);
  RouteRequest request = api::RouteRequestFor(*parsed);
  request.work_tokens = api::EstimatePromptTokens(body.size());
  std::vector<uint64_t> chain;
  if (UsesBlockChain(options.strategy)) {
    chain = BuildBlockChain(keyed_text, options.cache_aware.block_bytes, options.cache_aware.max_blocks,
                            BlockChainSeed(parsed->served_name, parsed->routing_group));
    request.blocks = chain;
  }
  auto decision = policy->Pick(request, f, rng);
  if (!decision.ok()) return Fail(decision.status());

  std::vector<uint32_t> order(f.Eligible(request.served_name).begin(), f.Eligible(request.served_name).end());
  SortByPreference(request.key.placement_hash(), f, order);

  std::string out = "{";
  auto add = [&out](std::string_view k, std::string_view v, bool quote) {
    if (out.size() > 1) out += ',';
    out += '"';
    out += k;
    out += "\":";
    if (quote) out += '"';
    if (quote) {
      base::AppendJsonEscaped(out, v);
    } else {
      out += v;
    }
    if (quote) out += '"';
  };
  add("api", a.api, true);
  add("served_name", parsed->served_name, true);
  add("routing_group", parsed->routing_group, true);
  add("prefix_units", std::to_string(parsed->prefix_units), false);
  add("key", parsed->key.ToHex(), true);
  add("strategy", policy->name(), true);
  if (UsesBlockChain(options.strategy)) add("blocks", std::to_string(chain.size()), false);
  std::string pref = "[";
  for (size_t k = 0; k < order.size(); ++k) {
    if (k) pref += ',';
    pref += '"';
    base::AppendJsonEscaped(pref, f.spec(order[k]).name);
    pref += '"';
  }
  pref += ']';
  add("preference", pref, false);
  add("instance", f.spec(decision->instance).name, true);
  add("decision", DecisionKindName(decision->kind), true);
  add("rank", std::to_string(decision->rank), false);
  // The keyed text, cut at a character boundary for display (a native prefix is a byte count
  // and may end inside a character; the key itself keeps every byte). Invalid bytes print as
  // U+FFFD (AppendJsonEscaped), so the line is always valid JSON.
  if (a.show_text) add("keyed_text", base::TrimPartialUtf8(keyed_text), true);
  out += "}\n";
  std::cout << out;
  return 0;
}

}  // namespace

void AddRouteCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RouteArgs>();
  CLI::App* cmd =
      app.add_subcommand("route",
                         "Explain the routing decision for one request body: the prefix key, how many characters "
                         "(OpenAI API) or bytes (native API) were keyed, the instances in preference order and "
                         "the instance picked on an idle fleet. Prints one JSON object; exit 1 with the gateway's "
                         "error body when the request is invalid.");
  cmd->add_option("input", args->input, "Request body file, or - for standard input")->capture_default_str();
  cmd->add_option("--api", args->api,
                  "chat (/v1/chat/completions), completions (/v1/completions) or native "
                  "(/invocations: the raw body's bytes)")
      ->capture_default_str();
  cmd->add_option("--instance", args->instances, "An instance NAME or NAME:WEIGHT (weight 1..10000); repeatable");
  cmd->add_option("--instances", args->instance_count, "Also add N instances named instance-0 .. instance-(N-1)");
  std::string accepted, refused;
  for (const StrategyInfo& e : StrategyRegistry()) {
    std::string& list = UsesKvEvents(e.strategy) ? refused : accepted;
    list += (list.empty() ? "" : UsesKvEvents(e.strategy) ? " and " : " | ") + std::string(e.name);
  }
  cmd->add_option("--strategy", args->strategy,
                  accepted + " (default " + std::string(StrategyName(kDefaultStrategy)) +
                      ", the gateway's: decided on a cold index here, so its pick is the first "
                      "instance of the preference order). " +
                      refused +
                      " decide from the blocks the engines report, which one request alone does "
                      "not have: refused (compare them with simulate)")
      ->capture_default_str();
  cmd->add_option("--prefix-length", args->prefix_length,
                  "Characters (OpenAI API) or bytes (native API) of the prefix, 1024..65536 "
                  "(prefix-aware; cache-aware keys the whole text)")
      ->capture_default_str();
  cmd->add_option("--concurrency-threshold", args->concurrency_threshold,
                  "In-flight requests per instance before spilling, 1..1024")
      ->capture_default_str();
  cmd->add_option("--spill-mode", args->spill, "next-preferred | least-loaded")->capture_default_str();
  // One request on an idle fleet is never over its bounded-load cap (at least 4), so the
  // factor rarely changes the decision shown here; it is accepted so that `route` takes the
  // same routing settings as `serve`.
  cmd->add_option("--balance-factor", args->balance_factor,
                  "Prefix-aware bounded load: an instance is also full at this factor x its share "
                  "of the in-flight requests (at least 4); 0 = off, else 1..100")
      ->capture_default_str();
  cmd->add_option("--group", args->group, "Native API: the X-Amzn-SageMaker-Prefix-Aware-Id header value");
  cmd->add_option("--component", args->component, "Native API: the X-Amzn-SageMaker-Inference-Component header value");
  cmd->add_option("--seed", args->seed, "Seed for the random strategies")->capture_default_str();
  cmd->add_flag("--show-text", args->show_text, "Also print the keyed text");
  cmd->callback([args, exit_code] { *exit_code = RunRoute(*args); });
}

}  // namespace prefix_router::cli
