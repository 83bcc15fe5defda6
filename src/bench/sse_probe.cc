// sse_probe: the per-event latency client of scripts/bench-gateway.sh's stream route. Over one
// keep-alive connection it sends the same POST again and again (for --duration seconds or
// --requests times) and reads each answer as a chunked (or Content-Length) text/event-stream,
// checking that it is status 200 with exactly --events events, the last one `data: [DONE]`.
//
// Latency: sse_upstream stamps each content event with CLOCK_MONOTONIC ("sent_ns") just before
// writing it; the probe takes the clock when the read that completed the event returns. On one
// machine the difference is the event's one-way delay from the upstream's write to the client,
// through whatever proxy is in between; against the upstream directly it is the floor (loopback,
// wake-ups). The request header `x-sse-gap-us` (--gap-us) asks the upstream to space the events,
// so that each is relayed alone rather than queued behind the previous one.
//
// Prints one line: PROBE_RESULT {"requests":..,"events":..,"delay_p50_us":..,"delay_p90_us":..,
// "delay_p99_us":..,"first_event_p50_us":..,"last_event_p50_us":..,"last_event_p99_us":..,...}
// (first/last event: from sending the request to receiving that event). Exits 1 at the first
// malformed or incomplete answer, naming what was wrong.
//
// Plain blocking POSIX sockets with poll(2) for a deadline on every read: one connection, one
// request at a time, and nothing else to wait for.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string path = "/v1/chat/completions";
  std::string body_file;
  int events = 256;
  int gap_us = 0;
  double duration_s = 0;
  int requests = 0;
  int timeout_ms = 10'000;
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "sse_probe: %s\n", message.c_str());
  std::exit(1);
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

class Probe {
 public:
  explicit Probe(Options options) : options_(std::move(options)) {}

