// Our re-implementation of llm-d's / the Gateway API Inference Extension's (GIE) published
// endpoint-picker scoring, for side-by-side comparison in the simulator (issue 7). Not their
// code: a re-implementation from the notes in docs/research/peers.md section 2, which paraphrase
// kubernetes-sigs/gateway-api-inference-extension @ a172f54a (late 2025):
//   pkg/epp/scheduling/framework/plugins/prefixcachescorer/{plugin,indexer}.go  prefix-cache-scorer
//   .../queuescorer/queue.go, .../kvcacheutilizationscorer/kvcache_utilization.go
//   .../maxscorepicker/max_score_picker.go (@ abfd4f2f) and the default profile of
//   pkg/epp/config/loader/defaults.go (@ 0c8fd519) / the inferencepool Helm chart: weights
//   queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3.
//
// Prefix-cache scorer. The routing text (message characters as UTF-8 on the OpenAI API, body
// bytes on the native API; GIE hashes the JSON of the chat `messages`, so its blocks cut the same
// conversation at other places) is truncated to max_prefix_blocks x block_size bytes and cut into
// whole blocks of block_size bytes (a trailing partial block is ignored). Block i's hash is
// XXH64(block bytes || previous hash as 8 little-endian bytes); the "previous hash" of block 0 is
// XXH64 of the served (model) name. The indexer maps each hash to the instances it was sent to,
// with one LRU of hashes per instance. AutoTune (on in GIE's DefaultConfig): when the engines
// report their KV cache (vLLM's vllm:cache_config_info labels block_size and num_gpu_blocks, GIE's
// CacheBlockSize and CacheNumGPUBlocks metrics), a block is the engine's block size x 4
// characters (averageCharactersPerToken), so one hash stands for about one engine block, and an
// instance's LRU holds as many hashes as the engine has GPU blocks (makeServer; the indexer sizes
// a pod's LRU when it first adds to it, and keeps that size). Without those metrics, block_size
// characters and lru_capacity_per_server hashes (GIE's defaults, 64 and 31,250). In the simulator
// the engine profile gives both (GieOptions::engine_*). Score = the instance's hits among the hashes
// up to the first hash no instance holds, divided by the number of hashes (0 without hashes).
// After the pick, every hash of the request is added for the chosen instance (OnDispatched, as
// GIE's PreRequest). Lookups do not refresh recency; adds do.
//
// Queue scorer: the engine's waiting requests (InstanceState::engine_waiting, i.e. scraped
// vllm:num_requests_waiting) when known, else the gateway's in-flight count; (max - q) / (max - min)
// over the candidates, 1 for all when max == min.
// KV-cache-utilisation scorer: 1 - InstanceState::engine_kv_usage; an unknown usage (NaN) counts
// as 0 (score 1), as GIE's zero-valued metrics do for a pod not yet scraped.
// Each score is clamped to [0, 1], weighted and summed; the max-score picker takes the highest
// total, ties uniformly at random (GIE shuffles then stable-sorts; here a reservoir draw on the
// caller's Rng).
//
// Thread-safety: GiePrefixIndexer is not thread-safe; GieSchedulerPolicy guards its indexer
// with a mutex.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/policy.h"

namespace prefix_router {

struct GieOptions {
  uint32_t block_size = 64;                  // DefaultBlockSize (characters = bytes here)
  uint32_t max_prefix_blocks = 256;          // DefaultMaxPrefixBlocks
  uint32_t lru_capacity_per_server = 31250;  // DefaultLRUCapacityPerServer
  double queue_weight = 2;
  double kv_cache_weight = 2;
  double prefix_weight = 3;
  bool auto_tune = true;  // DefaultConfig.AutoTune
  // What the engines report of their KV cache (the same for every instance of a pool); 0 = not
  // reported.
  uint32_t engine_block_size = 0;  // tokens per block (CacheBlockSize)
  uint32_t engine_gpu_blocks = 0;  // blocks in the cache (CacheNumGPUBlocks)

  // GIE's averageCharactersPerToken: the block size in tokens to characters.
  static constexpr uint32_t kCharactersPerToken = 4;
  // The block size hashed, in characters, and one instance's LRU capacity, in hashes: AutoTune's
  // values when it is on and the engines report them, else the configured ones.
  uint32_t HashBlockSize() const {
    return auto_tune && engine_block_size > 0 ? engine_block_size * kCharactersPerToken : block_size;
  }
  uint32_t LruCapacity() const {
    return auto_tune && engine_gpu_blocks > 0 ? engine_gpu_blocks : lru_capacity_per_server;
  }
};

// GIE's hashPrompt: one hash per whole block of the first max_blocks x block_size bytes.
// REQUIRES: block_size > 0
std::vector<uint64_t> GieHashPrompt(std::string_view model, std::string_view text, uint32_t block_size,
                                    uint32_t max_blocks);

class GiePrefixIndexer {
 public:
  using Pod = uint64_t;  // an instance's placement seed
  // `default_capacity`: the LRU capacity of a pod added without one of its own.
  explicit GiePrefixIndexer(uint32_t default_capacity) : capacity_(default_capacity) {}

  // Adds (or refreshes) every hash for `pod`, evicting its least recently added beyond its
  // capacity: `pod_capacity` (0 = the default) when this is the pod's first add, as GIE sizes a
  // pod's LRU when it creates it, else the capacity the pod was given then.
  void Add(const std::vector<uint64_t>& hashes, Pod pod, uint32_t pod_capacity = 0);
  // matchLongestPrefix: hits per pod over the hashes before the first one no pod holds.
  std::unordered_map<Pod, uint32_t> MatchLongestPrefix(const std::vector<uint64_t>& hashes) const;
  void RemovePod(Pod pod);
  std::vector<Pod> Pods() const;
  size_t PodEntries(Pod pod) const;   // hashes in that pod's LRU
  size_t PodCapacity(Pod pod) const;  // 0 for a pod never added

 private:
  struct Lru {
    uint32_t capacity = 0;
    std::list<uint64_t> order;  // most recent first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  uint32_t capacity_;
  std::unordered_map<uint64_t, std::vector<Pod>> hash_to_pods_;
  std::unordered_map<Pod, Lru> pods_;
};

// queue-scorer over the given queue lengths.
std::vector<double> GieQueueScores(const std::vector<double>& queues);

class GieSchedulerPolicy final : public Policy {
 public:
  explicit GieSchedulerPolicy(GieOptions options, std::string name);
  Result<Decision> Pick(const RouteRequest& request, const FleetSnapshot& fleet, Rng& rng) const override;
  std::string_view name() const override { return name_; }
  void OnDispatched(const RouteRequest& request, const Decision& decision, const FleetSnapshot& fleet) override;

  // The candidates (snapshot indices) and their scores, as Pick computes them.
  struct Scores {
    std::vector<uint32_t> instances;
    std::vector<double> prefix, queue, kv_cache, total;
  };
  Scores Score(const RouteRequest& request, const FleetSnapshot& fleet) const;

 private:
  const GieOptions options_;
  const std::string name_;
  mutable std::mutex mu_;  // guards indexer_
  GiePrefixIndexer indexer_;
};

}  // namespace prefix_router
