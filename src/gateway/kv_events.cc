#include "gateway/kv_events.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <span>
#include <utility>

#include "api/kv_event_decoder.h"

namespace prefix_router::gateway {

namespace {

// Silence is measured on the loops' clock (tests step it); replay deadlines bound real socket
// waits and stay on the steady clock.
using Clock = GatewayClock;
using std::chrono::milliseconds;

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

const std::string kReplayEnd(8, '\xff');

}  // namespace

struct KvEventSubscriber::MetricChildren {
  metrics::Counter* batches = nullptr;
  metrics::Counter* events = nullptr;
  metrics::Counter* gaps = nullptr;
  metrics::Counter* decode_errors = nullptr;
  metrics::Counter* replays = nullptr;
  metrics::Counter* lost = nullptr;
};

struct KvEventSubscriber::Stream {
  KvSource source;
  zmq::Socket socket;
  std::optional<uint64_t> last_seq;  // the last seq delivered
  Clock::time_point last_activity;
  bool lost = false;  // OnKvStreamLost called and no batch since
  MetricChildren m;
};

KvEventSubscriber::KvEventSubscriber(KvSubscriberOptions options, metrics::Registry* registry)
    : options_(options), registry_(registry) {
  if (registry_) {
    const std::vector<std::string> l = {"instance"};
    batches_ = &registry_->AddCounter("prefix_router_kv_event_batches_total",
                                      "KV event batches received and delivered to the policy", l);
    events_ = &registry_->AddCounter("prefix_router_kv_events_total",
                                     "KV events (BlockStored, BlockRemoved, AllBlocksCleared) delivered", l);
    gaps_ = &registry_->AddCounter("prefix_router_kv_event_gaps_total",
                                   "Sequence gaps seen in an instance's KV event stream", l);
    decode_errors_ = &registry_->AddCounter("prefix_router_kv_event_decode_errors_total",
                                            "KV event messages that could not be decoded", l);
    replays_ = &registry_->AddCounter("prefix_router_kv_event_replays_total",
                                      "Replay requests sent to an instance's replay endpoint", l);
    lost_ = &registry_->AddCounter("prefix_router_kv_event_streams_lost_total",
                                   "Times an instance's KV view was declared stale (gap, restart, "
                                   "decode error, silence)",
                                   l);
  }
}

KvEventSubscriber::~KvEventSubscriber() { Stop(); }

void KvEventSubscriber::SetSources(std::vector<KvSource> sources) {
  std::lock_guard lock(mu_);
  sources_ = std::move(sources);
  ++generation_;
}

uint64_t KvEventSubscriber::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

void KvEventSubscriber::Start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { Run(); });
}

void KvEventSubscriber::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

KvSubscriberCounters KvEventSubscriber::counters() const {
  KvSubscriberCounters c;
  c.batches = n_batches_.load();
  c.events = n_events_.load();
  c.gaps = n_gaps_.load();
  c.decode_errors = n_decode_errors_.load();
  c.replays = n_replays_.load();
  c.replayed_batches = n_replayed_.load();
  c.streams_lost = n_lost_.load();
  c.restarts = n_restarts_.load();
  c.turns = n_turns_.load();
  return c;
}

void KvEventSubscriber::Apply(std::vector<std::unique_ptr<Stream>>& streams) {
  std::vector<KvSource> sources;
  uint64_t gen;
  {
    std::lock_guard lock(mu_);
    gen = generation_;
    if (gen == applied_.load()) return;
    sources = sources_;
  }
  std::vector<std::unique_ptr<Stream>> next;
  for (KvSource& src : sources) {
    std::unique_ptr<Stream> kept;
    for (auto& s : streams) {
      if (s && s->source.instance_seed == src.instance_seed && s->source.config == src.config &&
          s->source.instance == src.instance) {
        kept = std::move(s);
        break;
      }
    }
    if (kept) {
      kept->source.policies = std::move(src.policies);
      next.push_back(std::move(kept));
      continue;
    }
    auto s = std::make_unique<Stream>();
    s->source = std::move(src);
    s->last_activity = Clock::now();
    Result<zmq::Socket> sock = zmq::Socket::Open(context_, zmq::SocketType::kSub);
    Status st = sock.ok() ? Status::Ok() : sock.status();
    if (st.ok()) {
      s->socket = std::move(*sock);
      // A batch is at most kMaxKvPayloadBytes; a larger frame is dropped by libzmq itself.
      st = s->socket.SetMaxFrameBytes(static_cast<int64_t>(api::kMaxKvPayloadBytes));
    }
    if (st.ok()) st = s->socket.Subscribe(s->source.config.topic);
    if (st.ok()) st = s->socket.Connect(s->source.config.endpoint);
    if (!st.ok()) {
      spdlog::warn("kv events: instance {}: {}", s->source.instance, st.message());
      continue;
    }
    if (registry_) {
      const std::string& n = s->source.instance;
      s->m = {&batches_->WithLabels({n}),       &events_->WithLabels({n}),  &gaps_->WithLabels({n}),
              &decode_errors_->WithLabels({n}), &replays_->WithLabels({n}), &lost_->WithLabels({n})};
    }
    next.push_back(std::move(s));
  }
  streams = std::move(next);
  applied_.store(gen);
}

