// The load generator's client side: per-thread io_contexts running coroutine users (closed loop)
// or a Poisson session-start generator (open loop), over keep-alive Beast connections, with the
// controlling thread (the caller of RunLoad) keeping time: the duration limit, progress, and a
// last-resort bound on the whole run.
#include "loadgen/loadgen.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "api/native_request.h"
#include "api/redact.h"
#include "core/rng.h"
#include "http/server.h"
#include "loadgen/response.h"
#include "loadgen/sse.h"

namespace prefix_router::loadgen {
namespace {

namespace net = http::net;
namespace beast = http::beast;
namespace bhttp = http::bhttp;
using tcp = http::tcp;
using Clock = std::chrono::steady_clock;
using http::kTuple;

constexpr size_t kReadBufferBytes = 16 * 1024;
constexpr size_t kMaxBodyBytes = 64u << 20;  // a whole (non-streaming) response body
constexpr size_t kMaxErrorBodyBytes = 2048;  // kept of an error response, for its message
constexpr uint32_t kMaxHeaderBytes = 64u << 10;
constexpr size_t kMaxIdlePerThread = 4096;  // open loop: idle connections kept per thread
// Waits (think times, arrival gaps, the controller) wake at least this often to see a stop.
constexpr auto kPollSlice = std::chrono::milliseconds(100);
// After sending stops, requests in flight have their own deadline; past it plus this grace the
// run is cut short (a bug, never expected).
constexpr auto kGrace = std::chrono::seconds(5);
constexpr std::string_view kInstanceHeader = "x-prefix-router-instance";
constexpr std::string_view kDecisionHeader = "x-prefix-router-decision";
constexpr std::string_view kTimingHeader = "x-engine-timing";
// Flow control's request headers (docs/flow-control.md).
constexpr std::string_view kPriorityHeader = "x-prefix-router-priority";
constexpr std::string_view kFairnessHeader = "x-gateway-inference-fairness-id";
constexpr std::string_view kTtftObjectiveHeader = "x-slo-ttft-ms";
// Abandoned requests (AbortPoint): the longest wait for a response head, model seconds, and the
// most body reads before closing mid-stream.
constexpr double kAbortWaitMaxModelS = 0.1;
constexpr double kAbortMaxReads = 4;

// Seconds as a clock duration, saturated at 30 years so that "no limit" values cannot overflow
// the clock's 64-bit nanoseconds.
Clock::duration Wall(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(seconds, 1e9)));
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string_view View(beast::string_view s) { return {s.data(), s.size()}; }

// ------------------------------------------------------------------------------------ target

struct Target {
  std::string host;
  uint16_t port = 80;
  std::string base_path;    // without a trailing slash
  std::string host_header;  // as sent in Host
  tcp::resolver::results_type endpoints;
};

Result<Target> ParseUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("url '" + api::RedactUrl(url) + "': " + std::string(why));
  };
  std::string_view rest = url;
  if (rest.starts_with("https://")) return bad("https is not supported (http only)");
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    return bad("only http:// URLs are supported");
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (path.find_first_of("?#") != std::string_view::npos) return bad("no query or fragment allowed");
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (authority.find('@') != std::string_view::npos) return bad("no user information allowed");
  Target t;
  std::string_view port;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    t.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("expected :PORT after the IPv6 address");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else {
    const size_t colon = authority.find(':');
    t.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) return bad("empty port");
    }
  }
  if (t.host.empty()) return bad("no host");
  if (!port.empty()) {
    uint32_t p = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || p > 65535) return bad("the port must be a number 1..65535");
      p = p * 10 + static_cast<uint32_t>(c - '0');
    }
    if (p == 0 || p > 65535) return bad("the port must be a number 1..65535");
    t.port = static_cast<uint16_t>(p);
  }
  t.base_path = std::string(path);
  t.host_header = std::string(authority);
  return t;
}

Status Resolve(Target& t) {
  net::io_context ctx;
  tcp::resolver resolver(ctx);
  beast::error_code ec;
  t.endpoints = resolver.resolve(t.host, std::to_string(t.port), ec);
  if (ec || t.endpoints.empty()) {
    return Status::Unavailable("cannot resolve '" + t.host + "': " + (ec ? ec.message() : "no address"));
  }
  return Status::Ok();
}

// -------------------------------------------------------------------------------- connection

// One keep-alive connection with its read buffers; used by one request at a time.
struct Connection {
  explicit Connection(const net::any_io_executor& ex) : stream(ex) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;                    // parser input (bytes past a head)
  std::array<char, kReadBufferBytes> body_buf;  // body pieces as they are read
  bool used = false;                            // has carried a complete exchange
};

// A request's outcome: the record's measured fields, the reply text (for the next turn) and,
// when it failed, why.
struct Outcome {
  report::RequestRecord record;
  std::string reply;
  std::string error_kind;  // "" = success
  std::string error_message;
  std::string aborted_at;  // abandoned by the client on purpose: "sending", "waiting", "receiving"
};

