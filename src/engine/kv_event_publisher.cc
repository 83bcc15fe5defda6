#include "engine/kv_event_publisher.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>
#include <variant>
#include <vector>

namespace prefix_router::engine {
namespace {

using std::chrono::milliseconds;

// How often the replay thread looks at its stop flag while no request arrives.
constexpr milliseconds kReplayPollInterval{50};
// A replay client that stops reading is not waited for longer than this per message.
constexpr milliseconds kReplaySendTimeout{1000};

const std::string kReplayEnd(8, '\xff');

Status OpenEnd(zmq::Socket& s, const std::string& endpoint, std::string_view flag) {
  Status st = KvEndpointBinds(endpoint) ? s.Bind(endpoint) : s.Connect(endpoint);
  if (!st.ok()) return Status::InvalidArgument(std::string(flag) + ": " + st.message());
  return Status::Ok();
}

}  // namespace

bool KvEndpointBinds(std::string_view e) {
  return e.find('*') != std::string_view::npos || e.find("::") != std::string_view::npos || e.starts_with("ipc://") ||
         e.starts_with("inproc://");
}

Status KvEventsOptions::Validate() const {
  if (endpoint.empty()) {
    if (!replay_endpoint.empty()) {
      return Status::InvalidArgument("--kv-events-replay-endpoint: needs --kv-events-endpoint");
    }
    return Status::Ok();
  }
  if (buffer_steps < 1 || buffer_steps > 1'000'000) {
    return Status::InvalidArgument("--kv-events-buffer-steps: must be in [1, 1000000]");
  }
  if (hwm < 0) return Status::InvalidArgument("--kv-events-hwm: must be >= 0");
  if (topic.size() > 1024) return Status::InvalidArgument("--kv-events-topic: at most 1024 bytes");
  return Status::Ok();
}

KvEventPublisher::KvEventPublisher(KvEventsOptions options) : options_(std::move(options)) {
  pending_.data_parallel_rank = options_.data_parallel_rank;
}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(KvEventsOptions options) {
  if (Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options)));
  const KvEventsOptions& o = p->options_;
  Result<zmq::Socket> pub = zmq::Socket::Open(p->context_, zmq::SocketType::kPub);
  if (!pub.ok()) return pub.status();
  p->pub_ = std::move(*pub);
  if (Status s = p->pub_.SetHighWaterMarks(o.hwm, o.hwm); !s.ok()) return s;
  if (Status s = OpenEnd(p->pub_, o.endpoint, "--kv-events-endpoint"); !s.ok()) return s;
  p->endpoint_ = KvEndpointBinds(o.endpoint) ? p->pub_.LastEndpoint().value() : o.endpoint;
  if (!o.replay_endpoint.empty()) {
    Result<zmq::Socket> router = zmq::Socket::Open(p->context_, zmq::SocketType::kRouter);
    if (!router.ok()) return router.status();
    p->router_ = std::move(*router);
    // vLLM binds its replay socket whatever the address.
    if (Status s = p->router_.Bind(o.replay_endpoint); !s.ok()) {
      return Status::InvalidArgument("--kv-events-replay-endpoint: " + s.message());
    }
    p->replay_endpoint_ = p->router_.LastEndpoint().value();
    p->replay_thread_ = std::thread([raw = p.get()] { raw->ReplayLoop(); });
  }
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  stop_.store(true);
  if (replay_thread_.joinable()) replay_thread_.join();
}

void KvEventPublisher::OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const uint32_t> token_ids,
                                     std::string_view adapter) {
  // The next block of the chain the last event stored extends that event, as vLLM reports the
  // blocks a request computed in a step.
  if (!pending_.events.empty()) {
    if (auto* last = std::get_if<KvBlockStored>(&pending_.events.back());
        last != nullptr && last->block_hashes.back() == parent_hash && last->adapter == adapter &&
        last->block_size == token_ids.size()) {
      last->block_hashes.push_back(hash);
      last->token_ids.insert(last->token_ids.end(), token_ids.begin(), token_ids.end());
      return;
    }
  }
  KvBlockStored s;
  s.block_hashes = {hash};
  if (parent_hash != engine_model::kRootParentHash) s.parent_hash = parent_hash;
  s.token_ids.assign(token_ids.begin(), token_ids.end());
  s.block_size = static_cast<uint32_t>(token_ids.size());
  s.adapter = std::string(adapter);
  s.medium = options_.medium;
  pending_.events.push_back(std::move(s));
}

void KvEventPublisher::OnBlockRemoved(uint64_t hash) {
  if (!pending_.events.empty()) {
    if (auto* last = std::get_if<KvBlockRemoved>(&pending_.events.back())) {
      last->block_hashes.push_back(hash);
      return;
    }
  }
  pending_.events.push_back(KvBlockRemoved{{hash}, options_.medium});
}

void KvEventPublisher::OnAllCleared() { pending_.events.push_back(KvAllBlocksCleared{}); }

void KvEventPublisher::Flush() {
  if (pending_.events.empty()) return;
  const uint64_t seq = next_seq_.load(std::memory_order_relaxed);
  pending_.seq = seq;
  pending_.ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string payload = api::EncodeKvEventBatch(pending_, options_.encoding);
  pending_.events.clear();
  const std::string seq_frame = api::EncodeKvSeq(seq);
  // PUB does not block: past the high-water mark the message is dropped for that subscriber.
  if (Status s = pub_.Send({options_.topic, seq_frame, payload}, milliseconds(0)); !s.ok()) {
    spdlog::warn("kv events: batch {} not published: {}", seq, s.message());
  }
  next_seq_.store(seq + 1, std::memory_order_relaxed);
  if (router_.is_open()) {
    std::lock_guard lock(buffer_mu_);
    buffer_.emplace_back(seq, std::move(payload));
    while (buffer_.size() > options_.buffer_steps) buffer_.pop_front();
  }
}

void KvEventPublisher::ReplayLoop() {
  while (!stop_.load()) {
    Result<zmq::Message> m = router_.Recv(kReplayPollInterval, 4);
    if (!m.ok()) continue;  // timeout, or an oversized request (discarded)
    if (m->size() != 3 || !(*m)[1].empty()) continue;
    const std::string& identity = (*m)[0];
    Result<uint64_t> start =
        api::DecodeKvSeq(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>((*m)[2].data()), (*m)[2].size()));
    if (!start.ok()) continue;
    replay_requests_.fetch_add(1, std::memory_order_relaxed);
    std::vector<std::pair<uint64_t, std::string>> replies;
    {
      std::lock_guard lock(buffer_mu_);
      for (const auto& [seq, payload] : buffer_) {
        if (seq >= *start) replies.emplace_back(seq, payload);
      }
    }
    bool ok = true;
    for (const auto& [seq, payload] : replies) {
      const std::string seq_frame = api::EncodeKvSeq(seq);
      if (!router_.Send({identity, "", seq_frame, payload}, kReplaySendTimeout).ok()) {
        ok = false;
        break;
      }
    }
    if (ok) (void)router_.Send({identity, "", kReplayEnd, ""}, kReplaySendTimeout);
  }
}

}  // namespace prefix_router::engine
