#include "sim/simulator.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>

#include <xxhash.h>

#include "api/native_request.h"
#include "api/openai_request.h"
#include "core/block_chain.h"
#include "core/fleet.h"
#include "core/flow_queue.h"
#include "core/kv_events.h"
#include "core/kv_index.h"
#include "core/peer_policies.h"
#include "core/rng.h"
#include "engine_model/kv_cache.h"
#include "engine_model/profiles.h"
#include "engine_model/scheduler.h"
#include "engine_model/tokenizer.h"

namespace prefix_router::sim {
namespace {

using engine_model::EventKind;
using engine_model::StepScheduler;

Result<double> ParseSeconds(std::string_view text) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !(v >= 0) || !std::isfinite(v)) {
    return Status::InvalidArgument("bad time '" + std::string(text) + "' (seconds >= 0)");
  }
  return v;
}

// A client whose request failed before reaching an engine, or was refused (429 with
// Retry-After: 1), waits this long before its next.
constexpr double kErrorPause = 1.0;

std::string InstanceName(uint32_t i) { return "instance-" + std::to_string(i + 1); }

// Prompt tokens as the engine emulator computes them, memoising each message's tokens: the
// long shared contexts of a workload are tokenized once, not once per request.
class PromptTokenizer {
 public:
  std::vector<uint32_t> Chat(const std::vector<workload::Message>& messages) {
    std::vector<uint32_t> out;
    out.push_back(engine_model::kBeginOfText);
    for (const workload::Message& m : messages) {
      const std::vector<uint32_t>& t = MessageTokens(m);
      out.insert(out.end(), t.begin(), t.end());
    }
    engine_model::AppendGenerationPrompt(out);
    return out;
  }

 private:
  // Messages this long or longer are memoised; short ones are cheaper to tokenize again.
  static constexpr size_t kMemoMinBytes = 512;
  // Bound on memoised text, in bytes of content.
  static constexpr size_t kMemoMaxBytes = size_t{256} << 20;

  const std::vector<uint32_t>& MessageTokens(const workload::Message& m) {
    if (m.content.size() < kMemoMinBytes) {
      scratch_.clear();
      engine_model::AppendChatMessage(engine_model::ChatMessage{m.role, m.content, {}}, scratch_);
      return scratch_;
    }
    // Keyed by a 128-bit hash of role and content: no 32 KB key copied or hashed twice.
    const XXH128_hash_t h =
        XXH3_128bits_withSeed(m.content.data(), m.content.size(), XXH3_64bits(m.role.data(), m.role.size()));
    const std::pair<uint64_t, uint64_t> key{h.high64, h.low64};
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    if (memo_bytes_ + m.content.size() > kMemoMaxBytes) {
      memo_.clear();
      memo_bytes_ = 0;
    }
    std::vector<uint32_t> tokens;
    engine_model::AppendChatMessage(engine_model::ChatMessage{m.role, m.content, {}}, tokens);
    memo_bytes_ += m.content.size();
    return memo_.emplace(key, std::move(tokens)).first->second;
  }

  struct PairHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& p) const { return p.first ^ p.second; }
  };
  std::unordered_map<std::pair<uint64_t, uint64_t>, std::vector<uint32_t>, PairHash> memo_;
  size_t memo_bytes_ = 0;
  std::vector<uint32_t> scratch_;
};

// A set of block hashes that grows without bound: open addressing, linear probing, load at
// most 1/2 (std::unordered_set's node per entry and pointer chase per lookup made the bounds
// cost more than the rest of the simulation). Hashes are XXH3 outputs, already uniform.
class HashSet {
 public:
  // Inserts `h`; returns whether it was already present.
  bool TestAndInsert(uint64_t h) {
    if (h == kEmpty) h = 1;
    if (2 * (size_ + 1) > slots_.size()) Grow();
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i] == h) return true;
      if (slots_[i] == kEmpty) {
        slots_[i] = h;
        ++size_;
        return false;
      }
    }
  }

 private:
  static constexpr uint64_t kEmpty = 0;
  void Grow() {
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(std::max<size_t>(1024, old.size() * 2), kEmpty);
    size_ = 0;
    for (uint64_t h : old) {
      if (h != kEmpty) TestAndInsert(h);
    }
  }
  std::vector<uint64_t> slots_;
  size_t size_ = 0;
};

// The two hit-rate bounds of the header comment, fed in dispatch order.
class Bounds {
 public:
  Bounds(uint32_t block_size, uint64_t fleet_blocks)
      : block_size_(block_size),
        lru_(engine_model::KvCacheConfig{block_size,
                                         static_cast<uint32_t>(std::min<uint64_t>(fleet_blocks, UINT32_MAX / 2))}) {}

  // Returns {lru cached tokens, infinite cached tokens} for this prompt, then caches prompt
  // and output.
  std::pair<uint32_t, uint32_t> Observe(const std::vector<uint32_t>& prompt, const std::vector<uint32_t>& output) {
    // Infinite: leading full blocks already seen, capped like the engine (one token is always
    // computed).
    uint64_t parent = engine_model::kRootParentHash;
    size_t blocks = 0;
    bool hitting = true;
    all_.assign(prompt.begin(), prompt.end());
    all_.insert(all_.end(), output.begin(), output.end());
    const size_t prompt_blocks = prompt.size() / block_size_;
    for (size_t b = 0; b < all_.size() / block_size_; ++b) {
      const uint64_t h =
          engine_model::BlockHash(parent, std::span<const uint32_t>(all_).subspan(b * block_size_, block_size_), 0);
      const bool seen = seen_.TestAndInsert(h);
      if (hitting && b < prompt_blocks && seen) {
        ++blocks;
      } else {
        hitting = false;
      }
      parent = h;
    }
    uint32_t infinite =
        static_cast<uint32_t>(std::min(blocks * block_size_, prompt.empty() ? size_t{0} : prompt.size() - 1));
    infinite -= infinite % block_size_;

    uint32_t lru = 0;
    const uint64_t id = next_id_++;
    if (auto cached = lru_.Allocate(id, prompt, ""); cached.ok()) {
      lru = static_cast<uint32_t>(*cached);
      if (!output.empty()) (void)lru_.AppendTokens(id, output);
      lru_.MarkComputed(id, lru_.NumTokens(id));
      lru_.Free(id);
    }
    return {lru, infinite};
  }

 private:
  uint32_t block_size_;
  engine_model::KvCache lru_;
  HashSet seen_;
  std::vector<uint32_t> all_;
  uint64_t next_id_ = 1;
};

// One engine's KV event publisher: the cache's callbacks collected into the batch being built,
// consecutive blocks of one chain in one BlockStored and consecutive evictions in one
// BlockRemoved (as vLLM groups a request's blocks), numbered from 0 (KvEventBatch::seq).
class KvPublisher final : public engine_model::KvEventListener {
 public:
  explicit KvPublisher(uint32_t block_size) : block_size_(block_size) {}

