// tokenizer: engine (gateway/prompt_tokens.h): the prompt's token ids from POST /tokenize on a
// routable instance of the request's pool, before the routing decision.
//
// The instance asked rotates over the pool's routable instances (every instance of a pool
// serves the same model, so any one tokenizes it as the others would). The exchange uses the
// I/O thread's pooled keep-alive connections, like forwarded requests, and is bounded as a
// whole by timeouts.tokenize. Any failure (connect, timeout, a status other than 200, a
// malformed or oversized answer) routes the request without tokens (kv-aware then judges on
// cache-aware's view), is counted by instance and outcome, and is logged once per failing
// streak of that instance.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "gateway/gateway.h"
#include "gateway/log.h"
#include "gateway/prompt_tokens.h"

namespace prefix_router::gateway {
namespace {

namespace bhttp = http::bhttp;
using Clock = std::chrono::steady_clock;

// The most tokens taken from an answer (four times the longest context of current models;
// an image alone can be thousands of tokens for a few bytes of URL, so the request's size
// bounds nothing), and the answer's size that allows them: ids of up to 10 digits and a comma
// each, plus the other members.
constexpr size_t kMaxTokens = size_t{1} << 22;
constexpr size_t kMaxAnswerBytes = 11 * kMaxTokens + (size_t{64} << 10);

}  // namespace

net::awaitable<Result<std::string>> Gateway::PostToInstance(const UpstreamTarget& target, std::string_view path,
                                                            std::string_view body, size_t answer_limit,
                                                            std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto& pool = ConnectionPool::ForThisThread();
  for (int fresh = 0; fresh < 2; ++fresh) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) co_return Status::Unavailable("no answer within the timeout");
    auto [cec, lease] = co_await pool.Acquire(target, left, fresh > 0);
    if (cec) {
      co_return Status::Unavailable("connect to " + target.host_header +
                                    " failed: " + (lease.error.empty() ? cec.message() : lease.error));
    }
    UpstreamStream& stream = *lease.stream;
    bhttp::request<bhttp::span_body<const char>> req{bhttp::verb::post, target.base_path + std::string(path), 11};
    req.set(bhttp::field::host, target.host_header);
    req.set(bhttp::field::user_agent, "prefix-router-tokenize");
    req.set(bhttp::field::content_type, "application/json");
    req.set(bhttp::field::accept, "application/json");
    if (!target.authorization.empty()) target.authorization.SetHeaderOn(req, "Authorization");
    req.body() = boost::span<const char>(body.data(), body.size());
    req.keep_alive(true);
    req.prepare_payload();
    stream.tcp().expires_at(deadline);
    auto [wec, wn] = co_await stream.On([&](auto& s) { return bhttp::async_write(s, req, http::kTuple); });
    if (wec) {
      if (lease.reused && wec != beast::error::timeout) continue;  // an idle connection the instance closed
      co_return Status::Unavailable("sending POST " + std::string(path) + " failed: " + wec.message());
    }
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(answer_limit);
    auto [rec, rn] = co_await stream.On([&](auto& s) { return bhttp::async_read(s, buffer, parser, http::kTuple); });
    if (rec == beast::error::timeout) co_return Status::Unavailable("no answer within the timeout");
    if (rec == bhttp::error::body_limit) {
      co_return Status::ResourceExhausted("the answer is larger than " + std::to_string(answer_limit) + " bytes");
    }
    if (rec) {
      if (lease.reused && (rec == bhttp::error::end_of_stream || rec == net::error::connection_reset ||
                           rec == net::error::eof || rec == net::ssl::error::stream_truncated)) {
        continue;
      }
      co_return Status::Unavailable("reading the answer failed: " + rec.message());
    }
    const int status = parser.get().result_int();
    const bool keep = parser.get().keep_alive();
    std::string answer = parser.release().body();
    if (keep) pool.Release(std::move(lease));
    if (status != 200) {
      co_return Status::Unavailable("POST " + std::string(path) + " answered " + std::to_string(status));
    }
    co_return answer;
  }
  co_return Status::Unavailable("the instance closed the connection twice");
}

net::awaitable<std::vector<uint32_t>> Gateway::EngineTokens(const RoutingState& rs, const std::string& served_name,
                                                            api::ApiKind api_kind, std::string_view body) {
  Result<TokenizeQuery> query = TokenizeQueryFor(api_kind, body);
  if (!query.ok()) co_return std::vector<uint32_t>{};  // the engine answers the body's error
  if (query->has_tokens) co_return std::move(query->tokens);

  // The next routable instance of the pool, in rotation.
  const FleetSnapshot& fleet = *rs.fleet;
  const std::span<const uint32_t> eligible = fleet.Eligible(served_name);
  if (eligible.empty()) co_return std::vector<uint32_t>{};
  const uint64_t start = tokenize_rotation_.fetch_add(1, std::memory_order_relaxed);
  std::optional<uint32_t> chosen;
  for (size_t k = 0; k < eligible.size() && !chosen; ++k) {
    const uint32_t i = eligible[(start + k) % eligible.size()];
    if (fleet.state(i).routable()) chosen = i;
  }
  if (!chosen) co_return std::vector<uint32_t>{};
  const uint32_t i = *chosen;
  const std::shared_ptr<InstanceRuntime> rt = rs.instances[i];
  const std::string name = fleet.spec(i).name;

  const auto started = Clock::now();
  const auto timeout =
      std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(config_.timeouts.tokenize * 1000.0)));
  Result<std::string> answer = co_await PostToInstance(rt->target, "/tokenize", query->body, kMaxAnswerBytes, timeout);
  Result<std::vector<uint32_t>> tokens =
      answer.ok() ? ParseTokenizeAnswer(*answer, kMaxTokens) : Result<std::vector<uint32_t>>(answer.status());
  tokenize_seconds_->WithLabels({}).Observe(std::chrono::duration<double>(Clock::now() - started).count());
  tokenize_requests_->WithLabels({name, tokens.ok() ? "ok" : "failed"}).Inc();
  if (tokens.ok()) {
    if (rt->tokenize_failing.exchange(false, std::memory_order_relaxed)) {
      LogEvent(spdlog::level::info, "tokenize answers again", {{"instance", name}});
    }
    co_return std::move(*tokens);
  }
  if (!rt->tokenize_failing.exchange(true, std::memory_order_relaxed)) {
    LogEvent(spdlog::level::warn, "tokenize failed; requests route without prompt tokens until it answers",
             {{"instance", name}, {"error", tokens.status().message()}});
  }
  co_return std::vector<uint32_t>{};
}

}  // namespace prefix_router::gateway