  void Connect() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(options_.port));
    if (inet_pton(AF_INET, options_.host.c_str(), &addr.sin_addr) != 1) Die("--host is not an IPv4 address");
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      Die("connect to " + options_.host + ":" + std::to_string(options_.port) + ": " + std::strerror(errno));
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  // One request and its whole answer; adds its samples.
  void Exchange(const std::string& request) {
    const int64_t start = NowNs();
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) Die(std::string("send: ") + std::strerror(errno));
      sent += static_cast<size_t>(n);
    }
    // Head.
    size_t head_end;
    while ((head_end = in_.find("\r\n\r\n")) == std::string::npos) Read();
    const std::string head = in_.substr(0, head_end);
    in_.erase(0, head_end + 4);
    if (head.compare(0, 12, "HTTP/1.1 200") != 0) {
      Die("status is not 200: " + head.substr(0, head.find("\r\n")) + "; body starts: " + in_.substr(0, 300));
    }
    std::string lower(head);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const bool chunked = lower.find("\ntransfer-encoding: chunked") != std::string::npos;
    const size_t cl = lower.find("\ncontent-length:");
    if (lower.find("\ncontent-type: text/event-stream") == std::string::npos) {
      Die("the answer is not text/event-stream: " + head);
    }
    if (!chunked && cl == std::string::npos) Die("the answer is neither chunked nor of a known length: " + head);
    // Body: decode chunks (or count Content-Length bytes) into events as the bytes arrive.
    int events = 0;
    bool done = false;
    int64_t first_ns = 0;
    int64_t last_ns = 0;
    std::string sse;  // event text not yet ended by a blank line
    auto take = [&](std::string_view data) {
      sse.append(data);
      size_t end;
      while ((end = sse.find("\n\n")) != std::string::npos) {
        const std::string_view event(sse.data(), end);
        ++events;
        if (events == 1) first_ns = read_at_ns_ - start;
        last_ns = read_at_ns_ - start;
        if (event == "data: [DONE]") {
          done = true;
        } else {
          if (done) Die("an event after [DONE]");
          const size_t at = event.find("\"sent_ns\":");
          if (at == std::string_view::npos)
            Die("an event without sent_ns (not sse_upstream's?): " + std::string(event));
          const int64_t sent_ns = std::strtoll(event.data() + at + 10, nullptr, 10);
          delays_us_.push_back(static_cast<double>(read_at_ns_ - sent_ns) / 1000.0);
        }
        sse.erase(0, end + 2);
      }
    };
    if (chunked) {
      while (true) {
        size_t line_end;
        while ((line_end = in_.find("\r\n")) == std::string::npos) Read();
        const size_t size = std::strtoull(in_.c_str(), nullptr, 16);
        in_.erase(0, line_end + 2);
        if (size == 0) {
          while (true) {  // trailers, if any, then the blank line
            size_t e;
            while ((e = in_.find("\r\n")) == std::string::npos) Read();
            in_.erase(0, e + 2);
            if (e == 0) break;
          }
          break;
        }
        while (in_.size() < size + 2) Read();
        take(std::string_view(in_).substr(0, size));
        in_.erase(0, size + 2);
      }
    } else {
      size_t left = std::strtoull(lower.c_str() + cl + 16, nullptr, 10);
      while (left > 0) {
        if (in_.empty()) Read();
        const size_t n = std::min(left, in_.size());
        take(std::string_view(in_).substr(0, n));
        in_.erase(0, n);
        left -= n;
      }
    }
    if (!sse.empty()) Die("the stream ended inside an event");
    if (events != options_.events || !done) {
      Die("got " + std::to_string(events) + " events" + (done ? "" : " without [DONE]") + ", expected " +
          std::to_string(options_.events));
    }
    first_us_.push_back(static_cast<double>(first_ns) / 1000.0);
    last_us_.push_back(static_cast<double>(last_ns) / 1000.0);
    events_ += events;
  }

  void Report(double elapsed_s) {
    const size_t requests = last_us_.size();
    std::printf(
        "PROBE_RESULT {\"requests\":%zu,\"events\":%lld,\"duration_us\":%.0f,\"gap_us\":%d,"
        "\"delay_p50_us\":%.1f,\"delay_p90_us\":%.1f,\"delay_p99_us\":%.1f,\"delay_samples\":%zu,"
        "\"first_event_p50_us\":%.1f,\"last_event_p50_us\":%.1f,\"last_event_p99_us\":%.1f}\n",
        requests, static_cast<long long>(events_), elapsed_s * 1e6, options_.gap_us, Percentile(delays_us_, 50),
        Percentile(delays_us_, 90), Percentile(delays_us_, 99), delays_us_.size(), Percentile(first_us_, 50),
        Percentile(last_us_, 50), Percentile(last_us_, 99));
  }

 private:
  void Read() {
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, options_.timeout_ms);
    if (r == 0) Die("no answer bytes for " + std::to_string(options_.timeout_ms) + " ms");
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    read_at_ns_ = NowNs();
    if (n == 0) Die("the server closed the connection mid-answer");
    if (n < 0) Die(std::string("recv: ") + std::strerror(errno));
    in_.append(buf, static_cast<size_t>(n));
  }

  Options options_;
  int fd_ = -1;
  std::string in_;
  int64_t read_at_ns_ = 0;
  long long events_ = 0;
  std::vector<double> delays_us_, first_us_, last_us_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value == nullptr) {
      Die("usage: sse_probe --port P --body FILE [--host H] [--path /v1/chat/completions] [--events 256] "
          "[--gap-us G] (--duration S | --requests N)");
    }
    ++i;
    if (arg == "--host") {
      o.host = value;
    } else if (arg == "--port") {
      o.port = std::atoi(value);
    } else if (arg == "--path") {
      o.path = value;
    } else if (arg == "--body") {
      o.body_file = value;
    } else if (arg == "--events") {
      o.events = std::atoi(value);
    } else if (arg == "--gap-us") {
      o.gap_us = std::atoi(value);
    } else if (arg == "--duration") {
      o.duration_s = std::atof(value);
    } else if (arg == "--requests") {
      o.requests = std::atoi(value);
    } else {
      Die("unknown argument " + arg);
    }
  }
  if (o.port <= 0 || o.body_file.empty() || (o.duration_s <= 0 && o.requests <= 0) || o.events < 1) {
    Die("give --port, --body, --events >= 1 and --duration S or --requests N");
  }
  std::ifstream f(o.body_file, std::ios::binary);
  if (!f) Die("cannot read " + o.body_file);
  std::stringstream body;
  body << f.rdbuf();
  const std::string request = "POST " + o.path + " HTTP/1.1\r\nHost: " + o.host + ":" + std::to_string(o.port) +
                              "\r\nContent-Type: application/json\r\nx-sse-gap-us: " + std::to_string(o.gap_us) +
                              "\r\nContent-Length: " + std::to_string(body.str().size()) + "\r\n\r\n" + body.str();
  Probe probe(o);
  probe.Connect();
  const int64_t start = NowNs();
  const int64_t end = start + static_cast<int64_t>(o.duration_s * 1e9);
  for (int n = 0; o.requests > 0 ? n < o.requests : NowNs() < end; ++n) probe.Exchange(request);
  probe.Report(static_cast<double>(NowNs() - start) / 1e9);
  return 0;
}