  void OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const uint32_t> token_ids,
                     std::string_view adapter) override {
    if (!batch_.events.empty()) {
      auto* last = std::get_if<KvBlockStored>(&batch_.events.back());
      if (last != nullptr && last->block_hashes.back() == parent_hash && last->adapter == adapter) {
        last->block_hashes.push_back(hash);
        last->token_ids.insert(last->token_ids.end(), token_ids.begin(), token_ids.end());
        return;
      }
    }
    KvBlockStored e;
    e.block_hashes.push_back(hash);
    if (parent_hash != engine_model::kRootParentHash) e.parent_hash = parent_hash;
    e.token_ids.assign(token_ids.begin(), token_ids.end());
    e.block_size = block_size_;
    e.adapter = std::string(adapter);
    e.medium = "GPU";
    batch_.events.push_back(std::move(e));
  }
  void OnBlockRemoved(uint64_t hash) override {
    if (!batch_.events.empty()) {
      if (auto* last = std::get_if<KvBlockRemoved>(&batch_.events.back())) {
        last->block_hashes.push_back(hash);
        return;
      }
    }
    batch_.events.push_back(KvBlockRemoved{{hash}, "GPU"});
  }
  void OnAllCleared() override { batch_.events.push_back(KvAllBlocksCleared{}); }

  bool empty() const { return batch_.events.empty(); }
  // The batch built so far, numbered, stamped `ts`; a new one starts.
  KvEventBatch Take(double ts) {
    KvEventBatch b = std::move(batch_);
    batch_ = KvEventBatch{};
    b.seq = next_seq_++;
    b.ts = ts;
    b.data_parallel_rank = 0;
    return b;
  }

 private:
  uint32_t block_size_;
  KvEventBatch batch_;
  uint64_t next_seq_ = 0;
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& options)
      : o_(options), rng_(options.seed ^ 0x51A1), kv_rng_(options.seed ^ 0x6B76), tenant_rng_(options.seed ^ 0x7E4A) {}

  Result<SimRun> Run();

 private:
  enum class EvType : uint8_t { kSessionStart, kSend, kSubmit, kStepEnd, kScale, kKvDeliver, kQueueExpire };
  struct Ev {
    double t;
    uint64_t seq;
    EvType type;
    uint64_t a;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };

  struct Engine {
    std::string name;
    uint32_t share_index = 0;
    std::unique_ptr<KvPublisher> publisher;  // with a KV event feed; before the scheduler using it
    std::unique_ptr<StepScheduler> scheduler;
    double kv_batch_opened = -1;  // batching interval: the open batch's first step end
    // Per gateway, that gateway's live state for this engine's name (its in-flight counts);
    // empty until the engine first joins the fleet.
    std::vector<std::shared_ptr<InstanceState>> states;
    const engine_model::StepResult* last = nullptr;  // of the step in progress
    bool stepping = false;
    bool routable = true;
  };

  struct SimSession {
    std::unique_ptr<workload::Session> session;
    bool closed_user = false;  // a closed-loop user starts another session when this one ends
    int32_t tenant = -1;       // index into o_.tenants; -1 = none
  };

  // A request parsed and keyed, not yet routed: what routing it needs, owned (it may wait in a
  // gateway's queue while other requests reuse the scratch buffers).
  struct Prepared {
    uint64_t session = 0;
    uint64_t request_id = 0;
    PrefixKey key;
    uint32_t work_tokens = 0;
    std::vector<uint64_t> blocks;
    std::string text;
    std::vector<uint32_t> prompt;
    uint32_t max_tokens = 1;
    std::string flow_tenant;  // with a per-tenant bound: the tenant its end is counted to
  };

  struct Live {
    uint64_t session = 0;
    uint32_t engine = 0;
    uint32_t gateway = 0;  // the gateway that sent it: its counts and its policy's events
    double sent = 0;
    uint64_t output_seed = 0;
    uint32_t max_tokens = 0;
    uint32_t work_tokens = 0;  // the gateway's estimate, counted in the instance's load
    Decision decision;
    std::string flow_tenant;                            // Prepared::flow_tenant
    std::shared_ptr<const FleetSnapshot> fleet;         // the gateway's snapshot the decision was made on
    std::optional<engine_model::EngineRequest> submit;  // until submitted
  };

  void Push(double t, EvType type, uint64_t a) { queue_.push(Ev{t, seq_++, type, a}); }
  bool Sending(double t) const { return t < o_.duration_s && (o_.max_requests == 0 || sent_ < o_.max_requests); }

  // What every engine reports of its KV cache (vllm:cache_config_info), for the peers that size
  // themselves from it (GIE's AutoTune).
  PeerEngineCache PeerEngine() const {
    return PeerEngineCache{o_.profile.config.block_size, o_.profile.config.capacity_blocks};
  }
  Status RebuildFleet();
  void StartSession(double t, bool closed_user);
  void SendTurn(double t, uint64_t session_id, std::string_view previous_reply);
  // Routes `p` on gateway `gateway_id` and starts it (the gateway's slot, when it has a ceiling,
  // is taken here).
  void Dispatch(double t, uint32_t gateway_id, Prepared p);
  // A 429 at admission: the request is recorded refused and its session goes on after a pause.
  void Refuse(double t, uint64_t request_id, uint64_t session_id);
  // Whether gateway `gateway_id` would queue (or refuse) a request now: at its ceiling or, with
  // an instance saturation (flow_control.saturation), every instance full by its own counts.
  bool Saturated(uint32_t gateway_id) const;
  // While gateway `gateway_id` is not saturated, the next queued request leaves and is routed.
  void LetOut(double t, uint32_t gateway_id);
  void QueueExpire(double t, uint64_t request_id);
  void Submit(double t, uint64_t request_id);
  void StartStep(double t, uint32_t engine);
  void ReportEngineLoad(Engine& engine);
  void StepEnd(double t, uint32_t engine);
  void Finish(double t, uint64_t request_id, bool error);
  Status Scale(double t, const ScaleEvent& e);
  void PublishKv(double t, uint32_t engine);
  void DeliverKv();
  uint32_t AddEngine(const std::string& name);

  const SimOptions& o_;
  Rng rng_;
  Rng kv_rng_;      // KV batch losses, apart from the routing's randomness
  Rng tenant_rng_;  // sessions' tenant classes, apart from arrivals and routing
  double tenant_share_sum_ = 0;
  bool kv_feed_ = false;             // the strategy reads KV events
  // Admission control: a ceiling (max_in_flight) or an instance saturation signal.
  bool flow_ = false;
  uint64_t policy_index_bytes_ = 0;  // the index bound the policy was built with
  struct KvDelivery {
    uint32_t engine;
    KvEventBatch batch;
    uint64_t gateways;  // bit g: gateway g did not lose it
  };
  static_assert(kMaxGateways <= 64, "KvDelivery::gateways has one bit per gateway");
  std::deque<KvDelivery> kv_in_flight_;  // published, not yet delivered (constant delay: FIFO)
  // One gateway replica: its own policy (learned state) and its own view of the fleet (the
  // in-flight counts of the requests it sent). Snapshots of all gateways list the same
  // instances in the same order (fleet_engine_ maps them all).
  struct Gateway {
    std::unique_ptr<Policy> policy;
    std::shared_ptr<const FleetSnapshot> fleet;
    uint32_t in_flight = 0;                          // its requests dispatched and not finished (its pool's count)
    std::optional<FlowQueue> queue;                  // with max_queue > 0 or a per-tenant bound
    std::unordered_map<uint64_t, Prepared> waiting;  // queued requests by id
  };
  std::vector<Gateway> gateways_;
  std::unique_ptr<workload::Workload> workload_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  uint64_t sent_ = 0;
  uint64_t events_ = 0;

  std::vector<Engine> engines_;           // every engine ever started, by id
  std::vector<std::string> share_names_;  // share index -> instance name
  std::vector<uint32_t> fleet_engine_;    // snapshot index (every gateway's) -> engine id

  std::unordered_map<uint64_t, SimSession> sessions_;
  uint64_t next_session_ = 0;
  std::optional<workload::SessionStart> buffered_start_;  // timed traces: the next start
  double session_rate_ = 0;

  std::vector<report::RequestRecord> records_;
  std::unordered_map<uint64_t, Live> live_;
  std::unordered_map<uint64_t, std::string> replies_;  // session -> reply for its next turn

  api::OpenAiRequestParser parser_;
  std::string keyed_text_;       // cache-aware: the keyed text of the request being routed
  std::vector<uint64_t> chain_;  // and its block chain
  std::vector<uint32_t> full_;   // in-flight saturation: the instances a request may not go to
  // o_.routing.key_normalisation compiled, exactly as the gateway's pool holds it; null = off.
  std::shared_ptr<const api::KeyNormaliser> normaliser_;
  PromptTokenizer tokenizer_;
  std::optional<Bounds> bounds_;
  uint64_t bound_prompt_ = 0, bound_lru_ = 0, bound_infinite_ = 0;
  std::vector<double> queue_depths_;
};