bool IsEventStream(std::string_view content_type) {
  while (!content_type.empty() && content_type.front() == ' ') content_type.remove_prefix(1);
  constexpr std::string_view kSse = "text/event-stream";
  return content_type.size() >= kSse.size() && beast::iequals(content_type.substr(0, kSse.size()), kSse);
}

std::string Shorten(std::string_view s, size_t n = 200) {
  std::string out(s.substr(0, n));
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (s.size() > n) out += "...";
  return out;
}

// ------------------------------------------------------------------------------------ runner

class Runner {
 public:
  Runner(const LoadOptions& options, workload::Workload& workload, Target target)
      : options_(options), workload_(workload), target_(std::move(target)) {
    for (const auto& name : options_.instance_names) InstanceIndex(name);
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Open loop: checks that the workload can be paced (takes the first session to see whether
  // it carries arrival times).
  Status PrepareOpenLoop();
  LoadRun Run();

 private:
  struct Thread {
    net::io_context ctx{1};
    // Open loop: idle keep-alive connections. Touched only on this thread.
    std::vector<std::unique_ptr<Connection>> idle;
  };
  struct Claim {
    uint64_t index;
    Clock::time_point start;
  };
  // What a session's requests carry, fixed when the session is taken: its inference component
  // (ComponentFor) and tenant class (TenantFor), -1 = none.
  struct SessionTags {
    int32_t component = -1;
    int32_t tenant = -1;
  };

  net::awaitable<void> User(Thread& t);
  net::awaitable<void> Arrivals();
  net::awaitable<void> OpenSession(Thread& t, std::unique_ptr<workload::Session> session, SessionTags tags);
  // Runs a session's turns; false when sending has stopped. `own` is the user's connection
  // (closed loop) or null to use the thread's pool (open loop).
  net::awaitable<bool> RunSession(Thread& t, workload::Session& session, std::unique_ptr<Connection>* own,
                                  SessionTags tags);
  net::awaitable<Outcome> Send(std::unique_ptr<Connection>& conn, const workload::Request& request,
                               Clock::time_point start, const RequestPlan& plan, SessionTags tags);
  // Sleeps until `until`; false (early) when sending stops.
  net::awaitable<bool> SleepUntil(Clock::time_point until);

  std::optional<Claim> ClaimNext(SessionTags tags);
  bool SendingOpen();
  void Complete(uint64_t index, Outcome outcome);
  int32_t InstanceIndex(std::string_view name);
  // The workload's next session, with its tags.
  workload::SessionStart TakeSession(SessionTags* tags);
  SessionTags TagsFor(uint64_t session) const {
    return SessionTags{ComponentFor(options_, session), TenantFor(options_, session)};
  }
  std::optional<workload::Request> NextTurn(workload::Session& s, std::string_view reply);
  double ThinkSeconds(workload::Session& s);
  void DropSession(std::unique_ptr<workload::Session> s);
  void WorkerDone(std::exception_ptr e);
  void SpawnWorker(Thread& t, net::awaitable<void> work);

  const LoadOptions& options_;
  workload::Workload& workload_;
  const Target target_;
  Clock::time_point run_start_;
  Clock::time_point send_deadline_ = Clock::time_point::max();
  std::atomic<bool> stopping_{false};  // no more requests are sent

  std::mutex workload_mu_;                               // guards workload_ and every session's calls
  std::optional<workload::SessionStart> first_session_;  // open loop, taken by PrepareOpenLoop
  SessionTags first_session_tags_;
  uint64_t sessions_taken_ = 0;
  double mean_turns_ = 1;

  std::mutex records_mu_;  // guards the members up to first_error_
  std::vector<report::RequestRecord> records_;
  std::vector<bool> completed_;
  std::vector<bool> aborted_;
  std::vector<int32_t> components_;  // each record's component index (-1: none)
  std::map<std::string, uint64_t> errors_by_kind_;
  std::string first_error_;
  uint64_t aborted_counted_ = 0, aborted_warmup_ = 0;
  std::map<std::string, uint64_t> aborted_by_point_;
  std::atomic<uint64_t> sent_{0}, done_{0}, failed_{0};

  std::mutex names_mu_;  // guards names_ and name_index_
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> name_index_;

  std::atomic<int64_t> workers_{0};  // coroutines that may still send
  std::mutex done_mu_;
  std::condition_variable done_cv_;

  // Last: destroyed first, so that coroutine frames never outlive the members they use.
  std::vector<std::unique_ptr<Thread>> threads_;
};

Status Runner::PrepareOpenLoop() {
  std::lock_guard<std::mutex> lock(workload_mu_);
  mean_turns_ = std::max(workload_.mean_turns(), 1e-9);
  first_session_ = workload_.NextSession();
  first_session_tags_ = TagsFor(sessions_taken_++);
  if (first_session_->session && !first_session_->arrival_s && !(options_.rate_rps > 0)) {
    return Status::InvalidArgument("rate_rps: an open loop over a generated workload needs a rate above 0");
  }
  return Status::Ok();
}

workload::SessionStart Runner::TakeSession(SessionTags* tags) {
  std::lock_guard<std::mutex> lock(workload_mu_);
  *tags = TagsFor(sessions_taken_++);
  return workload_.NextSession();
}

std::optional<workload::Request> Runner::NextTurn(workload::Session& s, std::string_view reply) {
  std::lock_guard<std::mutex> lock(workload_mu_);
  return s.Next(reply);
}

double Runner::ThinkSeconds(workload::Session& s) {
  std::lock_guard<std::mutex> lock(workload_mu_);
  return s.think_s();
}

void Runner::DropSession(std::unique_ptr<workload::Session> s) {
  std::lock_guard<std::mutex> lock(workload_mu_);
  s.reset();
}

int32_t Runner::InstanceIndex(std::string_view name) {
  std::lock_guard<std::mutex> lock(names_mu_);
  auto it = name_index_.find(std::string(name));
  if (it != name_index_.end()) return it->second;
  const auto index = static_cast<int32_t>(names_.size());
  names_.emplace_back(name);
  name_index_.emplace(std::string(name), index);
  return index;
}

bool Runner::SendingOpen() {
  if (stopping_.load()) return false;
  if (Clock::now() >= send_deadline_ || (options_.requests && sent_.load() >= options_.requests)) {
    stopping_.store(true);
    return false;
  }
  return true;
}

std::optional<Runner::Claim> Runner::ClaimNext(SessionTags tags) {
  std::lock_guard<std::mutex> lock(records_mu_);
  if (!SendingOpen()) return std::nullopt;
  const auto now = Clock::now();
  report::RequestRecord r;
  r.start_s = Seconds(now - run_start_) / options_.time_scale;
  r.counted = records_.size() >= options_.warmup_requests;
  r.tenant = tags.tenant;
  records_.push_back(r);
  completed_.push_back(false);
  aborted_.push_back(false);
  components_.push_back(tags.component);
  sent_.store(records_.size());
  // The last allowed request stops the run at once, so that sleeping users need not wake to
  // find out.
  if (options_.requests && records_.size() >= options_.requests) stopping_.store(true);
  return Claim{records_.size() - 1, now};
}

void Runner::Complete(uint64_t index, Outcome o) {
  std::lock_guard<std::mutex> lock(records_mu_);
  report::RequestRecord& r = records_[index];
  if (!o.aborted_at.empty()) {
    aborted_[index] = true;
    completed_[index] = true;
    if (r.counted) {
      ++aborted_counted_;
      ++aborted_by_point_[o.aborted_at];
    } else {
      ++aborted_warmup_;
    }
    done_.fetch_add(1);
    return;
  }
  o.record.start_s = r.start_s;
  o.record.counted = r.counted;
  o.record.tenant = r.tenant;
  r = o.record;
  completed_[index] = true;
  if (r.error) {
    ++errors_by_kind_[o.error_kind];
    if (first_error_.empty()) first_error_ = o.error_message;
    failed_.fetch_add(1);
  }
  done_.fetch_add(1);
}

void Runner::WorkerDone(std::exception_ptr e) {
  if (e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("load generator: unexpected exception: {}", ex.what());
    }
  }
  if (workers_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_cv_.notify_all();
  }
}

void Runner::SpawnWorker(Thread& t, net::awaitable<void> work) {
  workers_.fetch_add(1);
  net::co_spawn(t.ctx, std::move(work), [this](std::exception_ptr e) { WorkerDone(e); });
}

net::awaitable<bool> Runner::SleepUntil(Clock::time_point until) {
  net::steady_timer timer(co_await net::this_coro::executor);
  while (!stopping_.load()) {
    const auto now = Clock::now();
    if (now >= until) co_return true;
    timer.expires_at(std::min(until, now + kPollSlice));
    co_await timer.async_wait(kTuple);
  }
  co_return false;
}

net::awaitable<void> Runner::User(Thread& t) {
  std::unique_ptr<Connection> conn;  // this user's keep-alive connection
  while (!stopping_.load()) {
    SessionTags tags;
    workload::SessionStart start = TakeSession(&tags);
    if (!start.session) {  // a finite workload ran out
      stopping_.store(true);
      break;
    }
    const bool more = co_await RunSession(t, *start.session, &conn, tags);
    DropSession(std::move(start.session));
    if (!more) break;
  }
}

net::awaitable<void> Runner::OpenSession(Thread& t, std::unique_ptr<workload::Session> session, SessionTags tags) {
  co_await RunSession(t, *session, nullptr, tags);
  DropSession(std::move(session));
}

net::awaitable<void> Runner::Arrivals() {
  Rng rng(options_.seed);
  // Sessions start at this rate (wall), so that requests arrive at rate_rps in model time.
  // Tenant classes together send rate_rps x the sum of their shares (LoadOptions::tenants).
  const double shares = options_.tenants.empty() ? 1.0 : workload::ShareSum(options_.tenants);
  const double session_rate = options_.rate_rps * shares / mean_turns_ / options_.time_scale;
  Clock::time_point next = run_start_;
  size_t spread = 0;
  for (;;) {
    workload::SessionStart s;
    SessionTags tags;
    if (first_session_) {
      s = std::move(*first_session_);
      first_session_.reset();
      tags = first_session_tags_;
    } else {
      s = TakeSession(&tags);
    }
    if (!s.session) {
      stopping_.store(true);
      break;
    }
    Clock::time_point at;
    if (s.arrival_s) {
      at = run_start_ + Wall(*s.arrival_s / options_.trace_speed * options_.time_scale);
    } else if (session_rate > 0) {
      next += Wall(-std::log1p(-rng.NextDouble()) / session_rate);
      at = next;
    } else {  // a trace that stops carrying times, with no rate to fall back on
      spdlog::warn("load generator: a session without an arrival time and no rate: stopping");
      DropSession(std::move(s.session));
      stopping_.store(true);
      break;
    }
    if (!co_await SleepUntil(at) || !SendingOpen()) {
      DropSession(std::move(s.session));
      break;
    }
    Thread& t = *threads_[spread++ % threads_.size()];
    SpawnWorker(t, OpenSession(t, std::move(s.session), tags));
  }
}

net::awaitable<bool> Runner::RunSession(Thread& t, workload::Session& session, std::unique_ptr<Connection>* own,
                                        SessionTags tags) {
  std::string reply;
  bool first = true;
  for (;;) {
    std::optional<workload::Request> request = NextTurn(session, reply);
    if (!request) co_return true;
    if (options_.api == ApiChoice::kNative) request->api = api::ApiKind::kNative;
    if (!first) {
      const double think = ThinkSeconds(session);
      if (think > 0 && !co_await SleepUntil(Clock::now() + Wall(think * options_.time_scale))) co_return false;
    }
    first = false;
    const std::optional<Claim> claim = ClaimNext(tags);
    if (!claim) co_return false;
    std::unique_ptr<Connection> pooled;
    if (!own && !t.idle.empty()) {
      pooled = std::move(t.idle.back());
      t.idle.pop_back();
    }
    std::unique_ptr<Connection>& conn = own ? *own : pooled;
    const RequestPlan plan = PlanRequest(options_, claim->index);
    Outcome o = co_await Send(conn, *request, claim->start, plan, tags);
    if (!own && conn && t.idle.size() < kMaxIdlePerThread) t.idle.push_back(std::move(conn));
    // A failed or abandoned turn's partial reply is not history: the next turn is built from "".
    reply = o.error_kind.empty() && o.aborted_at.empty() ? std::move(o.reply) : std::string();
    Complete(claim->index, std::move(o));
  }
}

net::awaitable<Outcome> Runner::Send(std::unique_ptr<Connection>& conn, const workload::Request& wr,
                                     Clock::time_point start, const RequestPlan& plan, SessionTags tags) {
  Outcome out;
  report::RequestRecord& rec = out.record;
  const double scale = options_.time_scale;
  const Clock::time_point deadline = start + Wall(options_.timeout_s);
  auto fail = [&](std::string kind, std::string message) {
    rec.error = true;
    rec.e2e_s = -1;
    out.error_kind = std::move(kind);
    out.error_message = std::move(message);
  };
  auto transport_kind = [](const beast::error_code& ec, std::string_view otherwise) {
    return std::string(ec == beast::error::timeout ? "timeout" : otherwise);
  };

  bhttp::request<bhttp::string_body> req{bhttp::verb::post, target_.base_path + std::string(workload::PathFor(wr.api)),
                                         11};
  req.set(bhttp::field::host, target_.host_header);
  req.set(bhttp::field::user_agent, "prefix-router-bench");
  req.set(bhttp::field::content_type, "application/json");
  if (wr.api == api::ApiKind::kNative && !wr.routing_group.empty()) req.set(api::kRoutingGroupHeader, wr.routing_group);
  // An inference component endpoint's model is the component: the default model unless set.
  std::string_view model = options_.default_model;
  if (tags.component >= 0) {
    const std::string& name = options_.inference_components[static_cast<size_t>(tags.component)];
    req.set(api::kInferenceComponentHeader, name);
    if (model.empty()) model = name;
  }
  if (tags.tenant >= 0) {
    const workload::TenantClass& c = options_.tenants[static_cast<size_t>(tags.tenant)];
    req.set(kPriorityHeader, std::to_string(c.priority));
    req.set(kFairnessHeader, c.name);
    if (c.ttft_objective_ms > 0) req.set(kTtftObjectiveHeader, std::to_string(c.ttft_objective_ms));
  }
  req.body() = workload::RenderBody(wr, plan.stream, model);
  req.keep_alive(true);
  req.prepare_payload();
  // Abandoned requests: the client closes the connection (destroying it) and walks away.
  auto abandon = [&](const char* where) {
    conn.reset();
    out.aborted_at = where;
  };
  // kSending: the bytes sent before closing, the whole head and a share of the body.
  std::string partial;
  if (plan.abort == AbortPoint::kSending) {
    std::ostringstream wire;
    wire << req;
    partial = std::move(wire).str();
    const size_t body_bytes = req.body().size();
    const size_t head_bytes = partial.size() - std::min(partial.size(), body_bytes);
    partial.resize(head_bytes + static_cast<size_t>(plan.abort_at * static_cast<double>(body_bytes)));
  }

  const auto executor = co_await net::this_coro::executor;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  for (int attempt = 0;; ++attempt) {
    bool reused = conn && conn->used;
    if (!conn || !conn->stream.socket().is_open()) {
      conn = std::make_unique<Connection>(executor);
      reused = false;
      conn->stream.expires_at(deadline);
      auto [cec, endpoint] = co_await conn->stream.async_connect(target_.endpoints, kTuple);
      if (cec) {
        conn.reset();
        fail(transport_kind(cec, "connect"), "connect to " + target_.host_header + ": " + cec.message());
        co_return out;
      }
      beast::error_code ignored;
      conn->stream.socket().set_option(tcp::no_delay(true), ignored);
    }
    conn->stream.expires_at(deadline);
    if (plan.abort == AbortPoint::kSending) {
      auto [pec, pn] = co_await net::async_write(conn->stream, net::buffer(partial), kTuple);
      if (!pec) {
        abandon("sending");
        co_return out;
      }
      conn.reset();
      if (reused && attempt == 0 && pec != beast::error::timeout) continue;
      fail(transport_kind(pec, "write"), "sending the request failed: " + pec.message());
      co_return out;
    }
    auto [wec, wn] = co_await bhttp::async_write(conn->stream, req, kTuple);
    if (wec) {
      conn.reset();
      // A kept connection the server closed while idle: once more on a new one.
      if (reused && attempt == 0 && wec != beast::error::timeout) continue;
      fail(transport_kind(wec, "write"), "sending the request failed: " + wec.message());
      co_return out;
    }
    parser.emplace();
    parser->body_limit(boost::none);
    parser->header_limit(kMaxHeaderBytes);
    // kWaiting: the head must come within the client's patience, or the client leaves.
    Clock::time_point head_by = deadline;
    if (plan.abort == AbortPoint::kWaiting) {
      head_by = std::min(deadline, Clock::now() + Wall(plan.abort_at * kAbortWaitMaxModelS * scale));
    }
    conn->stream.expires_at(head_by);
    auto [hec, hn] = co_await bhttp::async_read_header(conn->stream, conn->buffer, *parser, kTuple);
    if (hec && hec == beast::error::timeout && head_by < deadline) {
      abandon("waiting");
      co_return out;
    }
    if (hec) {
      const bool idle_close =
          hec == bhttp::error::end_of_stream || hec == net::error::eof || hec == net::error::connection_reset;
      conn.reset();
      if (reused && attempt == 0 && idle_close) continue;
      fail(transport_kind(hec, "read"), "no response: " + hec.message());
      co_return out;
    }
    break;
  }

  const auto& head = parser->get();
  const int status = head.result_int();
  int64_t header_cached = -1, header_prompt = -1;
  if (auto it = head.find(kTimingHeader); it != head.end()) {
    EngineTiming timing;
    if (ParseEngineTiming(View(it->value()), &timing)) {
      rec.engine_ttft_s = timing.ttft_s;
      rec.engine_queue_s = timing.queue_s;
    }
    header_cached = timing.cached_tokens;
    header_prompt = timing.prompt_tokens;
  }
  if (auto it = head.find(kInstanceHeader); it != head.end() && !it->value().empty()) {
    rec.instance = InstanceIndex(View(it->value()));
  }
  if (auto it = head.find(kDecisionHeader); it != head.end()) rec.overflow = IsOverflowDecision(View(it->value()));
  const bool ok_status = status >= 200 && status < 300;
  const bool sse = ok_status && IsEventStream(View(head[bhttp::field::content_type]));

  SseParser events;
  std::string body;  // a whole body, or the start of an error body
  bool too_large = false, done_seen = false, bad_event = false, error_event = false;
  std::string error_event_message;
  Usage usage;
  uint32_t content_chunks = 0;
  Clock::time_point now, first_content, last_content;
  auto on_event = [&](const SseEvent& e) {
    if (done_seen) return;  // nothing counts after [DONE]
    if (e.data == "[DONE]") {
      done_seen = true;
      return;
    }
    const ChunkInfo c = ParseStreamChunk(e.data, &out.reply, &usage);
    if (c.error || e.event == "error") {
      if (!error_event) error_event_message = c.error_message.empty() ? Shorten(e.data) : c.error_message;
      error_event = true;
      return;
    }
    if (!c.valid) {
      bad_event = true;
      return;
    }
    if (c.has_content) {
      if (content_chunks == 0) first_content = now;
      last_content = now;
      ++content_chunks;
    }
  };

  beast::error_code read_error;
  size_t body_bytes = 0;
  // kReceiving (and kWaiting when the head came first): the body reads before closing.
  uint32_t reads = 0;
  uint32_t abandon_after_reads = UINT32_MAX;
  if (plan.abort == AbortPoint::kReceiving) {
    abandon_after_reads = static_cast<uint32_t>(plan.abort_at * kAbortMaxReads);
  } else if (plan.abort == AbortPoint::kWaiting) {
    abandon_after_reads = 0;
  }
  while (!parser->is_done()) {
    if (reads++ >= abandon_after_reads) {
      abandon("receiving");
      co_return out;
    }
    auto& b = parser->get().body();
    b.data = conn->body_buf.data();
    b.size = conn->body_buf.size();
    conn->stream.expires_at(deadline);
    auto [rec_ec, rn] = co_await bhttp::async_read_some(conn->stream, conn->buffer, *parser, kTuple);
    now = Clock::now();
    const size_t got = conn->body_buf.size() - parser->get().body().size;
    body_bytes += got;
    if (got > 0) {
      const std::string_view piece(conn->body_buf.data(), got);
      if (sse) {
        events.Feed(piece, on_event);
      } else if (!ok_status) {
        body.append(piece.substr(0, kMaxErrorBodyBytes - std::min(kMaxErrorBodyBytes, body.size())));
      } else if (body.size() + got > kMaxBodyBytes) {
        too_large = true;
      } else {
        body.append(piece);
      }
    }
    if (rec_ec && rec_ec != bhttp::error::need_buffer) {
      read_error = rec_ec;
      break;
    }
  }
  const Clock::time_point end = Clock::now();

  if (read_error) {
    conn.reset();
    if (!ok_status) {
      fail("status_" + std::to_string(status), "HTTP " + std::to_string(status) + " (body broke off)");
    } else {
      fail(transport_kind(read_error, "read"),
           "the response broke off after " + std::to_string(body_bytes) + " body bytes: " + read_error.message());
    }
    co_return out;
  }
  if (!parser->get().keep_alive()) {
    conn.reset();
  } else {
    conn->used = true;
  }
  if (!ok_status) {
    fail("status_" + std::to_string(status), "HTTP " + std::to_string(status) + ": " + Shorten(body));
    rec.refused = status == 429;  // refused at admission (a pool's ceiling or its queue)
    co_return out;
  }

  const double e2e = Seconds(end - start) / scale;
  if (sse) {
    events.Finish(on_event);
    if (error_event) {
      fail("sse_error", "error event in the stream: " + error_event_message);
    } else if (bad_event || events.failed()) {
      fail("bad_response", "a stream event was not a JSON object");
    } else if (!done_seen) {
      fail("no_done", "the stream ended without data: [DONE]");
    }
    if (content_chunks > 0) rec.ttft_s = Seconds(first_content - start) / scale;
    if (content_chunks > 1) rec.itl_mean_s = Seconds(last_content - first_content) / scale / (content_chunks - 1);
  } else if (too_large) {
    fail("bad_response", "the response body is over " + std::to_string(kMaxBodyBytes) + " bytes");
  } else {
    const ChunkInfo c = ParseCompletionBody(body, &out.reply, &usage);
    if (c.error) {
      fail("error_body", "error in the response body: " + c.error_message);
    } else if (!c.valid) {
      fail("bad_response", "the response body is not a JSON completion: " + Shorten(body));
    }
    rec.ttft_s = e2e;  // nothing arrives before the whole response
    if (c.has_content) content_chunks = 1;
  }
  if (usage.present) {
    rec.prompt_tokens = usage.prompt_tokens;
    rec.output_tokens = usage.completion_tokens;
  } else {
    // No usage (the server ignores stream_options): the engine's header, else count chunks.
    if (header_prompt >= 0) rec.prompt_tokens = static_cast<uint32_t>(header_prompt);
    rec.output_tokens = sse ? content_chunks : 0;
  }
  // Cached tokens from usage, else from the emulator's header (which has them exactly when its
  // usage would: --enable-prompt-tokens-details), else not known: a default vLLM reports none,
  // and report::Summarize then shows the hit rate as n/a rather than 0%.
  if (usage.cached_present) {
    rec.cached_tokens = usage.cached_tokens;
  } else if (header_cached >= 0) {
    rec.cached_tokens = static_cast<uint32_t>(header_cached);
  }
  rec.cached_tokens_known = usage.cached_present || header_cached >= 0;
  if (!rec.error) rec.e2e_s = e2e;
  co_return out;
}

LoadRun Runner::Run() {
  const uint32_t n_threads = options_.threads ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  for (uint32_t i = 0; i < n_threads; ++i) threads_.push_back(std::make_unique<Thread>());
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
  for (auto& t : threads_) guards.push_back(net::make_work_guard(t->ctx));

  run_start_ = Clock::now();
  if (options_.duration_s > 0) send_deadline_ = run_start_ + Wall(options_.duration_s * options_.time_scale);
  if (options_.mode == Mode::kClosed) {
    for (uint32_t u = 0; u < options_.concurrency; ++u) {
      Thread& t = *threads_[u % threads_.size()];
      SpawnWorker(t, User(t));
    }
  } else {
    SpawnWorker(*threads_[0], Arrivals());
  }
  std::vector<std::thread> running;
  for (auto& t : threads_) running.emplace_back([ctx = &t->ctx] { ctx->run(); });

  // The controller: the duration limit, progress, and the bound on the whole run.
  auto next_progress = run_start_ + std::chrono::seconds(1);
  auto stopped_at = Clock::time_point::max();
  bool forced = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(done_mu_);
      done_cv_.wait_for(lock, kPollSlice, [&] { return workers_.load() == 0; });
    }
    if (workers_.load() == 0) break;
    const auto now = Clock::now();
    if (now >= send_deadline_) stopping_.store(true);
    if (stopping_.load() && stopped_at == Clock::time_point::max()) stopped_at = now;
    if (stopped_at != Clock::time_point::max() && now > stopped_at + Wall(options_.timeout_s) + kGrace) {
      spdlog::error("load generator: {} requests still in flight past their deadline; cutting the run short",
                    sent_.load() - done_.load());
      forced = true;
      break;
    }
    if (options_.progress && now >= next_progress) {
      const uint64_t sent = sent_.load(), done = done_.load();
      options_.progress(done, failed_.load(), sent - done);
      next_progress = now + std::chrono::seconds(1);
    }
  }
  stopping_.store(true);
  if (forced) {
    for (auto& t : threads_) t->ctx.stop();
  }
  guards.clear();
  for (auto& th : running) th.join();
  const auto finished = Clock::now();

  LoadRun run;
  {
    std::lock_guard<std::mutex> lock(records_mu_);
    for (size_t i = 0; i < records_.size(); ++i) {
      if (completed_[i]) continue;
      records_[i].error = true;
      records_[i].e2e_s = -1;
      ++errors_by_kind_["unfinished"];
      failed_.fetch_add(1);
      done_.fetch_add(1);
    }
    if (!options_.inference_components.empty()) {
      run.component_requests.assign(options_.inference_components.size(), 0);
      run.component_errors.assign(options_.inference_components.size(), 0);
      for (size_t i = 0; i < records_.size(); ++i) {
        if (aborted_[i] || !records_[i].counted || components_[i] < 0) continue;
        ++run.component_requests[static_cast<size_t>(components_[i])];
        if (records_[i].error) ++run.component_errors[static_cast<size_t>(components_[i])];
      }
    }
    if (aborted_counted_ + aborted_warmup_ == 0) {
      run.records = std::move(records_);
    } else {
      run.records.reserve(records_.size() - aborted_counted_ - aborted_warmup_);
      for (size_t i = 0; i < records_.size(); ++i) {
        if (!aborted_[i]) run.records.push_back(records_[i]);
      }
      records_.clear();
    }
    run.errors_by_kind = std::move(errors_by_kind_);
    run.first_error = std::move(first_error_);
    run.aborted = aborted_counted_;
    run.aborted_by_point = std::move(aborted_by_point_);
    run.aborted_warmup = aborted_warmup_;
  }
  {
    std::lock_guard<std::mutex> lock(names_mu_);
    run.instance_names = names_;
  }
  run.wall_s = Seconds(finished - run_start_);
  if (options_.progress) options_.progress(done_.load(), failed_.load(), 0);
  // A forced stop leaves coroutine frames in the contexts: destroy them before the members
  // they refer to.
  threads_.clear();
  return run;
}

