#include "zmq/socket.h"

#include <zmq.h>

#include <cerrno>
#include <utility>

namespace prefix_router::zmq {
namespace {

Status Error(std::string_view what) {
  int e = zmq_errno();
  std::string msg = std::string(what) + ": " + zmq_strerror(e);
  if (e == EAGAIN) return Status::Unavailable(std::move(msg));
  if (e == EINVAL || e == EPROTONOSUPPORT || e == EADDRINUSE || e == EADDRNOTAVAIL || e == ENODEV || e == ENOENT) {
    return Status::InvalidArgument(std::move(msg));
  }
  return Status::Internal(std::move(msg));
}

int NativeType(SocketType t) {
  switch (t) {
    case SocketType::kPub: return ZMQ_PUB;
    case SocketType::kSub: return ZMQ_SUB;
    case SocketType::kRouter: return ZMQ_ROUTER;
    case SocketType::kDealer: return ZMQ_DEALER;
    case SocketType::kReq: return ZMQ_REQ;
    case SocketType::kRep: return ZMQ_REP;
    case SocketType::kPair: return ZMQ_PAIR;
  }
  return ZMQ_PAIR;
}

long TimeoutMs(Timeout t) { return t.count() < 0 ? -1 : static_cast<long>(t.count()); }

// zmq_poll, retried when a signal interrupts it. Returns the number of ready items or -1.
int Poll(zmq_pollitem_t* items, int n, Timeout timeout) {
  for (;;) {
    int rc = zmq_poll(items, n, TimeoutMs(timeout));
    if (rc >= 0 || zmq_errno() != EINTR) return rc;
  }
}

}  // namespace

Context::Context() : ctx_(zmq_ctx_new()) {}

Context::~Context() {
  if (ctx_ == nullptr) return;
  while (zmq_ctx_term(ctx_) != 0 && zmq_errno() == EINTR) {}
}

Result<Socket> Socket::Open(Context& context, SocketType type) {
  if (context.raw() == nullptr) return Status::Internal("zmq context could not be created");
  void* s = zmq_socket(context.raw(), NativeType(type));
  if (s == nullptr) return Error("zmq_socket");
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  return Socket(s);
}

Socket::~Socket() { Close(); }

Socket::Socket(Socket&& other) noexcept : socket_(std::exchange(other.socket_, nullptr)) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    socket_ = std::exchange(other.socket_, nullptr);
  }
  return *this;
}

void Socket::Close() {
  if (socket_ != nullptr) zmq_close(socket_);
  socket_ = nullptr;
}

Status Socket::Bind(const std::string& endpoint) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  if (zmq_bind(socket_, endpoint.c_str()) != 0) return Error("cannot bind " + endpoint);
  return Status::Ok();
}

Status Socket::Connect(const std::string& endpoint) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  if (zmq_connect(socket_, endpoint.c_str()) != 0) return Error("cannot connect to " + endpoint);
  return Status::Ok();
}

Result<std::string> Socket::LastEndpoint() const {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  char buf[1024];
  size_t len = sizeof buf;
  if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, buf, &len) != 0) return Error("ZMQ_LAST_ENDPOINT");
  // len counts the terminating NUL.
  return std::string(buf, len > 0 ? len - 1 : 0);
}

Status Socket::Subscribe(std::string_view prefix) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  if (zmq_setsockopt(socket_, ZMQ_SUBSCRIBE, prefix.data(), prefix.size()) != 0) {
    return Error("ZMQ_SUBSCRIBE");
  }
  return Status::Ok();
}

Status Socket::SetMaxFrameBytes(int64_t bytes) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  if (zmq_setsockopt(socket_, ZMQ_MAXMSGSIZE, &bytes, sizeof bytes) != 0) {
    return Error("ZMQ_MAXMSGSIZE");
  }
  return Status::Ok();
}

Status Socket::SetHighWaterMarks(int send, int receive) {
  if (Status s = SetIntOption(ZMQ_SNDHWM, send); !s.ok()) return s;
  return SetIntOption(ZMQ_RCVHWM, receive);
}

Status Socket::SetIntOption(int option, int value) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  if (zmq_setsockopt(socket_, option, &value, sizeof value) != 0) return Error("zmq_setsockopt");
  return Status::Ok();
}

Status Socket::Send(std::span<const std::string_view> frames, Timeout timeout) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  if (frames.empty()) return Status::InvalidArgument("zmq message without frames");
  zmq_pollitem_t item{socket_, 0, ZMQ_POLLOUT, 0};
  int ready = Poll(&item, 1, timeout);
  if (ready < 0) return Error("zmq_poll");
  if (ready == 0) return Status::Unavailable("zmq send timed out");
  // Once the first frame of a multipart message is queued, libzmq queues the rest.
  for (size_t i = 0; i < frames.size(); ++i) {
    int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_send(socket_, frames[i].data(), frames[i].size(), flags) < 0) {
      return Error("zmq_send");
    }
  }
  return Status::Ok();
}

Result<Message> Socket::Recv(Timeout timeout, size_t max_frames) {
  if (!socket_) return Status::FailedPrecondition("zmq socket is closed");
  zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
  int ready = Poll(&item, 1, timeout);
  if (ready < 0) return Error("zmq_poll");
  if (ready == 0) return Status::Unavailable("zmq receive timed out");
  Message out;
  bool too_many = false;
  for (;;) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket_, ZMQ_DONTWAIT) < 0) {
      Status s = Error("zmq_msg_recv");
      zmq_msg_close(&msg);
      return s;
    }
    if (out.size() < max_frames) {
      out.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    } else {
      too_many = true;
    }
    bool more = zmq_msg_more(&msg) != 0;
    zmq_msg_close(&msg);
    if (!more) break;
  }
  if (too_many) {
    return Status::ResourceExhausted("zmq message of more than " + std::to_string(max_frames) + " frames");
  }
  return out;
}

Result<std::vector<bool>> PollIn(std::span<Socket* const> sockets, Timeout timeout) {
  std::vector<zmq_pollitem_t> items;
  items.reserve(sockets.size());
  for (Socket* s : sockets) items.push_back({s->raw(), 0, ZMQ_POLLIN, 0});
  int ready = Poll(items.data(), static_cast<int>(items.size()), timeout);
  if (ready < 0) return Error("zmq_poll");
  std::vector<bool> out(sockets.size());
  for (size_t i = 0; i < items.size(); ++i) out[i] = (items[i].revents & ZMQ_POLLIN) != 0;
  return out;
}

}  // namespace prefix_router::zmq