uint32_t Simulation::AddEngine(const std::string& name) {
  Engine e;
  e.name = name;
  auto it = std::find(share_names_.begin(), share_names_.end(), name);
  if (it == share_names_.end()) {
    share_names_.push_back(name);
    e.share_index = static_cast<uint32_t>(share_names_.size() - 1);
  } else {
    e.share_index = static_cast<uint32_t>(it - share_names_.begin());
  }
  if (kv_feed_) e.publisher = std::make_unique<KvPublisher>(o_.profile.config.block_size);
  // Each engine's step-time jitter is its own stream, from the run's seed and the engine's
  // position (a restarted engine under the same name draws a new one).
  engine_model::SchedulerConfig config = o_.profile.config;
  config.seed = Mix64(o_.seed * 0x9e3779b97f4a7c15ULL + engines_.size());
  e.scheduler = std::make_unique<StepScheduler>(config, e.publisher.get());
  engines_.push_back(std::move(e));
  return static_cast<uint32_t>(engines_.size() - 1);
}

Status Simulation::RebuildFleet() {
  std::vector<InstanceSpec> specs;
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < engines_.size(); ++id) {
    if (!engines_[id].routable) continue;
    specs.push_back(InstanceSpec{engines_[id].name, "", 1, {}});
    ids.push_back(id);
  }
  if (specs.empty()) return Status::InvalidArgument("the fleet has no instance left");
  // Each gateway's snapshot carries its own previous one's state objects over, by name.
  for (Gateway& g : gateways_) {
    auto next = FleetSnapshot::Create(specs, g.fleet.get());
    if (!next.ok()) return next.status();
    g.fleet = std::move(*next);
  }
  fleet_engine_ = std::move(ids);
  for (uint32_t i = 0; i < fleet_engine_.size(); ++i) {
    // A replaced instance keeps its name (so its keys) but is a new engine: its state objects
    // are the snapshots' (shared with the previous snapshots by name), and the old engine keeps
    // its own until its requests finish.
    Engine& e = engines_[fleet_engine_[i]];
    if (e.states.empty()) {
      for (const Gateway& g : gateways_) e.states.push_back(g.fleet->shared_state(i));
    }
  }
  return Status::Ok();
}

void Simulation::StartSession(double t, bool closed_user) {
  if (!Sending(t)) return;
  workload::SessionStart start;
  if (buffered_start_) {
    start = std::move(*buffered_start_);
    buffered_start_.reset();
  } else {
    start = workload_->NextSession();
  }
  if (!start.session) return;  // a finite trace ran out
  const uint64_t id = next_session_++;
  // A class by share, from its own stream (an empty list draws nothing).
  const int32_t tenant = o_.tenants.empty() ? -1 : workload::PickTenantClass(o_.tenants, tenant_rng_.NextDouble());
  sessions_.emplace(id, SimSession{std::move(start.session), closed_user, tenant});
  SendTurn(t, id, "");
  if (closed_user) return;
  // Open loop: schedule the next session's start.
  workload::SessionStart next = workload_->NextSession();
  if (!next.session) return;
  double at;
  if (next.arrival_s) {
    at = *next.arrival_s / o_.trace_speed;
  } else {
    at = t - std::log(1.0 - rng_.NextDouble()) / session_rate_;
  }
  buffered_start_ = std::move(next);
  Push(std::max(at, t), EvType::kSessionStart, 0);
}