// ---------------------------------------------------------------------------------- models

net::awaitable<Result<std::vector<std::string>>> FetchModelsOnce(const Target& target, double timeout_s);

// Writes into `out` (co_spawn's completion needs a default-constructible result type).
net::awaitable<void> FetchModels(const Target& target, double timeout_s,
                                 std::optional<Result<std::vector<std::string>>>& out) {
  out = co_await FetchModelsOnce(target, timeout_s);
}

net::awaitable<Result<std::vector<std::string>>> FetchModelsOnce(const Target& target, double timeout_s) {
  const auto deadline = Clock::now() + Wall(timeout_s);
  beast::tcp_stream stream(co_await net::this_coro::executor);
  stream.expires_at(deadline);
  auto [cec, ep] = co_await stream.async_connect(target.endpoints, kTuple);
  if (cec) co_return Status::Unavailable("connect to " + target.host_header + ": " + cec.message());
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target.base_path + "/v1/models", 11};
  req.set(bhttp::field::host, target.host_header);
  req.set(bhttp::field::user_agent, "prefix-router-bench");
  req.keep_alive(false);
  stream.expires_at(deadline);
  auto [wec, wn] = co_await bhttp::async_write(stream, req, kTuple);
  if (wec) co_return Status::Unavailable("GET /v1/models: " + wec.message());
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(4u << 20);
  auto [rec, rn] = co_await bhttp::async_read(stream, buffer, parser, kTuple);
  if (rec) co_return Status::Unavailable("GET /v1/models: " + rec.message());
  const auto& res = parser.get();
  if (res.result_int() != 200) {
    co_return Status::Unavailable("GET /v1/models answered " + std::to_string(res.result_int()));
  }
  boost::json::error_code ec;
  boost::json::value doc = boost::json::parse(res.body(), ec);
  const boost::json::value* data = !ec && doc.is_object() ? doc.as_object().if_contains("data") : nullptr;
  if (!data || !data->is_array()) co_return Status::Unavailable("GET /v1/models: not an OpenAI model list");
  std::vector<std::string> names;
  for (const auto& m : data->as_array()) {
    if (!m.is_object()) continue;
    if (const auto* id = m.as_object().if_contains("id"); id && id->is_string()) {
      names.emplace_back(id->as_string());
    }
  }
  co_return names;
}

}  // namespace