void KvEventSubscriber::Run() {
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<zmq::Socket*> sockets;
  while (!stop_.load()) {
    n_turns_.fetch_add(1);
    Apply(streams);
    sockets.clear();
    for (auto& s : streams) sockets.push_back(&s->socket);
    if (sockets.empty()) {
      std::this_thread::sleep_for(options_.poll_interval);
      continue;
    }
    Result<std::vector<bool>> ready = zmq::PollIn(sockets, options_.poll_interval);
    if (!ready.ok()) {
      spdlog::warn("kv events: poll: {}", ready.status().message());
      std::this_thread::sleep_for(options_.poll_interval);
      continue;
    }
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < streams.size(); ++i) {
      Stream& s = *streams[i];
      if ((*ready)[i]) {
        // Drain what is queued, bounded so that one busy instance cannot starve the others.
        for (int n = 0; n < 64; ++n) {
          Result<zmq::Message> m = s.socket.Recv(milliseconds(0), 4);
          if (m.ok()) {
            OnMessage(s, *m);
          } else if (m.status().code() == StatusCode::kResourceExhausted) {
            OnMessage(s, {});  // too many frames: malformed
          } else {
            break;
          }
        }
      } else if (!s.lost && now - s.last_activity > options_.silence_timeout) {
        spdlog::info("kv events: instance {} silent for more than {} ms; its view is stale", s.source.instance,
                     options_.silence_timeout.count());
        Lost(s);
      }
    }
  }
}

void KvEventSubscriber::Lost(Stream& s) {
  s.lost = true;
  n_lost_.fetch_add(1);
  if (s.m.lost) s.m.lost->Inc();
  for (auto& p : s.source.policies) p->OnKvStreamLost(s.source.instance_seed);
}

void KvEventSubscriber::Deliver(Stream& s, const KvEventBatch& batch) {
  s.last_seq = batch.seq;
  s.lost = false;
  n_batches_.fetch_add(1);
  n_events_.fetch_add(batch.events.size());
  if (s.m.batches) {
    s.m.batches->Inc();
    s.m.events->Inc(batch.events.size());
  }
  for (auto& p : s.source.policies) p->OnKvEvents(s.source.instance_seed, batch);
}

void KvEventSubscriber::OnMessage(Stream& s, const std::vector<std::string>& frames) {
  s.last_activity = Clock::now();
  Result<KvEventBatch> batch = Status::InvalidArgument("a KV event message must have 3 frames (topic, seq, payload)");
  if (frames.size() == 3) batch = api::DecodeKvEventMessage(Bytes(frames[1]), Bytes(frames[2]));
  if (!batch.ok()) {
    n_decode_errors_.fetch_add(1);
    if (s.m.decode_errors) s.m.decode_errors->Inc();
    spdlog::warn("kv events: instance {}: {}", s.source.instance, batch.status().message());
    Lost(s);
    return;
  }
  const uint64_t seq = batch->seq;
  if (s.last_seq) {
    const uint64_t expected = *s.last_seq + 1;
    if (seq > expected) {
      n_gaps_.fetch_add(1);
      if (s.m.gaps) s.m.gaps->Inc();
      if (!ReplayInto(s, expected, seq)) Lost(s);
    } else if (seq < expected) {
      // The publisher restarted (vLLM's seq starts at 0 per process) or repeated itself: what
      // the view holds may not match the engine's cache any more.
      n_restarts_.fetch_add(1);
      Lost(s);
    }
  }
  Deliver(s, *batch);
}

bool KvEventSubscriber::ReplayInto(Stream& s, uint64_t from, uint64_t until) {
  if (s.source.config.replay_endpoint.empty()) return false;
  n_replays_.fetch_add(1);
  if (s.m.replays) s.m.replays->Inc();
  Result<zmq::Socket> sock = zmq::Socket::Open(context_, zmq::SocketType::kDealer);
  if (!sock.ok()) return false;
  zmq::Socket& d = *sock;
  if (!d.SetMaxFrameBytes(static_cast<int64_t>(api::kMaxKvPayloadBytes)).ok() ||
      !d.Connect(s.source.config.replay_endpoint).ok()) {
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.replay_timeout;
  auto left = [&] {
    return std::max(milliseconds(0),
                    std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
  };
  if (!d.Send({"", api::EncodeKvSeq(from)}, left()).ok()) return false;
  uint64_t next = from;
  for (;;) {
    Result<zmq::Message> m = d.Recv(left(), 4);
    if (!m.ok() || m->size() != 3 || !(*m)[0].empty()) {
      spdlog::warn("kv events: instance {}: replay from {} incomplete", s.source.instance, from);
      return false;
    }
    if ((*m)[1] == kReplayEnd) break;
    Result<KvEventBatch> b = api::DecodeKvEventMessage(Bytes((*m)[1]), Bytes((*m)[2]));
    if (!b.ok()) {
      n_decode_errors_.fetch_add(1);
      if (s.m.decode_errors) s.m.decode_errors->Inc();
      return false;
    }
    if (b->seq < next) continue;       // before the gap
    if (b->seq >= until) continue;     // the live stream delivers it (or already queued it)
    if (b->seq != next) return false;  // the buffer no longer holds the start of the gap
    n_replayed_.fetch_add(1);
    Deliver(s, *b);
    ++next;
  }
  return next == until;
}

}  // namespace prefix_router::gateway