void Simulation::SendTurn(double t, uint64_t session_id, std::string_view previous_reply) {
  auto sit = sessions_.find(session_id);
  if (sit == sessions_.end()) return;
  std::optional<workload::Request> r;
  if (Sending(t)) r = sit->second.session->Next(previous_reply);
  if (!r) {
    const bool closed_user = sit->second.closed_user;
    sessions_.erase(sit);
    if (closed_user) StartSession(t, true);
    return;
  }
  const uint64_t request_id = records_.size();
  ++sent_;
  report::RequestRecord rec;
  rec.start_s = t;
  rec.counted = t >= o_.warmup_s;
  rec.tenant = sit->second.tenant;

  // The routing decision, from the body the gateway would receive.
  const std::string body = workload::RenderBody(*r, /*stream=*/false, o_.default_model);
  Result<api::ParsedRequest> parsed = Status::Internal("unset");
  const bool chained = UsesBlockChain(o_.routing.strategy);
  // A peer that matches text reads its own length of it (the key is then over that length too,
  // which such a peer does not use).
  const uint32_t peer_text = o_.peer.empty() ? 0 : PeerTextLength(o_.peer, PeerEngine());
  const uint32_t keyed_length = peer_text > 0 ? peer_text : api::KeyedLength(o_.routing);
  std::string* keyed = &keyed_text_;  // at most keyed_length: cheap for the prefix strategies
  if (r->api == api::ApiKind::kNative) {
    std::optional<std::string_view> group;
    if (!r->routing_group.empty()) group = r->routing_group;
    parsed = api::ParseNative(body, keyed_length, group, std::nullopt, normaliser_.get(), keyed);
  } else {
    parsed = parser_.Parse(r->api, body, keyed_length, false, keyed, normaliser_.get());
  }
  if (chained && parsed.ok()) {
    chain_ = BuildBlockChain(keyed_text_, o_.routing.cache_aware.block_bytes, o_.routing.cache_aware.max_blocks,
                             BlockChainSeed(parsed->served_name, parsed->routing_group));
  }
  std::vector<uint32_t> prompt;
  if (r->api == api::ApiKind::kChatCompletions ||
      (r->api == api::ApiKind::kNative && r->body.empty() && r->prompt.empty())) {
    prompt = tokenizer_.Chat(r->messages);
  } else if (!r->prompt.empty()) {
    prompt = engine_model::RenderCompletion(r->prompt);
  } else {
    prompt = engine_model::RenderCompletion(r->body);
  }
  if (!parsed.ok() || prompt.empty()) {
    rec.error = true;
    records_.push_back(rec);
    replies_[session_id] = "";
    Push(t + kErrorPause, EvType::kSend, session_id);  // the session goes on, as a client's would
    return;
  }
  records_.push_back(rec);
  Prepared p;
  p.session = session_id;
  p.request_id = request_id;
  p.key = parsed->key;
  p.work_tokens = api::EstimatePromptTokens(body.size());  // as the gateway estimates it
  // The request owns its routing text from here (it may wait in a queue while later requests
  // parse): taken from the scratch buffers rather than copied.
  if (chained) p.blocks = std::move(chain_);
  p.text.swap(keyed_text_);
  p.prompt = std::move(prompt);
  p.max_tokens = std::max<uint32_t>(1, r->max_tokens);
  // Dealt round-robin over the gateways by send order (request_id counts every send).
  const uint32_t gateway_id = static_cast<uint32_t>(request_id % gateways_.size());
  Gateway& gateway = gateways_[gateway_id];
  // Admission as the gateway's PoolFlow: routed now while the pool is not saturated, nobody
  // waits who could leave, and the request's tenant is within its bound; else a place in the
  // queue, or 429.
  if (!flow_) {
    Dispatch(t, gateway_id, std::move(p));
    return;
  }
  FlowItem item;
  item.id = request_id;
  if (rec.tenant >= 0) {
    const workload::TenantClass& c = o_.tenants[static_cast<size_t>(rec.tenant)];
    item.band = c.priority;
    item.tenant = c.name;
    if (c.ttft_objective_ms > 0) item.deadline = t + c.ttft_objective_ms / 1000.0;
  } else {
    item.tenant = r->routing_group;
  }
  if (o_.routing.flow_control.max_in_flight_per_tenant > 0) p.flow_tenant = item.tenant;
  const bool waits = gateway.queue && (gateway.queue->ready() || gateway.queue->AtBound(item.tenant));
  if (!waits && !Saturated(gateway_id)) {
    if (gateway.queue) gateway.queue->Started(p.flow_tenant);
    Dispatch(t, gateway_id, std::move(p));
    return;
  }
  if (!gateway.queue) {
    Refuse(t, request_id, session_id);
    return;
  }
  item.tokens = p.work_tokens;
  item.bytes = body.size();
  item.arrival = t;
  FlowQueue::PushResult pushed = gateway.queue->Push(std::move(item));
  for (uint64_t displaced : pushed.displaced) {
    auto node = gateway.waiting.extract(displaced);
    records_[displaced].queue_s = t - records_[displaced].start_s;
    Refuse(t, displaced, node.mapped().session);
  }
  if (pushed.verdict != FlowVerdict::kQueued) {
    Refuse(t, request_id, session_id);
    return;
  }
  gateway.waiting.emplace(request_id, std::move(p));
  Push(t + o_.routing.flow_control.max_queue_wait, EvType::kQueueExpire, request_id);
}

void Simulation::Dispatch(double t, uint32_t gateway_id, Prepared p) {
  const uint64_t request_id = p.request_id;
  RouteRequest route;
  route.key = p.key;
  route.served_name = "";  // every simulated instance serves every model
  route.work_tokens = p.work_tokens;
  route.blocks = p.blocks;
  route.text = p.text;
  route.prompt_tokens = p.prompt;     // the engine's tokens, as the emulator's /tokenize gives them
  route.request_id = request_id + 1;  // 0 is "not named"
  Gateway& gateway = gateways_[gateway_id];
  report::RequestRecord& rec = records_[request_id];
  // In-flight saturation: routed only where there is room (as the gateway does).
  if (o_.routing.flow_control.saturation == FlowSaturation::kInFlight) {
    full_.clear();
    AppendFullInstances(*gateway.fleet, gateway.fleet->Eligible(""), o_.routing.concurrency_threshold, full_);
    route.exclude = full_;
  }
  Result<Decision> d = gateway.policy->Pick(route, *gateway.fleet, rng_);
  if (!d.ok()) {
    rec.error = true;
    if (gateway.queue) gateway.queue->Finished(p.flow_tenant);  // it never went in flight
    replies_[p.session] = "";
    Push(t + kErrorPause, EvType::kSend, p.session);
    return;
  }
  const uint32_t engine_id = fleet_engine_[d->instance];
  Engine& engine = engines_[engine_id];
  InstanceState& state = *engine.states[gateway_id];
  state.in_flight.fetch_add(1, std::memory_order_relaxed);
  state.outstanding_tokens.fetch_add(route.work_tokens, std::memory_order_relaxed);
  state.dispatched.fetch_add(1, std::memory_order_relaxed);
  ++gateway.in_flight;
  d->request_id = route.request_id;
  gateway.policy->OnDispatched(route, *d, *gateway.fleet);
  rec.instance = static_cast<int32_t>(engine.share_index);
  rec.overflow = d->kind == DecisionKind::kOverflow || d->kind == DecisionKind::kSaturated;
  rec.prompt_tokens = static_cast<uint32_t>(p.prompt.size());

  size_t waiting = 0;
  for (uint32_t id : fleet_engine_) waiting += engines_[id].scheduler->num_waiting();
  queue_depths_.push_back(static_cast<double>(waiting));

  Live live;
  live.session = p.session;
  live.engine = engine_id;
  live.gateway = gateway_id;
  live.sent = t;
  live.max_tokens = p.max_tokens;
  live.work_tokens = route.work_tokens;
  live.output_seed = engine_model::OutputSeed(p.prompt);
  live.decision = *d;
  live.flow_tenant = std::move(p.flow_tenant);
  live.fleet = gateway.fleet;
  if (bounds_) {
    std::vector<uint32_t> output(live.max_tokens);
    for (uint32_t i = 0; i < live.max_tokens; ++i) {
      output[i] = engine_model::GeneratedTokenId(live.output_seed, i);
    }
    auto [lru, infinite] = bounds_->Observe(p.prompt, output);
    if (rec.counted) {
      bound_prompt_ += p.prompt.size();
      bound_lru_ += lru;
      bound_infinite_ += infinite;
    }
  }
  engine_model::EngineRequest er;
  er.id = request_id;
  er.prompt = std::move(p.prompt);
  er.max_tokens = live.max_tokens;
  er.output_seed = live.output_seed;
  live.submit = std::move(er);
  live_.emplace(request_id, std::move(live));
  const double overhead = o_.profile.config.cost.request_overhead;
  if (overhead > 0) {
    Push(t + overhead, EvType::kSubmit, request_id);
  } else {
    Submit(t, request_id);
  }
}

void Simulation::Refuse(double t, uint64_t request_id, uint64_t session_id) {
  report::RequestRecord& rec = records_[request_id];
  rec.error = true;
  rec.refused = true;
  replies_[session_id] = "";
  Push(t + kErrorPause, EvType::kSend, session_id);
}