RequestPlan PlanRequest(const LoadOptions& options, uint64_t index) {
  // One generator per request, from the seed and the index (an odd multiplier spreads nearby
  // indexes), drawing the same four numbers whatever the options.
  Rng rng(options.seed ^ (0xA0761D6478BD642FULL * (index + 1)));
  const double stream_draw = rng.NextDouble();
  const double abort_draw = rng.NextDouble();
  const double where_draw = rng.NextDouble();
  const double at_draw = rng.NextDouble();
  RequestPlan plan;
  plan.stream = options.stream_fraction >= 0 ? stream_draw < options.stream_fraction : options.stream;
  if (abort_draw < options.abort_fraction) {
    static constexpr AbortPoint kPoints[] = {AbortPoint::kSending, AbortPoint::kWaiting, AbortPoint::kReceiving};
    plan.abort = kPoints[std::min(2, static_cast<int>(where_draw * 3))];
    plan.abort_at = at_draw;
  }
  return plan;
}

int32_t TenantFor(const LoadOptions& options, uint64_t session) {
  if (options.tenants.empty()) return -1;
  // Another multiplier again: independent of components and plans.
  Rng rng(options.seed ^ (0xD1B54A32D192ED03ULL * (session + 1)));
  return workload::PickTenantClass(options.tenants, rng.NextDouble());
}

