// KvEventPublisher: the engine emulator's KV cache events on the wire, as vLLM publishes them.
//
// It is the engine model's KvEventListener: events the KV cache reports during an engine step
// are collected into one KvEventBatch (consecutive stored blocks of one chain merge into one
// BlockStored, consecutive removals into one BlockRemoved, as vLLM's events look), and Flush(),
// called once per step, publishes the batch on a ZMQ PUB socket as three frames: topic, sequence
// number (8 bytes big-endian, from 0, +1 per batch) and the msgpack payload in the chosen
// encoding (api/kv_event_decoder.h; docs/research/peers.md section 5). The socket binds when the
// endpoint has "*" or "::" or is ipc:// or inproc://, and connects otherwise, as vLLM's does.
//
// With a replay endpoint a ROUTER socket there serves the last buffer_steps batches: a request
// [identity, "", start_seq (8 bytes BE)] is answered with one [identity, "", seq, payload] per
// buffered batch with seq >= start_seq, then [identity, "", 0xFF x 8, ""] (vLLM's end marker).
// A request of any other shape is ignored, as vLLM ignores it.
//
// Thread-safety: the listener calls and Flush() come from the engine's one thread (the PUB socket
// is used there only). A replay thread owns the ROUTER; the buffer it reads is guarded by a
// mutex. PUB never blocks: a slow subscriber loses batches past the high-water mark (it sees a
// sequence gap and can replay).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/kv_event_decoder.h"
#include "core/kv_events.h"
#include "core/status.h"
#include "engine_model/kv_cache.h"
#include "zmq/socket.h"

namespace prefix_router::engine {

struct KvEventsOptions {
  std::string endpoint;           // "" = no events published
  std::string topic;              // the first frame; vLLM's default is ""
  std::string replay_endpoint;    // "" = no replay socket
  uint32_t buffer_steps = 10000;  // batches kept for replay (vLLM's default)
  int hwm = 100000;               // PUB high-water mark (vLLM's default)
  api::KvEventEncoding encoding = api::KvEventEncoding::kMap;
  int64_t data_parallel_rank = 0;
  std::string medium = "GPU";

  // InvalidArgument naming the flag when the values are out of range.
  Status Validate() const;
};

// vLLM's rule: bind when the address has "*" or "::" or is ipc/inproc, else connect.
bool KvEndpointBinds(std::string_view endpoint);

class KvEventPublisher final : public engine_model::KvEventListener {
 public:
  // Binds (or connects) the sockets; errors name the flag.
  static Result<std::unique_ptr<KvEventPublisher>> Create(KvEventsOptions options);
  ~KvEventPublisher() override;

  void OnBlockStored(uint64_t hash, uint64_t parent_hash, std::span<const uint32_t> token_ids,
                     std::string_view adapter) override;
  void OnBlockRemoved(uint64_t hash) override;
  void OnAllCleared() override;

  // Publishes the events collected since the last call as one batch (nothing when there are
  // none). Engine thread only.
  void Flush();

  // The endpoints as bound (a "tcp://127.0.0.1:*" bind shows its port); the configured endpoint
  // when the socket connects.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  uint64_t batches_published() const { return next_seq_.load(std::memory_order_relaxed); }
  uint64_t replay_requests() const { return replay_requests_.load(std::memory_order_relaxed); }

 private:
  explicit KvEventPublisher(KvEventsOptions options);
  void ReplayLoop();

  KvEventsOptions options_;
  zmq::Context context_;  // declared first: destroyed after the sockets
  zmq::Socket pub_;
  zmq::Socket router_;  // owned by replay_thread_ once it runs
  std::string endpoint_;
  std::string replay_endpoint_;
  KvEventBatch pending_;  // engine thread
  std::atomic<uint64_t> next_seq_{0};
  std::atomic<uint64_t> replay_requests_{0};
  std::mutex buffer_mu_;
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // guarded by buffer_mu_: (seq, payload)
  std::atomic<bool> stop_{false};
  std::thread replay_thread_;
};

}  // namespace prefix_router::engine