bool Simulation::Saturated(uint32_t gateway_id) const {
  const Gateway& gateway = gateways_[gateway_id];
  const uint32_t ceiling = o_.routing.max_in_flight;
  if (ceiling > 0 && gateway.in_flight >= ceiling) return true;
  const FlowQueueOptions& fc = o_.routing.flow_control;
  // Every simulated instance serves every name: the whole fleet is eligible.
  return FlowInstanceRoom(*gateway.fleet, gateway.fleet->Eligible(""), fc.saturation,
                          o_.routing.concurrency_threshold, 1) == 0;
}

void Simulation::LetOut(double t, uint32_t gateway_id) {
  Gateway& gateway = gateways_[gateway_id];
  if (!gateway.queue) return;
  while (!Saturated(gateway_id)) {
    std::optional<FlowItem> next = gateway.queue->Pop(t);
    if (!next) return;
    auto node = gateway.waiting.extract(next->id);
    records_[next->id].queue_s = t - records_[next->id].start_s;
    Dispatch(t, gateway_id, std::move(node.mapped()));
  }
}

void Simulation::QueueExpire(double t, uint64_t request_id) {
  Gateway& gateway = gateways_[request_id % gateways_.size()];
  auto it = gateway.waiting.find(request_id);
  if (it == gateway.waiting.end()) return;  // it left the queue (routed or displaced) before
  gateway.queue->Remove(request_id);
  const uint64_t session = it->second.session;
  gateway.waiting.erase(it);
  records_[request_id].queue_s = t - records_[request_id].start_s;
  Refuse(t, request_id, session);
}

void Simulation::Submit(double t, uint64_t request_id) {
  auto it = live_.find(request_id);
  if (it == live_.end() || !it->second.submit) return;
  Live& live = it->second;
  Engine& engine = engines_[live.engine];
  Status s = engine.scheduler->Submit(std::move(*live.submit), t);
  live.submit.reset();
  if (!s.ok()) {
    Finish(t, request_id, /*error=*/true);
    return;
  }
  if (!engine.stepping) StartStep(t, live.engine);
}

// What the engine itself reports (as a scrape of vllm:num_requests_running, ..._waiting and
// kv_cache_usage_perc would), refreshed at every step boundary: read by the peers' scorers.
// Every gateway scrapes the same engine, so every gateway's view gets the same report.
void Simulation::ReportEngineLoad(Engine& engine) {
  if (engine.states.empty() || !engine.routable) return;
  const auto running = static_cast<int32_t>(engine.scheduler->num_running());
  const auto waiting = static_cast<int32_t>(engine.scheduler->num_waiting());
  const double usage = engine.scheduler->kv_usage();
  for (const std::shared_ptr<InstanceState>& state : engine.states) {
    state->engine_running.store(running, std::memory_order_relaxed);
    state->engine_waiting.store(waiting, std::memory_order_relaxed);
    state->engine_kv_usage.store(usage, std::memory_order_relaxed);
  }
}

void Simulation::StartStep(double t, uint32_t engine_id) {
  Engine& engine = engines_[engine_id];
  if (!engine.scheduler->HasWork()) {
    engine.stepping = false;
    ReportEngineLoad(engine);
    return;
  }
  const engine_model::StepResult& r = engine.scheduler->Step(t);
  ReportEngineLoad(engine);
  engine.last = &r;
  engine.stepping = true;
  Push(t + r.duration, EvType::kStepEnd, engine_id);
}

void Simulation::StepEnd(double t, uint32_t engine_id) {
  Engine& engine = engines_[engine_id];
  // The result of the step that just ended is still the scheduler's latest: nothing here
  // steps this engine (Finish only schedules events; Submit does not step while `stepping`).
  const engine_model::StepResult& r = *engine.last;
  for (const engine_model::RequestEvent& e : r.events) {
    if (e.kind == EventKind::kFirstToken) {
      report::RequestRecord& rec = records_[e.request_id];
      rec.ttft_s = t - rec.start_s;
      rec.cached_tokens = e.cached_tokens;
      rec.engine_queue_s = e.queue_wait;
      // The router sees the first token as it streams out (dynamo-kv's prefill release).
      if (auto it = live_.find(e.request_id); it != live_.end()) {
        gateways_[it->second.gateway].policy->OnFirstToken(it->second.decision, *it->second.fleet);
      }
    } else if (e.kind == EventKind::kFinished) {
      Finish(t, e.request_id, /*error=*/false);
    }
  }
  engine.stepping = false;
  PublishKv(t, engine_id);
  StartStep(t, engine_id);
}

void Simulation::PublishKv(double t, uint32_t engine_id) {
  Engine& engine = engines_[engine_id];
  if (!engine.publisher || engine.publisher->empty()) return;
  const KvEventFeed& feed = o_.kv_events;
  if (feed.batch_interval_s > 0) {
    if (engine.kv_batch_opened < 0) engine.kv_batch_opened = t;
    if (t - engine.kv_batch_opened < feed.batch_interval_s && engine.scheduler->HasWork()) return;
  }
  engine.kv_batch_opened = -1;
  KvEventBatch batch = engine.publisher->Take(t);
  // Lost on the way to each subscriber independently, drawn in gateway order.
  uint64_t received = 0;
  for (uint32_t g = 0; g < gateways_.size(); ++g) {
    if (!(feed.loss > 0 && kv_rng_.NextDouble() < feed.loss)) received |= uint64_t{1} << g;
  }
  if (received == 0) return;
  kv_in_flight_.push_back(KvDelivery{engine_id, std::move(batch), received});
  Push(t + feed.delay_s, EvType::kKvDeliver, 0);
}

void Simulation::DeliverKv() {
  if (kv_in_flight_.empty()) return;
  KvDelivery d = std::move(kv_in_flight_.front());
  kv_in_flight_.pop_front();
  const Engine& engine = engines_[d.engine];
  if (!engine.routable) return;  // removed or replaced: the router no longer listens to it
  // Every gateway's snapshot lists the same names, and a placement seed is the name's.
  const FleetSnapshot& fleet = *gateways_.front().fleet;
  const std::optional<uint32_t> i = fleet.Find(engine.name);
  if (!i) return;
  for (uint32_t g = 0; g < gateways_.size(); ++g) {
    if (((d.gateways >> g) & 1) != 0) gateways_[g].policy->OnKvEvents(fleet.placement_seed(*i), d.batch);
  }
}

void Simulation::Finish(double t, uint64_t request_id, bool error) {
  auto it = live_.find(request_id);
  if (it == live_.end()) return;
  Live live = std::move(it->second);
  live_.erase(it);
  InstanceState& state = *engines_[live.engine].states[live.gateway];
  state.in_flight.fetch_sub(1, std::memory_order_relaxed);
  state.outstanding_tokens.fetch_sub(live.work_tokens, std::memory_order_relaxed);
  gateways_[live.gateway].policy->OnCompleted(live.decision, *live.fleet);
  --gateways_[live.gateway].in_flight;
  if (gateways_[live.gateway].queue) gateways_[live.gateway].queue->Finished(live.flow_tenant);
  report::RequestRecord& rec = records_[request_id];
  std::string reply;
  if (error) {
    rec.error = true;
  } else {
    rec.e2e_s = t - rec.start_s;
    rec.output_tokens = live.max_tokens;
    if (live.max_tokens > 1 && rec.ttft_s >= 0) {
      rec.itl_mean_s = (rec.e2e_s - rec.ttft_s) / (live.max_tokens - 1);
    }
    reply = engine_model::GeneratedText(live.output_seed, live.max_tokens);
  }
  if (auto sit = sessions_.find(live.session); sit != sessions_.end()) {
    replies_[live.session] = std::move(reply);
    Push(t + (o_.ignore_think_time ? 0.0 : sit->second.session->think_s()), EvType::kSend, live.session);
  }
  // The freed slot goes to the next request waiting at this gateway (last: it may route and
  // start requests, and so finish others).
  LetOut(t, live.gateway);
}