int32_t ComponentFor(const LoadOptions& options, uint64_t session) {
  if (options.inference_components.empty()) return -1;
  // A multiplier other than PlanRequest's, so that components and plans are independent.
  Rng rng(options.seed ^ (0x9E3779B97F4A7C15ULL * (session + 1)));
  return static_cast<int32_t>(rng.Uniform(static_cast<uint32_t>(options.inference_components.size())));
}

Result<LoadRun> RunLoad(const LoadOptions& options, workload::Workload& workload) {
  auto target = ParseUrl(options.url);
  if (!target.ok()) return target.status();
  auto invalid = [](std::string m) { return Status::InvalidArgument(std::move(m)); };
  if (options.requests == 0 && !(options.duration_s > 0)) {
    return invalid("set requests or duration_s (at least one stops the run)");
  }
  if (!(options.duration_s >= 0) || !std::isfinite(options.duration_s)) return invalid("duration_s: must be >= 0");
  if (!(options.timeout_s > 0)) return invalid("timeout_s: must be > 0");
  if (!(options.time_scale > 0) || !std::isfinite(options.time_scale)) return invalid("time_scale: must be > 0");
  if (!(options.trace_speed > 0)) return invalid("trace_speed: must be > 0");
  if (!(options.rate_rps >= 0) || !std::isfinite(options.rate_rps)) return invalid("rate_rps: must be >= 0");
  if (options.mode == Mode::kClosed && options.concurrency == 0) return invalid("concurrency: must be at least 1");
  if (Status s = workload::ValidateTenantClasses(options.tenants); !s.ok()) return invalid("tenants: " + s.message());
  if (!(options.stream_fraction <= 1)) return invalid("stream_fraction: must be in [0, 1] (or < 0: unset)");
  if (!(options.abort_fraction >= 0 && options.abort_fraction <= 1))
    return invalid("abort_fraction: must be in [0, 1]");
  for (size_t i = 0; i < options.inference_components.size(); ++i) {
    const std::string& c = options.inference_components[i];
    if (Status s = api::ValidateInferenceComponentName(c); !s.ok())
      return invalid("inference_components: " + s.message());
    const auto before = options.inference_components.begin() + static_cast<std::ptrdiff_t>(i);
    if (std::find(options.inference_components.begin(), before, c) != before) {
      return invalid("inference_components: '" + c + "' is given twice");
    }
  }
  if (Status s = Resolve(*target); !s.ok()) return s;
  Runner runner(options, workload, std::move(*target));
  if (options.mode == Mode::kOpen) {
    if (Status s = runner.PrepareOpenLoop(); !s.ok()) return s;
  }
  return runner.Run();
}

Result<std::vector<std::string>> ListModels(const std::string& url, double timeout_s) {
  auto target = ParseUrl(url);
  if (!target.ok()) return target.status();
  if (Status s = Resolve(*target); !s.ok()) return s;
  net::io_context ctx;
  std::optional<Result<std::vector<std::string>>> result;
  net::co_spawn(ctx, FetchModels(*target, timeout_s, result), [&](std::exception_ptr e) {
    if (e) result = Status::Internal("GET /v1/models: unexpected exception");
  });
  ctx.run();
  if (!result) return Status::Internal("GET /v1/models: did not complete");
  return std::move(*result);
}

}  // namespace prefix_router::loadgen
