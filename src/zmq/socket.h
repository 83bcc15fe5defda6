// A thin RAII layer over the ZMQ C API (libzmq): a Context, move-only Sockets, multipart send and
// receive with timeouts, and a poll over several sockets. Used for vLLM's KV event stream (a PUB
// socket per engine, a ROUTER for replay; docs/research/peers.md section 5) by the engine emulator
// and the gateway.
//
// Errors are Status values, never exceptions: a timeout is Unavailable, a message over a limit
// ResourceExhausted, anything libzmq refuses (bad endpoint, address in use) InvalidArgument or
// Internal with zmq_strerror's text. Sockets are opened with linger 0, so closing one never blocks
// on unsent messages (a KV event nobody received is worth nothing later).
//
// Thread-safety: as libzmq's. A Context may be shared by threads; a Socket belongs to one thread
// at a time (moving it to another thread needs a happens-before, e.g. a mutex or thread start).
// REQUIRES: every Socket of a Context is closed (destroyed) before the Context.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace prefix_router::zmq {

class Context {
 public:
  Context();
  ~Context();  // zmq_ctx_term: waits for the sockets to be closed (see REQUIRES above)
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void* raw() const { return ctx_; }

 private:
  void* ctx_;
};

enum class SocketType { kPub, kSub, kRouter, kDealer, kReq, kRep, kPair };

// The frames of one multipart message.
using Message = std::vector<std::string>;

// A negative timeout waits forever; zero does not wait.
using Timeout = std::chrono::milliseconds;

class Socket {
 public:
  static Result<Socket> Open(Context& context, SocketType type);
  Socket() = default;  // closed; every call but the destructor and assignment fails
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool is_open() const { return socket_ != nullptr; }
  void* raw() const { return socket_; }

  Status Bind(const std::string& endpoint);
  Status Connect(const std::string& endpoint);
  // The endpoint last bound, with the port a "tcp://127.0.0.1:*" bind picked.
  Result<std::string> LastEndpoint() const;

  // SUB: receive messages whose first frame starts with `prefix` ("" = all).
  Status Subscribe(std::string_view prefix);
  // Messages larger than this (in all) are dropped by libzmq, and the connection that sent them
  // is closed (ZMQ_MAXMSGSIZE applies to each frame).
  Status SetMaxFrameBytes(int64_t bytes);
  // Messages queued per peer before a PUB drops (send) or the peer stops reading (receive).
  Status SetHighWaterMarks(int send, int receive);
  Status SetIntOption(int option, int value);

  // Sends the frames as one multipart message. Unavailable when it cannot be queued in time.
  // REQUIRES: !frames.empty()
  Status Send(std::span<const std::string_view> frames, Timeout timeout);
  Status Send(std::initializer_list<std::string_view> frames, Timeout timeout) {
    return Send(std::span<const std::string_view>(frames.begin(), frames.size()), timeout);
  }
  // Receives one multipart message. Unavailable on timeout; ResourceExhausted (after reading and
  // discarding the rest of the message) when it has more than max_frames frames.
  Result<Message> Recv(Timeout timeout, size_t max_frames = 16);

 private:
  explicit Socket(void* s) : socket_(s) {}
  void Close();
  void* socket_ = nullptr;
};

// Waits until at least one of `sockets` has a message to read or the timeout passes; the result
// says which ones are readable (all false on timeout). REQUIRES: every socket is open.
Result<std::vector<bool>> PollIn(std::span<Socket* const> sockets, Timeout timeout);

}  // namespace prefix_router::zmq
