// sse_upstream: the streaming model server of scripts/bench-gateway.sh's stream route. It answers
// every POST on every port it listens on with an OpenAI chat completion stream
// (text/event-stream, Transfer-Encoding: chunked) of --events events, each event written as its
// own chunk by its own write(2), and any GET with 200 {"ok":true} (health checks, the script's
// readiness probe). The last event is `data: [DONE]`, sent with the terminating zero-length chunk.
//
// Each content event carries "sent_ns", CLOCK_MONOTONIC in nanoseconds taken just before its write,
// so that sse_probe on the same machine measures each event's one-way delay through a proxy.
// Pacing: a request header `x-sse-gap-us: G` spaces the events G microseconds apart (sse_probe
// sends it, so that each event is relayed on its own, as tokens are); without it they are written
// back to back, as fast as the socket takes them (wrk's throughput runs). An event is never written
// while the previous one is still in user space: under backpressure the stream waits for EPOLLOUT,
// so each write stays one event.
//
// One thread, non-blocking sockets, epoll: the upstream is meant to cost little and the same for
// every proxy in front of it. Plain POSIX rather than the house's Asio coroutines: a benchmark
// fixture with no timeouts or limits beyond what the benchmark needs, and a fast build.
//
// Usage: sse_upstream [--host 127.0.0.1] --port P [--port P ...] [--events 256] [--model NAME]
// Prints "listening on HOST:PORT" for each port (port 0 = any free port) and serves until killed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kMaxBodyBytes = 64 * 1024 * 1024;

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

struct Options {
  std::string host = "127.0.0.1";
  std::vector<int> ports;
  int events = 256;
  std::string model = "bench-model";
};

// One client connection: reads requests one after another (keep-alive) and streams the answer.
struct Connection {
  int fd = -1;
  std::string in;   // bytes read and not yet consumed
  std::string out;  // bytes the socket did not take yet
  bool close_after = false;
  bool want_write = false;  // EPOLLOUT registered
  // The stream in progress: events_sent of total, the next one due at next_due_ns.
  bool streaming = false;
  int events_sent = 0;
  int64_t gap_ns = 0;
  int64_t next_due_ns = 0;
};

class Server {
 public:
  explicit Server(Options options) : options_(std::move(options)) {}