Status Simulation::Scale(double t, const ScaleEvent& e) {
  (void)t;
  auto find = [&](const std::string& name) -> std::optional<uint32_t> {
    for (uint32_t id = 0; id < engines_.size(); ++id) {
      if (engines_[id].routable && engines_[id].name == name) return id;
    }
    return std::nullopt;
  };
  switch (e.kind) {
    case ScaleEvent::Kind::kAdd: {
      std::string name = e.instance;
      if (name.empty()) {
        for (uint32_t i = 0;; ++i) {
          name = InstanceName(i);
          if (std::find(share_names_.begin(), share_names_.end(), name) == share_names_.end()) break;
        }
      } else if (find(name)) {
        return Status::InvalidArgument("scale event: instance '" + name + "' already exists");
      }
      AddEngine(name);
      break;
    }
    case ScaleEvent::Kind::kRemove:
    case ScaleEvent::Kind::kReplace: {
      auto id = find(e.instance);
      if (!id) return Status::InvalidArgument("scale event: no instance '" + e.instance + "'");
      engines_[*id].routable = false;
      if (e.kind == ScaleEvent::Kind::kReplace) {
        const uint32_t fresh = AddEngine(e.instance);
        // The new engine shares the name's in-flight counters (each gateway's view of that
        // address), which still include the old engine's requests until they finish.
        engines_[fresh].states = engines_[*id].states;
      }
      break;
    }
  }
  return RebuildFleet();
}

