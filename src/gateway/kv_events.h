// KvEventSubscriber: the gateway's side of vLLM's KV event stream (docs/research/peers.md
// section 5). One thread per gateway holds a ZMQ SUB socket per instance with a `kv_events`
// endpoint, polls them all, decodes each message (api/kv_event_decoder.h) and hands the batch to
// the policies of the pools the instance serves, through Policy::OnKvEvents(placement_seed,
// batch), in arrival order per instance.
//
// Sequence numbers (per publisher, +1 per batch) are checked per instance:
//   - the next expected seq: delivered;
//   - a gap (seq > expected): with a replay endpoint, the missing batches are asked for (a DEALER
//     sends [ "", start_seq ]; the publisher answers [ "", seq, payload ] per batch and an end
//     marker of 0xFF x 8) and delivered first, then the one that showed the gap. When replay is
//     not configured, fails or does not cover the gap, OnKvStreamLost(seed) is called before
//     the batch is delivered;
//   - seq <= the last one seen (the publisher restarted, its seq back to 0, or a duplicate):
//     OnKvStreamLost, then delivered; the count starts again from it;
//   - an undecodable message: counted, OnKvStreamLost, and the stream continues with the next;
//   - silence longer than silence_timeout (on GatewayClock, gateway/clock.h): OnKvStreamLost
//     once, until a batch arrives again.
//     vLLM publishes only when the cache changes, so an idle engine is silent too: the timeout
//     is long by default, and a lost view only makes kv-aware fall back to cache-aware.
// The first batch seen from an instance is delivered as it is (what it stored before the
// gateway connected is not replayed: the buffer rarely reaches back to seq 0).
//
// Replay blocks the subscriber thread for at most replay_timeout; other instances' batches wait
// in their sockets meanwhile (ZMQ queues up to the high-water mark).
//
// Thread-safety: SetSources() and counters() may be called from any thread; the policies are
// called on the subscriber thread only (Policy allows calls concurrent with Pick).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/policy.h"
#include "gateway/clock.h"
#include "gateway/config.h"
#include "metrics/metrics.h"
#include "zmq/socket.h"

namespace prefix_router::gateway {

struct KvSubscriberOptions {
  std::chrono::milliseconds silence_timeout{60000};
  std::chrono::milliseconds replay_timeout{2000};  // per replay request, for the whole answer
  std::chrono::milliseconds poll_interval{50};     // how often the thread checks for changes
};

// One instance's stream and who receives it.
struct KvSource {
  uint64_t instance_seed = 0;
  std::string instance;  // the instance's name, the metrics' label
  KvEventsConfig config;
  std::vector<std::shared_ptr<Policy>> policies;
};

struct KvSubscriberCounters {
  uint64_t batches = 0;  // delivered, replayed ones included
  uint64_t events = 0;
  uint64_t gaps = 0;
  uint64_t decode_errors = 0;  // undecodable messages (also wrong frame counts)
  uint64_t replays = 0;        // replay requests made
  uint64_t replayed_batches = 0;
  uint64_t streams_lost = 0;  // OnKvStreamLost calls
  uint64_t restarts = 0;      // seq went back
  uint64_t turns = 0;         // turns of the thread's loop begun (tests: it looked again)
};

class KvEventSubscriber {
 public:
  // `registry` (may be null) receives per-instance counters prefix_router_kv_event_*_total.
  KvEventSubscriber(KvSubscriberOptions options, metrics::Registry* registry);
  ~KvEventSubscriber();  // stops the thread
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Replaces the sources; the thread applies them at its next turn. A source whose seed and
  // config are unchanged keeps its socket and sequence state; its policies are updated.
  void SetSources(std::vector<KvSource> sources);
  void Start();
  void Stop();

  KvSubscriberCounters counters() const;
  // Sources the thread has applied so far (for tests: connected once this reaches a value).
  uint64_t applied_generation() const { return applied_.load(); }
  uint64_t generation() const;

 private:
  struct Stream;
  struct MetricChildren;
  void Run();
  void Apply(std::vector<std::unique_ptr<Stream>>& streams);
  void OnMessage(Stream& s, const std::vector<std::string>& frames);
  void Deliver(Stream& s, const KvEventBatch& batch);
  void Lost(Stream& s);
  bool ReplayInto(Stream& s, uint64_t from, uint64_t until);

  KvSubscriberOptions options_;
  metrics::Registry* registry_;
  metrics::Family<metrics::Counter>* batches_ = nullptr;
  metrics::Family<metrics::Counter>* events_ = nullptr;
  metrics::Family<metrics::Counter>* gaps_ = nullptr;
  metrics::Family<metrics::Counter>* decode_errors_ = nullptr;
  metrics::Family<metrics::Counter>* replays_ = nullptr;
  metrics::Family<metrics::Counter>* lost_ = nullptr;

  mutable std::mutex mu_;
  std::vector<KvSource> sources_;  // guarded by mu_
  uint64_t generation_ = 0;        // guarded by mu_
  std::atomic<uint64_t> applied_{0};

  std::atomic<uint64_t> n_batches_{0}, n_events_{0}, n_gaps_{0}, n_decode_errors_{0}, n_replays_{0}, n_replayed_{0},
      n_lost_{0}, n_restarts_{0}, n_turns_{0};
  std::atomic<bool> stop_{false};
  zmq::Context context_;  // the sockets live on the thread and close before it ends
  std::thread thread_;
};

}  // namespace prefix_router::gateway