  int Run() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) return Fail("epoll_create1");
    for (int port : options_.ports) {
      if (!Listen(port)) return 1;
    }
    // Paced events are due at nanosecond times: a timerfd armed at the earliest one wakes the
    // loop (epoll_wait's millisecond timeout would oversleep, and spinning would take the CPU
    // from the client that shares it).
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer_fd_ < 0) return Fail("timerfd_create");
    epoll_event tev{};
    tev.events = EPOLLIN;
    tev.data.fd = timer_fd_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, timer_fd_, &tev);
    std::vector<epoll_event> ready(256);
    while (true) {
      ArmTimer();
      const int n = epoll_wait(epoll_, ready.data(), static_cast<int>(ready.size()), -1);
      if (n < 0 && errno != EINTR) return Fail("epoll_wait");
      for (int i = 0; i < n; ++i) {
        const int fd = ready[i].data.fd;
        if (fd == timer_fd_) {
          uint64_t expirations;
          while (read(timer_fd_, &expirations, sizeof expirations) > 0) {}
          continue;
        }
        if (listeners_.count(fd)) {
          Accept(fd);
          continue;
        }
        auto it = connections_.find(fd);
        if (it == connections_.end()) continue;
        Connection& c = *it->second;
        if (ready[i].events & (EPOLLERR | EPOLLHUP)) {
          Close(c);
          continue;
        }
        if ((ready[i].events & EPOLLOUT) && !Flush(c)) continue;
        if (ready[i].events & EPOLLIN) ReadAndServe(c);
      }
      const int64_t now = NowNs();
      while (!timers_.empty() && timers_.begin()->first <= now) {
        const auto [due, fd] = *timers_.begin();
        timers_.erase(timers_.begin());
        auto it = connections_.find(fd);
        // A timer of a closed connection whose descriptor was reused, or of an event already
        // written by Flush, is stale.
        if (it != connections_.end() && it->second->streaming && it->second->next_due_ns == due) {
          Stream(*it->second);
        }
      }
    }
  }

 private:
  static int Fail(const char* what) {
    std::fprintf(stderr, "sse_upstream: %s: %s\n", what, std::strerror(errno));
    return 1;
  }

  void ArmTimer() {
    const int64_t due = timers_.empty() ? 0 : timers_.begin()->first;
    if (due == armed_ns_) return;
    armed_ns_ = due;
    itimerspec spec{};  // zero: disarmed
    if (due > 0) {
      spec.it_value.tv_sec = due / 1'000'000'000;
      spec.it_value.tv_nsec = due % 1'000'000'000;
    }
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  bool Listen(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, options_.host.c_str(), &addr.sin_addr) != 1) {
      std::fprintf(stderr, "sse_upstream: --host %s is not an IPv4 address\n", options_.host.c_str());
      return false;
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 4096) != 0) {
      std::fprintf(stderr, "sse_upstream: cannot listen on %s:%d: %s\n", options_.host.c_str(), port,
                   std::strerror(errno));
      return false;
    }
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
    listeners_.insert(fd);
    std::printf("listening on %s:%d\n", options_.host.c_str(), ntohs(addr.sin_port));
    std::fflush(stdout);
    return true;
  }

  void Accept(int listener) {
    while (true) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: all taken; anything else: the client is gone
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Connection>();
      c->fd = fd;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
      connections_[fd] = std::move(c);
    }
  }

  void Close(Connection& c) {
    const int fd = c.fd;
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    connections_.erase(fd);  // destroys c
  }

  void WantWrite(Connection& c, bool on) {
    if (c.want_write == on) return;
    c.want_write = on;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u);
    ev.data.fd = c.fd;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // Writes `data` now if nothing is queued; queues what the socket does not take. False if the
  // connection failed (and is closed).
  bool Send(Connection& c, std::string_view data) {
    if (c.out.empty()) {
      while (!data.empty()) {
        const ssize_t n = send(c.fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
          Close(c);
          return false;
        }
        data.remove_prefix(static_cast<size_t>(n));
      }
    }
    if (!data.empty()) {
      c.out.append(data);
      WantWrite(c, true);
    }
    return true;
  }

  // Sends what is queued; once it is all out, goes on with the stream or the next request.
  bool Flush(Connection& c) {
    while (!c.out.empty()) {
      const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) {
        Close(c);
        return false;
      }
      c.out.erase(0, static_cast<size_t>(n));
    }
    WantWrite(c, false);
    if (c.streaming) {
      // A paced event whose time came while the socket was full goes now; else its timer sends it.
      if (c.gap_ns == 0 || NowNs() >= c.next_due_ns) return Stream(c);
      return true;
    }
    if (c.close_after) {
      Close(c);
      return false;
    }
    return ServeBuffered(c);
  }

  bool ReadAndServe(Connection& c) {
    char buf[16384];
    while (true) {
      const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxHeadBytes + kMaxBodyBytes) {
          Close(c);
          return false;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      Close(c);  // 0: the client closed; a stream in progress ends with it
      return false;
    }
    if (c.streaming || !c.out.empty()) return true;  // the next request waits for this answer
    return ServeBuffered(c);
  }

  // Answers every complete request in c.in, one at a time.
  bool ServeBuffered(Connection& c) {
    while (!c.streaming && c.out.empty()) {
      const size_t head_end = c.in.find("\r\n\r\n");
      if (head_end == std::string::npos) {
        if (c.in.size() > kMaxHeadBytes) return Reply(c, 431, "request head too large", true);
        return true;
      }
      const std::string_view head(c.in.data(), head_end);
      const size_t line_end = head.find("\r\n");
      const std::string_view request_line = head.substr(0, line_end);
      const bool is_get = request_line.substr(0, 4) == "GET ";
      size_t content_length = 0;
      int64_t gap_us = 0;
      bool chunked = false;
      bool close_after = false;
      size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
      while (pos < head.size()) {
        size_t end = head.find("\r\n", pos);
        if (end == std::string_view::npos) end = head.size();
        const std::string_view line = head.substr(pos, end - pos);
        pos = end + 2;
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        const std::string_view name = Trim(line.substr(0, colon));
        const std::string value(Trim(line.substr(colon + 1)));
        if (EqualsNoCase(name, "content-length")) {
          content_length = std::strtoull(value.c_str(), nullptr, 10);
        } else if (EqualsNoCase(name, "x-sse-gap-us")) {
          gap_us = std::strtoll(value.c_str(), nullptr, 10);
        } else if (EqualsNoCase(name, "transfer-encoding")) {
          chunked = true;
        } else if (EqualsNoCase(name, "connection")) {
          close_after = EqualsNoCase(value, "close");
        }
      }
      if (chunked) return Reply(c, 501, "chunked request bodies are not supported", true);
      if (content_length > kMaxBodyBytes) return Reply(c, 413, "request body too large", true);
      if (c.in.size() < head_end + 4 + content_length) return true;  // the body is still coming
      c.in.erase(0, head_end + 4 + content_length);
      c.close_after = close_after;
      if (is_get) {
        if (!Reply(c, 200, "", close_after)) return false;
        continue;
      }
      static constexpr std::string_view kHead =
          "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
          "Transfer-Encoding: chunked\r\n\r\n";
      c.streaming = true;
      c.events_sent = 0;
      c.gap_ns = gap_us > 0 ? gap_us * 1000 : 0;
      c.next_due_ns = NowNs() + c.gap_ns;
      if (!Send(c, kHead)) return false;
      if (c.gap_ns > 0) {
        timers_.emplace(c.next_due_ns, c.fd);
        return true;
      }
      return c.out.empty() ? Stream(c) : true;
    }
    return true;
  }

  bool Reply(Connection& c, int status, std::string_view error, bool close_after) {
    std::string body =
        error.empty() ? std::string(R"({"ok":true})") : R"({"error":{"message":")" + std::string(error) + R"("}})";
    std::string response = "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Error") +
                           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                           (close_after ? "\r\nConnection: close" : "") + "\r\n\r\n" + body;
    c.close_after = close_after;
    if (!Send(c, response)) return false;
    if (close_after && c.out.empty()) {
      Close(c);
      return false;
    }
    return true;
  }

  // Writes the stream's next events: one (paced), or as many as the socket takes (unpaced).
  bool Stream(Connection& c) {
    std::string chunk;
    while (c.streaming && c.out.empty()) {
      const bool last = c.events_sent + 1 >= options_.events;
      std::string event;
      if (last) {
        event = "data: [DONE]\n\n";
      } else {
        char buf[512];
        const int n = std::snprintf(
            buf, sizeof buf,
            "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1764800000,"
            "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token%d\"},\"logprobs\":null,"
            "\"finish_reason\":null}],\"sent_ns\":%lld}\n\n",
            options_.model.c_str(), c.events_sent, static_cast<long long>(NowNs()));
        event.assign(buf, static_cast<size_t>(n));
      }
      char size[16];
      const int size_len = std::snprintf(size, sizeof size, "%zx\r\n", event.size());
      chunk.assign(size, static_cast<size_t>(size_len));
      chunk += event;
      chunk += last ? "\r\n0\r\n\r\n" : "\r\n";
      ++c.events_sent;
      if (last) c.streaming = false;
      if (!Send(c, chunk)) return false;
      if (!c.streaming) {
        if (!c.out.empty()) return true;  // Flush finishes the answer
        if (c.close_after) {
          Close(c);
          return false;
        }
        return ServeBuffered(c);
      }
      if (c.gap_ns > 0) {
        c.next_due_ns += c.gap_ns;
        timers_.emplace(c.next_due_ns, c.fd);
        return true;
      }
    }
    return true;
  }

  Options options_;
  int epoll_ = -1;
  int timer_fd_ = -1;
  int64_t armed_ns_ = 0;  // the due time timer_fd_ is armed at; 0: disarmed
  std::set<int> listeners_;
  std::map<int, std::unique_ptr<Connection>> connections_;
  std::multimap<int64_t, int> timers_;  // due time -> fd of a paced stream
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--port" && has_value) {
      options.ports.push_back(std::atoi(argv[++i]));
    } else if (arg == "--host" && has_value) {
      options.host = argv[++i];
    } else if (arg == "--events" && has_value) {
      options.events = std::atoi(argv[++i]);
    } else if (arg == "--model" && has_value) {
      options.model = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: sse_upstream [--host 127.0.0.1] --port P [--port P ...] [--events 256] [--model NAME]\n");
      return 2;
    }
  }
  if (options.ports.empty() || options.events < 1 || options.events > 1'000'000) {
    std::fprintf(stderr, "sse_upstream: give at least one --port and --events in 1..1000000\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  return Server(std::move(options)).Run();
}