Result<SimRun> Simulation::Run() {
  if (o_.instances == 0) return Status::InvalidArgument("instances must be >= 1");
  if (o_.gateways < 1 || o_.gateways > kMaxGateways) {
    return Status::InvalidArgument("gateways: " + std::to_string(o_.gateways) + " is outside the allowed range 1.." +
                                   std::to_string(kMaxGateways));
  }
  if (Status s = o_.profile.config.Validate(); !s.ok()) return s;
  if (Status s = o_.routing.Validate(); !s.ok()) return s;
  if (!(o_.duration_s > 0) && o_.max_requests == 0) {
    return Status::InvalidArgument("set a duration or a request count");
  }
  if (o_.arrivals == Arrivals::kClosed && o_.concurrency == 0) {
    return Status::InvalidArgument("concurrency must be >= 1");
  }
  if (o_.arrivals == Arrivals::kOpen && !(o_.rate_rps > 0)) {
    return Status::InvalidArgument("rate must be > 0 requests/s");
  }
  if (!(o_.trace_speed > 0)) return Status::InvalidArgument("trace speed must be > 0");
  auto w = o_.make_workload ? o_.make_workload(o_.seed) : workload::MakeWorkload(o_.workload, o_.params, o_.seed);
  if (!w.ok()) return w.status();
  workload_ = std::move(*w);
  if (Status st = workload::ValidateTenantClasses(o_.tenants); !st.ok()) return st;
  tenant_share_sum_ = workload::ShareSum(o_.tenants);
  // The classes together send rate x the sum of their shares (see TenantClass).
  session_rate_ = o_.rate_rps * (o_.tenants.empty() ? 1.0 : tenant_share_sum_) / std::max(1.0, workload_->mean_turns());
  RoutingOptions routing = o_.routing;
  if (UsesBlockChain(routing.strategy) || UsesKvEvents(routing.strategy)) {
    // The index's capacity per instance from the engine's own (as a gateway reads it from an
    // engine's metrics): its KV cache in tokens, at about 4 bytes of text per token.
    const uint64_t tokens = uint64_t{o_.profile.config.capacity_blocks} * o_.profile.config.block_size;
    routing.cache_aware.capacity_blocks = std::max<uint64_t>(1, tokens * 4 / routing.cache_aware.block_bytes);
  }
  if (UsesKvEvents(routing.strategy)) {
    // The index bound sized, like the capacity, from the engines': every block the fleet can
    // hold (kv-aware gives 8/9 of the bound to its KvIndex), at least the configured bound.
    const uint64_t blocks = uint64_t{o_.instances} * o_.profile.config.capacity_blocks;
    const uint64_t need = blocks * KvIndex::kBytesPerEntry / 8 * 9;
    routing.cache_aware.max_index_bytes =
        std::min<uint64_t>(64ull << 30, std::max(routing.cache_aware.max_index_bytes, need));
  }
  // Each replica builds its own policy from the same options, as K gateway processes would.
  gateways_.resize(o_.gateways);
  for (Gateway& g : gateways_) {
    if (o_.peer.empty()) {
      g.policy = MakePolicy(routing);
    } else {
      auto peer = MakePeerPolicy(o_.peer, routing, PeerEngine());
      if (!peer.ok()) return peer.status();
      g.policy = std::move(*peer);
    }
  }
  policy_index_bytes_ = routing.cache_aware.max_index_bytes;
  // Each replica's pool has its own count and its own queue, as a gateway process does.
  flow_ = o_.routing.max_in_flight > 0 || o_.routing.flow_control.saturation != FlowSaturation::kPool ||
          o_.routing.flow_control.max_in_flight_per_tenant > 0;
  // A queue also counts the per-tenant bound (with max_queue 0 it queues nothing: 429 at the bound).
  if (flow_ && (o_.routing.flow_control.max_queue > 0 || o_.routing.flow_control.max_in_flight_per_tenant > 0)) {
    for (Gateway& g : gateways_) g.queue.emplace(o_.routing.flow_control);
  }
  kv_feed_ = o_.peer.empty() && UsesKvEvents(routing.strategy);
  const KvEventFeed& feed = o_.kv_events;
  if (!(feed.delay_s >= 0 && std::isfinite(feed.delay_s))) {
    return Status::InvalidArgument("kv event delay must be >= 0 seconds");
  }
  if (!(feed.batch_interval_s >= 0 && std::isfinite(feed.batch_interval_s))) {
    return Status::InvalidArgument("kv event batch interval must be >= 0 seconds");
  }
  if (!(feed.loss >= 0 && feed.loss <= 1)) return Status::InvalidArgument("kv event loss must be between 0 and 1");
  if (o_.routing.key_normalisation.enabled()) {
    auto n = api::KeyNormaliser::Create(o_.routing.key_normalisation);
    if (!n.ok()) return Status::InvalidArgument("key normalisation: " + n.status().message());
    normaliser_ = *n;
  }
  for (uint32_t i = 0; i < o_.instances; ++i) AddEngine(InstanceName(i));
  if (Status s = RebuildFleet(); !s.ok()) return s;
  if (o_.bounds) {
    bounds_.emplace(o_.profile.config.block_size, uint64_t{o_.instances} * o_.profile.config.capacity_blocks);
  }
  std::vector<ScaleEvent> events = o_.events;
  std::stable_sort(events.begin(), events.end(),
                   [](const ScaleEvent& a, const ScaleEvent& b) { return a.at_s < b.at_s; });
  for (size_t i = 0; i < events.size(); ++i) Push(events[i].at_s, EvType::kScale, i);

  if (o_.arrivals == Arrivals::kClosed) {
    for (uint32_t u = 0; u < o_.concurrency; ++u) StartSession(0, /*closed_user=*/true);
  } else {
    // The first session of a timed trace starts at its own time.
    workload::SessionStart first = workload_->NextSession();
    if (first.session) {
      const double at = first.arrival_s ? *first.arrival_s / o_.trace_speed : 0.0;
      buffered_start_ = std::move(first);
      Push(at, EvType::kSessionStart, 0);
    }
  }

  double now = 0;
  while (!queue_.empty()) {
    const Ev ev = queue_.top();
    queue_.pop();
    now = ev.t;
    ++events_;
    switch (ev.type) {
      case EvType::kSessionStart: StartSession(now, /*closed_user=*/false); break;
      case EvType::kSend: {
        std::string reply;
        if (auto it = replies_.find(ev.a); it != replies_.end()) {
          reply = std::move(it->second);
          replies_.erase(it);
        }
        SendTurn(now, ev.a, reply);
        break;
      }
      case EvType::kSubmit: Submit(now, ev.a); break;
      case EvType::kStepEnd: StepEnd(now, static_cast<uint32_t>(ev.a)); break;
      case EvType::kKvDeliver: DeliverKv(); break;
      case EvType::kQueueExpire: QueueExpire(now, ev.a); break;
      case EvType::kScale:
        if (now < o_.duration_s) {
          if (Status s = Scale(now, events[ev.a]); !s.ok()) return s;
        }
        break;
    }
  }

  SimRun run;
  run.records = std::move(records_);
  run.instance_names = share_names_;
  run.events_processed = events_;
  report::RunResult& r = run.result;
  r.source = "simulate";
  r.workload = o_.workload;
  r.strategy = !o_.strategy_label.empty() ? o_.strategy_label
               : !o_.peer.empty()         ? o_.peer
                                          : std::string(StrategyName(o_.routing.strategy));
  // Runs keyed with normalisation say so where runs are compared (tables, reports).
  if (o_.routing.key_normalisation.enabled()) r.strategy += "+keynorm";
  r.instances = o_.instances;
  r.seed = o_.seed;
  r.ttft_kind = "modelled";
  r.settings["prefix_length"] = o_.routing.prefix_length;
  r.settings["concurrency_threshold"] = o_.routing.concurrency_threshold;
  // Only when there are several: single-gateway results stay as they were.
  if (o_.gateways > 1) r.settings["gateways"] = o_.gateways;
  if (o_.routing.strategy == Strategy::kPrefixAware) r.settings["balance_factor"] = o_.routing.balance_factor;
  if (kv_feed_) {
    r.settings["kv_event_delay_s"] = o_.kv_events.delay_s;
    r.settings["kv_event_batch_interval_s"] = o_.kv_events.batch_interval_s;
    r.settings["kv_event_loss"] = o_.kv_events.loss;
    r.settings["max_index_bytes"] = static_cast<double>(policy_index_bytes_);
  }
  // The engine model's calibration (profiles.h): the idle-instance TTFT of an 8,000-token
  // prompt uncached and cached, and what was fitted to them.
  {
    const engine_model::SchedulerConfig& c = o_.profile.config;
    r.settings["engine_uncached_ttft_ms"] = engine_model::IdleTtft(c, 8000, 0) * 1e3;
    r.settings["engine_cached_ttft_ms"] = engine_model::IdleTtft(c, 8000, 7999 / c.block_size * c.block_size) * 1e3;
    r.settings["engine_mfu"] = c.cost.mfu;
  }
  r.settings["duration_s"] = o_.duration_s;
  r.settings["warmup_s"] = o_.warmup_s;
  // Runs with scale events are another experiment than the steady state of the same workload.
  if (!o_.events.empty()) r.settings["scale_events"] = static_cast<double>(o_.events.size());
  if (o_.arrivals == Arrivals::kClosed) {
    r.settings["concurrency"] = o_.concurrency;
  } else {
    r.settings["rate_rps"] = o_.rate_rps;
  }
  report::Summarize(run.records, report::SummaryOptions{static_cast<uint32_t>(share_names_.size()), o_.series_window_s},
                    r);
  if (!queue_depths_.empty()) {
    double sum = 0;
    for (double q : queue_depths_) sum += q;
    r.extra["queue_depth_mean"] = sum / static_cast<double>(queue_depths_.size());
    r.extra["queue_depth_p99"] = report::Percentile(queue_depths_, 0.99);
    r.extra["queue_depth_max"] = queue_depths_.back();  // sorted by Percentile
  }
  if (bounds_ && bound_prompt_ > 0) {
    r.extra["lru_bound_hit_rate"] = static_cast<double>(bound_lru_) / bound_prompt_;
    r.extra["infinite_bound_hit_rate"] = static_cast<double>(bound_infinite_) / bound_prompt_;
  }
  uint64_t preemptions = 0;
  for (const Engine& e : engines_) preemptions += e.scheduler->num_preemptions();
  r.extra["preemptions"] = static_cast<double>(preemptions);
  if (flow_) {
    if (o_.routing.max_in_flight > 0) r.settings["max_in_flight"] = o_.routing.max_in_flight;
    if (o_.routing.flow_control.saturation == FlowSaturation::kInFlight) {
      r.settings["saturation_in_flight"] = o_.routing.concurrency_threshold;
    }
    if (o_.routing.flow_control.max_queue > 0) {
      r.settings["max_queue"] = o_.routing.flow_control.max_queue;
      r.settings["max_queue_wait_s"] = o_.routing.flow_control.max_queue_wait;
      if (o_.routing.flow_control.max_queue_bytes > 0) {
        r.settings["max_queue_bytes"] = static_cast<double>(o_.routing.flow_control.max_queue_bytes);
      }
      r.settings["fairness"] = o_.routing.flow_control.fairness ? 1 : 0;
      r.settings["deadlines"] = o_.routing.flow_control.deadlines ? 1 : 0;
    }
    if (o_.routing.flow_control.max_in_flight_per_tenant > 0) {
      r.settings["max_in_flight_per_tenant"] = o_.routing.flow_control.max_in_flight_per_tenant;
    }
  }
  report::AddFlowFigures(run.records, TenantLabels(o_.tenants), flow_, r);
  return run;
}

}  // namespace

