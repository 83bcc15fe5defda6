#include "core/peer_policies.h"

#include <charconv>
#include <optional>

#include "core/peer_gie.h"
#include "core/peer_haproxy.h"
#include "core/peer_sglang.h"

namespace prefix_router {
namespace {

constexpr std::string_view kSglang = "sglang-cache-aware";
constexpr std::string_view kSglangMinLoad = "sglang-cache-aware-min-load";
constexpr std::string_view kGie = "llm-d-prefix";
constexpr std::string_view kHaproxy = "haproxy-chash-bl";

// haproxy-chash-bl[-fN]: the factor, or nothing for another name.
std::optional<uint32_t> HaproxyFactor(std::string_view name) {
  if (name == kHaproxy) return kHaproxyDefaultBalanceFactor;
  if (!name.starts_with(kHaproxy) || name.substr(kHaproxy.size(), 2) != "-f") return std::nullopt;
  std::string_view digits = name.substr(kHaproxy.size() + 2);
  uint32_t factor = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), factor);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  if (factor > 100000) return std::nullopt;
  return factor;
}

}  // namespace

std::vector<std::string_view> PeerStrategyNames() { return {kSglang, kSglangMinLoad, kGie, kHaproxy}; }

std::string PeerStrategyHelp() {
  return "sglang-cache-aware: our re-implementation of SGLang's published cache-aware policy "
         "(sgl-project/sglang sgl-router cache_aware.rs @ 026f853b, CLI defaults: cache_threshold 0.3, "
         "balance_abs_threshold 64, balance_rel_threshold 1.5, max_tree_size 2^26); "
         "sglang-cache-aware-min-load: the same with PR #14650's miss rule (sgl-model-gateway @ 053b63ff); "
         "llm-d-prefix: our re-implementation of llm-d/GIE's published prefix-cache, queue and "
         "KV-utilisation scorers with the max-score picker (kubernetes-sigs/gateway-api-inference-extension "
         "@ a172f54a, default weights 3/2/2, AutoTune: blocks of the engine's block size x 4 characters, "
         "an LRU per instance of the engine's GPU block count); haproxy-chash-bl: our re-implementation "
         "of HAProxy's published consistent hashing with bounded loads (src/lb_chash.c, HAProxy 1.7+) at "
         "hash-balance-factor 150, its documentation's example, not its default; -fN sets the factor, "
         "haproxy-chash-bl-f0 is HAProxy's default (plain consistent hashing); its key is the first "
         "--prefix-length characters";
}

std::string StrategyOrigin(std::string_view name) {
  if (name == kSglang) {
    return "our re-implementation of SGLang's published cache-aware router (sgl-project/sglang "
           "sgl-router cache_aware.rs @ 026f853b; CLI defaults 0.3 / 64 / 1.5)";
  }
  if (name == kSglangMinLoad) {
    return "our re-implementation of SGLang's cache-aware router with PR #14650's miss rule "
           "(sgl-model-gateway @ 053b63ff)";
  }
  if (name == kGie) {
    return "our re-implementation of llm-d/GIE's published prefix-cache, queue and KV-utilisation "
           "scorers (gateway-api-inference-extension @ a172f54a; weights 3/2/2, AutoTune from the "
           "engine's block size and GPU block count)";
  }
  if (auto factor = HaproxyFactor(name)) {
    return "our re-implementation of HAProxy's published consistent hashing with bounded loads "
           "(src/lb_chash.c, 1.7+; hash-balance-factor " +
           std::to_string(*factor) + (*factor == 0 ? ", HAProxy's default: plain consistent hashing)" : ")");
  }
  if (name == StrategyName(Strategy::kDynamoKv)) {
    return "our re-implementation of Dynamo's published KV router (ai-dynamo/dynamo lib/llm/src/kv_router "
           "scheduler.rs and queue.rs @ db19bd2a, sequence.rs @ 581ee33e; overlap_score_weight 1.0, "
           "temperature 0, prefill released at the first token, router queue off as by default)";
  }
  return "";
}

bool IsPeerStrategy(std::string_view name) {
  return name == kSglang || name == kSglangMinLoad || name == kGie || HaproxyFactor(name).has_value();
}

namespace {
GieOptions GieOptionsFor(const PeerEngineCache& engine) {
  GieOptions o;
  o.engine_block_size = engine.block_size;
  o.engine_gpu_blocks = engine.gpu_blocks;
  return o;
}
}  // namespace

uint32_t PeerTextLength(std::string_view name, const PeerEngineCache& engine) {
  if (name == kSglang || name == kSglangMinLoad) return 64u << 20;
  if (name == kGie) {
    const GieOptions o = GieOptionsFor(engine);
    return o.HashBlockSize() * o.max_prefix_blocks;
  }
  return 0;
}

Result<std::unique_ptr<Policy>> MakePeerPolicy(std::string_view name, const RoutingOptions&,
                                               const PeerEngineCache& engine) {
  if (name == kSglang || name == kSglangMinLoad) {
    SglangCacheAwareOptions o;
    if (name == kSglangMinLoad) {
      o.miss = SglangMissRule::kMinLoad;
      o.match_rate_in_bytes = true;
    }
    return std::unique_ptr<Policy>(std::make_unique<SglangCacheAwarePolicy>(o, std::string(name)));
  }
  if (name == kGie) {
    return std::unique_ptr<Policy>(std::make_unique<GieSchedulerPolicy>(GieOptionsFor(engine), std::string(name)));
  }
  if (auto factor = HaproxyFactor(name)) {
    return std::unique_ptr<Policy>(std::make_unique<HaproxyChashPolicy>(*factor, std::string(name)));
  }
  return Status::InvalidArgument("unknown peer strategy '" + std::string(name) + "'");
}

}  // namespace prefix_router
