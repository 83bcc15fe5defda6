// The gateway's discovery loop (gateway/discovery.h, docs/discovery.md): resolutions of
// `resolve: all` names and polls of /v1/models, applied as run-time changes (operations.cc).
//
// One coroutine on the first I/O thread runs every round, so rounds never overlap and what they
// learn is applied in order. A round waits for its polls (in parallel, each bounded by
// health.timeout) and for its resolutions (asynchronous), never blocking the thread.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "gateway/all_of.h"
#include "gateway/gateway.h"
#include "gateway/log.h"

namespace prefix_router::gateway {
namespace {

namespace bhttp = http::bhttp;
using Clock = GatewayClock;  // the loop's time (gateway/clock.h)

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

template <typename T, typename Format>
std::string JoinWith(const std::vector<T>& items, Format format) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ',';
    out += format(item);
  }
  return out;
}

std::string JoinNames(const std::vector<std::string>& names) {
  return JoinWith(names, [](const std::string& s) { return s; });
}

// a - b, both sorted.
template <typename T>
std::vector<T> Minus(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

template <typename T>
std::vector<T> SortedUnique(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

uint64_t Gateway::RequestDiscovery() {
  const uint64_t ticket = discovery_requested_.fetch_add(1) + 1;
  WakeDiscovery();
  return ticket;
}

void Gateway::WakeDiscovery() {
  if (!server_ || server_->thread_count() == 0) return;
  net::post(server_->context(0), [this] {
    if (discovery_timer_) discovery_timer_->cancel();
  });
}

net::awaitable<void> Gateway::DiscoveryLoop() {
  GatewayTimer timer(co_await net::this_coro::executor);
  discovery_timer_ = &timer;
  const auto resolve_every = Ms(config_.discovery.resolve_interval);
  const auto poll_every = Ms(config_.discovery.models_interval);
  auto next_resolve = Clock::now();
  auto next_poll = Clock::now();
  auto stopping = [this] { return discovery_stop_.load() || server_->stopping(); };
  while (!stopping()) {
    const uint64_t ticket = discovery_requested_.load();
    const bool full = ticket > discovery_done_.load();
    if (full || Clock::now() >= next_resolve) {
      co_await ResolveRound(/*apply=*/true);
      next_resolve = Clock::now() + resolve_every;
    }
    if (stopping()) break;
    if (full || Clock::now() >= next_poll) {
      co_await PollRound();
      next_poll = Clock::now() + poll_every;
    }
    first_discovery_done_.store(true);
    if (full) discovery_done_.store(ticket);
    if (discovery_requested_.load() > discovery_done_.load()) continue;
    timer.expires_at(std::min(next_resolve, next_poll));
    co_await timer.async_wait(http::kTuple);  // cancelled by RequestDiscovery and Stop
  }
  discovery_timer_ = nullptr;
  first_discovery_done_.store(true);
}

net::awaitable<void> Gateway::AwaitFirstDiscovery() {
  if (first_discovery_done_.load()) co_return;
  // Only the first moments after start come here; a short poll of the flag is simpler than a
  // wake-up list and costs nothing once the round has ended.
  // On the request path: real time, like the request's own deadlines.
  net::steady_timer timer(co_await net::this_coro::executor);
  const auto until = std::chrono::steady_clock::now() + Ms(config_.health.timeout);
  while (!first_discovery_done_.load() && !server_->stopping() && std::chrono::steady_clock::now() < until) {
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(http::kTuple);
  }
}

// ----------------------------------------------------------------------------------- DNS

void Gateway::KubernetesRound(bool apply) {
  if (!kubernetes_) return;
  KubernetesWatcher::Snapshot now = kubernetes_->snapshot();
  std::lock_guard lock(ops_mu_);
  if (now.version == kubernetes_version_) return;
  kubernetes_version_ = now.version;
  // The watcher changes its set only on the API server's word (a list or a watch event), so
  // an empty set here is the server's answer, not an outage.
  const auto format = [](const KubernetesEndpoint& e) { return e.pod + "=" + FormatAddress({e.address, e.port}); };
  const std::string added = JoinWith(Minus(now.endpoints, kubernetes_endpoints_), format);
  const std::string removed = JoinWith(Minus(kubernetes_endpoints_, now.endpoints), format);
  if (added.empty() && removed.empty()) return;
  kubernetes_endpoints_ = std::move(now.endpoints);
  const auto count = static_cast<uint64_t>(kubernetes_endpoints_.size());
  const std::string& name = config_.discovery.kubernetes.instance.name;
  if (!apply) {
    LogEvent(spdlog::level::info, "pods discovered", {{"instance", name}, {"pods", count}, {"added", added}});
    return;
  }
  auto changes = SwapLocked(EffectiveLocked(running_));
  if (!changes.ok()) {
    spdlog::error("discovery: applying the pods of {} failed: {}", name, changes.status().message());
    return;
  }
  LogEvent(spdlog::level::info, "pods discovered",
           {{"instance", name},
            {"pods", count},
            {"added", added},
            {"removed", removed},
            {"changes", JoinWith(*changes, [](const std::string& s) { return s; })}});
}

net::awaitable<void> Gateway::ResolveRound(bool apply) {
  KubernetesRound(apply);
  struct Job {
    std::string name;
    std::string host;
    uint16_t port = 0;
  };
  std::vector<Job> jobs;
  {
    std::lock_guard lock(ops_mu_);
    for (const InstanceConfig& t : running_.instances) {
      if (t.resolve == ResolveMode::kAll) jobs.push_back({t.name, t.host, t.port});
    }
  }
  for (const Job& job : jobs) {
    Result<std::vector<ResolvedAddress>> answer = co_await resolver_->Resolve(job.host, job.port);
    const std::string host = job.host + ":" + std::to_string(job.port);
    std::lock_guard lock(ops_mu_);
    // The template may have changed while the name was being resolved.
    auto t = std::find_if(running_.instances.begin(), running_.instances.end(),
                          [&](const InstanceConfig& ic) { return ic.name == job.name; });
    if (t == running_.instances.end() || t->resolve != ResolveMode::kAll || t->host != job.host ||
        t->port != job.port) {
      continue;
    }
    ResolvedName& known = resolved_[job.name];
    if (known.host != job.host || known.port != job.port) known = ResolvedName{job.host, job.port};
    std::vector<ResolvedAddress> got;
    if (answer.ok()) got = SortedUnique(std::move(*answer));
    if (got.size() > kMaxResolvedAddresses) {
      LogEvent(spdlog::level::warn, "resolution truncated",
               {{"instance", job.name},
                {"host", host},
                {"addresses", static_cast<uint64_t>(got.size())},
                {"kept", static_cast<uint64_t>(kMaxResolvedAddresses)}});
      got.resize(kMaxResolvedAddresses);
    }
    if (got.empty()) {
      // Never from some addresses to none: a DNS outage must not empty the fleet.
      if (!known.failing) {
        LogEvent(spdlog::level::warn, "resolution failed; the instance keeps its addresses",
                 {{"instance", job.name},
                  {"host", host},
                  {"error", answer.ok() ? std::string("no address") : answer.status().message()},
                  {"addresses", static_cast<uint64_t>(known.addresses.size())}});
      }
      known.failing = true;
      continue;
    }
    if (known.failing) {
      LogEvent(spdlog::level::info, "resolution works again", {{"instance", job.name}, {"host", host}});
    }
    known.failing = false;
    if (got == known.addresses) continue;
    const std::string added = JoinWith(Minus(got, known.addresses), FormatAddress);
    const std::string removed = JoinWith(Minus(known.addresses, got), FormatAddress);
    known.addresses = std::move(got);
    const auto count = static_cast<uint64_t>(known.addresses.size());
    if (!apply) {
      LogEvent(spdlog::level::info, "instances resolved",
               {{"instance", job.name}, {"host", host}, {"addresses", count}, {"added", added}});
      continue;
    }
    auto changes = SwapLocked(EffectiveLocked(running_));
    if (!changes.ok()) {
      spdlog::error("discovery: applying the addresses of {} failed: {}", job.name, changes.status().message());
      continue;
    }
    LogEvent(spdlog::level::info, "instances resolved",
             {{"instance", job.name},
              {"host", host},
              {"addresses", count},
              {"added", added},
              {"removed", removed},
              {"changes", JoinWith(*changes, [](const std::string& s) { return s; })}});
  }
}

// ------------------------------------------------------------------------------- /v1/models

net::awaitable<Result<std::string>> Gateway::GetFromInstance(UpstreamTarget target, std::string path, size_t body_limit,
                                                             const char* user_agent, const char* accept) {
  const auto timeout = Ms(config_.health.timeout);
  auto& pool = ConnectionPool::ForThisThread();
  auto [cec, lease] = co_await pool.Acquire(target, timeout, /*fresh=*/true);
  if (cec) co_return Status::Unavailable("connect to " + target.key + " failed: " + cec.message());
  bhttp::request<bhttp::empty_body> req{bhttp::verb::get, target.base_path + path, 11};
  req.set(bhttp::field::host, target.host_header);
  req.set(bhttp::field::user_agent, user_agent);
  req.set(bhttp::field::accept, accept);
  if (!target.authorization.empty()) target.authorization.SetHeaderOn(req, "Authorization");
  req.keep_alive(false);
  UpstreamStream& stream = *lease.stream;
  stream.tcp().expires_after(timeout);
  auto [wec, wn] = co_await stream.On([&](auto& s) { return bhttp::async_write(s, req, http::kTuple); });
  if (wec) co_return Status::Unavailable("sending GET " + path + " failed: " + wec.message());
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(body_limit);
  auto [rec, rn] = co_await stream.On([&](auto& s) { return bhttp::async_read(s, buffer, parser, http::kTuple); });
  if (rec == bhttp::error::body_limit) {
    co_return Status::ResourceExhausted("the " + path + " answer is larger than " + std::to_string(body_limit >> 20) +
                                        " MiB");
  }
  if (rec) co_return Status::Unavailable("reading the " + path + " answer failed: " + rec.message());
  const int status = parser.get().result_int();
  if (status != 200) {
    // Not found, not allowed, not implemented: the instance has no such route (a container
    // with only /invocations), as opposed to failing to answer it.
    const bool no_route = status == 404 || status == 405 || status == 501;
    std::string message = "GET " + path + " answered " + std::to_string(status);
    co_return no_route ? Status::NotFound(std::move(message)) : Status::Unavailable(std::move(message));
  }
  co_return parser.release().body();
}

net::awaitable<Result<ModelList>> Gateway::PollModels(UpstreamTarget target) {
  Result<std::string> body = co_await GetFromInstance(std::move(target), "/v1/models", kMaxModelListBytes,
                                                      "prefix-router-discovery", "application/json");
  if (!body.ok()) co_return body.status();
  co_return ParseModelList(*body);
}

net::awaitable<void> Gateway::PollRound() {
  struct Poll {
    std::string name;
    std::string url;
    UpstreamTarget target;
    Result<ModelList> result = Status::Internal("not polled");
  };
  auto polls = std::make_shared<std::vector<Poll>>();
  {
    auto rs = routing_.load();
    for (uint32_t i = 0; i < rs->fleet->size(); ++i) {
      const InstanceSpec& spec = rs->fleet->spec(i);
      if (rs->discovery[i].polled) polls->push_back({spec.name, spec.url, rs->instances[i]->target});
    }
  }
  if (polls->empty()) co_return;
  const auto poll = [this, polls](size_t k) -> net::awaitable<void> {
    (*polls)[k].result = co_await PollModels((*polls)[k].target);
  };
  co_await AllOf(polls->size(), poll);

  std::lock_guard lock(ops_mu_);
  auto rs = routing_.load();
  bool changed = false;
  for (const Poll& p : *polls) {
    auto index = rs->fleet->Find(p.name);
    if (!index || rs->fleet->spec(*index).url != p.url) continue;  // removed or moved meanwhile
    DiscoveredModels& known = discovered_[p.name];
    if (known.url != p.url) known = DiscoveredModels{p.url};
    const InstanceSpec& spec = rs->fleet->spec(*index);
    const auto& serving = spec.serves;
    // An instance left to the default (not listed yet, and not asked for by name) that
    // answers, but not with a usable list, has no /v1/models to follow (a SageMaker
    // /invocations container): it keeps serving what it would without discovery.
    const bool every_name = serving.empty() && !spec.serves_only_listed;
    const bool lenient = !known.names && !spec.serves_only_listed;
    Status error = p.result.ok() ? Status::Ok() : p.result.status();
    if (lenient && p.result.ok() && p.result->names.empty()) {
      error = Status::InvalidArgument("the /v1/models answer lists no valid id");
    }
    const bool no_list =
        !error.ok() && (error.code() == StatusCode::kNotFound || error.code() == StatusCode::kInvalidArgument);
    if (!error.ok()) {
      const FailingState now = lenient && no_list ? FailingState::kNoList : FailingState::kFailing;
      if (known.failing != now) {  // once per streak, not at every poll
        if (now == FailingState::kNoList) {
          LogEvent(
              spdlog::level::warn,
              every_name ? "no usable /v1/models; the instance serves every name"
                         : "no usable /v1/models; the instance serves its configured names",
              {{"instance", p.name}, {"error", error.message()}, {"names", static_cast<uint64_t>(serving.size())}});
        } else {
          LogEvent(spdlog::level::warn, "model discovery failed; the instance keeps its served names",
                   {{"instance", p.name},
                    {"error", error.message()},
                    {"names", static_cast<uint64_t>(serving.size())},
                    {"every_name", every_name ? "yes" : "no"}});
        }
      }
      known.failing = now;
      continue;
    }
    if (known.failing != FailingState::kNo) {
      LogEvent(spdlog::level::info, "model discovery works again", {{"instance", p.name}});
    }
    known.failing = FailingState::kNo;
    const ModelList& list = *p.result;
    known.names = list.names;
    known.entries = list.entries;
    const std::vector<std::string> was = SortedUnique(serving);
    const auto& had = rs->discovery[*index].entries;
    // A first list replaces "every name"; changed entries (max_model_len, a new `created`) are
    // what the gateway's /v1/models shows.
    if (was == list.names && spec.serves_only_listed && had && *had == *list.entries) continue;
    changed = true;
    if (was == list.names && spec.serves_only_listed) continue;
    LogEvent(spdlog::level::info, "served names discovered",
             {{"instance", p.name},
              {"added", JoinNames(Minus(list.names, was))},
              {"removed", JoinNames(Minus(was, list.names))},
              {"names", static_cast<uint64_t>(list.names.size())},
              {"invalid_ids", static_cast<uint64_t>(list.invalid)},
              {"truncated", list.truncated ? "yes" : "no"}});
  }
  if (!changed) co_return;
  if (auto changes = SwapLocked(EffectiveLocked(running_)); !changes.ok()) {
    spdlog::error("discovery: applying discovered served names failed: {}", changes.status().message());
  }
}

}  // namespace prefix_router::gateway