Result<ScaleEvent> ParseScaleEvent(std::string_view text) {
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos) {
    return Status::InvalidArgument("scale event '" + std::string(text) +
                                   "': expected KIND[:INSTANCE]@SECONDS, e.g. remove:instance-3@1200");
  }
  auto when = ParseSeconds(text.substr(at + 1));
  if (!when.ok()) return Status::InvalidArgument("scale event '" + std::string(text) + "': " + when.status().message());
  std::string_view head = text.substr(0, at);
  std::string_view kind = head, instance;
  if (size_t colon = head.find(':'); colon != std::string_view::npos) {
    kind = head.substr(0, colon);
    instance = head.substr(colon + 1);
  }
  ScaleEvent e;
  e.at_s = *when;
  e.instance = std::string(instance);
  if (kind == "add") {
    e.kind = ScaleEvent::Kind::kAdd;
  } else if (kind == "remove" || kind == "replace") {
    e.kind = kind == "remove" ? ScaleEvent::Kind::kRemove : ScaleEvent::Kind::kReplace;
    if (instance.empty()) {
      return Status::InvalidArgument("scale event '" + std::string(text) + "': " + std::string(kind) +
                                     " needs an instance name, e.g. " + std::string(kind) + ":instance-3@600");
    }
  } else {
    return Status::InvalidArgument("scale event '" + std::string(text) + "': kind must be add, remove or replace");
  }
  return e;
}

namespace {

// prefix-aware's labels that spell out its spill mode ("prefix-aware-next-preferred", ...).
const std::vector<std::string>& SpillLabels() {
  static const std::vector<std::string> labels = [] {
    const std::string base(StrategyName(Strategy::kPrefixAware));
    return std::vector<std::string>{base + "-" + std::string(SpillModeName(SpillMode::kNextPreferred)),
                                    base + "-" + std::string(SpillModeName(SpillMode::kLeastLoaded))};
  }();
  return labels;
}

}  // namespace

std::vector<std::string_view> StrategyNames() {
  // The gateway's strategies (core's registry), each prefix-aware spill mode spelled out after
  // prefix-aware, then the re-implemented peers.
  std::vector<std::string_view> names;
  for (const StrategyInfo& e : StrategyRegistry()) {
    names.push_back(e.name);
    if (e.strategy == Strategy::kPrefixAware) {
      for (const std::string& label : SpillLabels()) names.push_back(label);
    }
  }
  for (std::string_view peer : PeerStrategyNames()) names.push_back(peer);
  return names;
}

std::vector<std::string> DefaultComparison() {
  const std::string prefix_aware(StrategyName(Strategy::kPrefixAware));
  return {std::string(StrategyName(Strategy::kRandom)), std::string(StrategyName(Strategy::kLeastOutstanding)),
          prefix_aware + "-least-loaded-b0", prefix_aware, std::string(StrategyName(Strategy::kCacheAware))};
}

Result<RoutingOptions> ParseStrategyName(std::string_view name, RoutingOptions base) {
  // A peer's policy (SimOptions::peer names it): the routing options only shape its key.
  if (IsPeerStrategy(name)) {
    base.strategy = Strategy::kRandom;
    return base;
  }
  const std::string_view kPrefixAware = StrategyName(Strategy::kPrefixAware);
  // An optional "+tokens" suffix: load measured in outstanding prompt tokens.
  constexpr std::string_view kTokens = "+tokens";
  if (name.ends_with(kTokens)) {
    base.load_measure = LoadMeasure::kPromptTokens;
    name.remove_suffix(kTokens.size());
  }
  if (name.starts_with(kPrefixAware)) {
    // An optional "-bF" suffix: the balance factor.
    if (size_t b = name.rfind("-b"); b != std::string_view::npos && b >= kPrefixAware.size() && b + 2 < name.size() &&
                                     (std::isdigit(static_cast<unsigned char>(name[b + 2])) != 0)) {
      double factor = 0;
      std::string_view digits = name.substr(b + 2);
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), factor);
      if (ec != std::errc() || ptr != digits.data() + digits.size()) {
        return Status::InvalidArgument("strategy '" + std::string(name) + "': bad balance factor");
      }
      base.balance_factor = factor;
      name = name.substr(0, b);
    }
  }
  const std::string_view kCacheAware = StrategyName(Strategy::kCacheAware);
  if (name.starts_with(kCacheAware) && name.size() > kCacheAware.size() + 2 &&
      name.substr(kCacheAware.size(), 2) == "-w") {
    // "-wF": the load weight.
    std::string_view digits = name.substr(kCacheAware.size() + 2);
    double weight = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), weight);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      return Status::InvalidArgument("strategy '" + std::string(name) + "': bad load weight");
    }
    base.cache_aware.load_weight = weight;
    name = kCacheAware;
  }
  if (name.starts_with(kPrefixAware) && name.size() > kPrefixAware.size() && name[kPrefixAware.size()] == '-') {
    auto spill = ParseSpillMode(name.substr(kPrefixAware.size() + 1));
    if (!spill.ok()) {
      return Status::InvalidArgument("unknown strategy '" + std::string(name) +
                                     "' (prefix-aware spill modes: next-preferred, least-loaded)");
    }
    base.strategy = Strategy::kPrefixAware;
    base.spill = *spill;
    return base;
  }
  auto s = ParseStrategy(name);
  if (!s.ok()) {
    std::string known;
    for (std::string_view n : StrategyNames()) known += (known.empty() ? "" : ", ") + std::string(n);
    return Status::InvalidArgument("unknown strategy '" + std::string(name) + "' (known: " + known + ")");
  }
  base.strategy = *s;
  return base;
}

Result<SimRun> Simulate(const SimOptions& options) {
  Simulation sim(options);
  return sim.Run();
}

Result<double> SaturationThroughput(SimOptions options, uint32_t users_per_instance, double duration_s,
                                    double warmup_s) {
  options.routing.strategy = Strategy::kRandom;
  options.strategy_label = StrategyName(Strategy::kRandom);
  options.arrivals = Arrivals::kClosed;
  options.concurrency = std::max<uint32_t>(1, users_per_instance * options.instances);
  options.ignore_think_time = true;
  options.duration_s = duration_s;
  options.max_requests = 0;
  options.warmup_s = warmup_s;
  options.series_window_s = 0;
  options.events.clear();
  options.bounds = false;
  // Capacity without admission: no ceiling, no queue, one class of clients.
  options.routing.max_in_flight = 0;
  options.routing.flow_control = FlowQueueOptions{};
  options.tenants.clear();
  // Random routing does not depend on how many gateways pick (they share one random stream):
  // one capacity for every gateway count, so that loads in percent compare equal rates.
  options.gateways = 1;
  auto run = Simulate(options);
  if (!run.ok()) return run.status();
  if (run->result.requests == 0 && warmup_s > 0) {
    // A finite workload (a trace without loop) that ended before the warm-up did: nothing is
    // left to measure after it, so measure the whole run instead (first request sent to last
    // response), cold caches included.
    options.warmup_s = 0;
    run = Simulate(options);
    if (!run.ok()) return run.status();
  }
  if (!(run->result.throughput_rps > 0)) {
    return Status::Internal("saturation run completed no request");
  }
  return run->result.throughput_rps;
}

std::vector<report::TenantLabel> TenantLabels(const std::vector<workload::TenantClass>& classes) {
  std::vector<report::TenantLabel> out;
  for (const workload::TenantClass& c : classes) out.push_back({c.name, c.priority, c.ttft_objective_ms / 1000.0});
  return out;
}

}  // namespace prefix_router::sim
