#include "testing/fake_upstream.h"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "api/error.h"
#include "base/json_text.h"

namespace prefix_router::testing {
namespace bhttp = http::bhttp;
namespace net = http::net;

std::string RecordedRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (http::beast::iequals(k, name)) return v;
  }
  return "";
}

FakeUpstream::FakeUpstream(std::string name) : name_(std::move(name)) {}
FakeUpstream::~FakeUpstream() { Stop(); }

Status FakeUpstream::Start(uint16_t port, std::shared_ptr<http::net::ssl::context> tls) {
  stopping_ = false;
  tls_ = tls != nullptr;
  http::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.io_threads = 1;
  o.server_name = "fake-upstream";
  o.tls = std::move(tls);
  server_ = std::make_unique<http::Server>(o, *this);
  Status s = server_->Start();
  if (s.ok()) port_ = server_->port();
  return s;
}

void FakeUpstream::Stop() {
  stopping_ = true;
  if (server_) {
    server_->Stop(std::chrono::milliseconds(0));
    server_.reset();
  }
}

void FakeUpstream::SetBehavior(Behavior b) {
  std::lock_guard<std::mutex> lock(mu_);
  behavior_ = std::move(b);
}

void FakeUpstream::SetModels(std::vector<std::string> ids) {
  std::string body = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t lt = ids[i].find('<');
    const std::string id = ids[i].substr(0, lt);
    if (i) body += ',';
    body += "{\"id\":\"";
    base::AppendJsonEscaped(body, id);
    body += "\",\"object\":\"model\",\"created\":0,\"owned_by\":\"vllm\",\"root\":\"";
    base::AppendJsonEscaped(body, lt == std::string::npos ? id : ids[i].substr(lt + 1));
    body += "\",\"parent\":";
    if (lt == std::string::npos) {
      body += "null";
    } else {
      body += "\"";
      base::AppendJsonEscaped(body, ids[i].substr(lt + 1));
      body += "\"";
    }
    body += "}";
  }
  body += "]}";
  SetModelsAnswer(200, std::move(body));
}

void FakeUpstream::SetModelsAnswer(int status, std::string body) {
  std::lock_guard<std::mutex> lock(mu_);
  models_ordinary_ = false;
  models_status_ = status;
  models_body_ = std::move(body);
}

void FakeUpstream::SetModelsOrdinary() {
  std::lock_guard<std::mutex> lock(mu_);
  models_ordinary_ = true;
}

void FakeUpstream::SetModelsDelay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  models_delay_ = delay;
}

void FakeUpstream::SetMetrics(std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  metrics_set_ = true;
  metrics_body_ = std::move(text);
}

std::vector<RecordedRequest> FakeUpstream::received() const {
  std::lock_guard<std::mutex> lock(mu_);
  return received_;
}

net::awaitable<void> FakeUpstream::Handle(http::Exchange& ex) {
  Behavior b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!models_ordinary_ && ex.request().method() == bhttp::verb::get && ex.request().target() == "/v1/models") {
      http::StringResponse res{static_cast<bhttp::status>(models_status_), 11};
      res.set(bhttp::field::content_type, "application/json");
      res.body() = models_body_;
      auto auth = ex.request().find(bhttp::field::authorization);
      models_authorization_ = auth == ex.request().end() ? std::string() : std::string(auth->value());
      const auto delay = models_delay_;
      lock.unlock();
      ++models_requests_;
      if (delay.count() > 0) {
        net::steady_timer wait(co_await net::this_coro::executor);
        wait.expires_after(delay);
        co_await wait.async_wait(http::kTuple);
      }
      co_await ex.Send(std::move(res));
      co_return;
    }
    if (metrics_set_ && ex.request().method() == bhttp::verb::get && ex.request().target() == "/metrics") {
      http::StringResponse res{bhttp::status::ok, 11};
      res.set(bhttp::field::content_type, "text/plain; version=0.0.4");
      res.body() = metrics_body_;
      lock.unlock();
      ++metrics_requests_;
      co_await ex.Send(std::move(res));
      co_return;
    }
    b = behavior_;
    RecordedRequest r;
    r.method = std::string(ex.request().method_string());
    r.target = std::string(ex.request().target());
    r.body = ex.request().body();
    for (const auto& f : ex.request()) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    received_.push_back(std::move(r));
  }
  ++requests_;
  ++in_progress_;
  auto executor = co_await net::this_coro::executor;
  net::steady_timer timer(executor);
  // Waits `d`, or until the client (the gateway) goes away: a closed connection is only seen by
  // watching it, since the first write after the peer closed usually succeeds. False when gone.
  auto sleep = [&](std::chrono::milliseconds d) -> net::awaitable<bool> {
    using namespace boost::asio::experimental::awaitable_operators;
    if (d.count() <= 0) co_return true;
    timer.expires_after(d);
    auto waited = co_await (timer.async_wait(http::kTuple) || ex.WaitClientGone());
    co_return waited.index() == 0;
  };
  auto gone = [&] {
    ++aborted_;
    --in_progress_;
  };

  if (b.fault == Behavior::Fault::kHang) {
    const auto until = std::chrono::steady_clock::now() + b.hang_for;
    while (!stopping_ && std::chrono::steady_clock::now() < until) {
      if (!co_await sleep(std::chrono::milliseconds(20))) {
        gone();
        co_return;
      }
    }
    ex.Abort();
    --in_progress_;
    co_return;
  }
  while (held_.load() && !stopping_) {  // HoldResponses: until the test releases it
    if (!co_await sleep(std::chrono::milliseconds(2))) {
      gone();
      co_return;
    }
  }
  if (!co_await sleep(b.head_delay)) {
    gone();
    co_return;
  }
  if (b.fault == Behavior::Fault::kCloseBeforeResponse) {
    ex.Abort();
    --in_progress_;
    co_return;
  }
  if (b.chunks.empty()) {
    http::StringResponse res{static_cast<bhttp::status>(b.status), 11};
    res.set(bhttp::field::content_type, "application/json");
    res.set("x-upstream", name_);
    std::string body = "{\"instance\":\"";
    base::AppendJsonEscaped(body, name_);
    body += "\",\"target\":\"";
    base::AppendJsonEscaped(body, ex.request().target());
    body += "\",\"body_bytes\":" + std::to_string(ex.request().body().size()) + "}";
    res.body() = std::move(body);
    if (!co_await ex.Send(std::move(res))) ++aborted_;
    --in_progress_;
    co_return;
  }
  bhttp::response_header<> head;
  head.result(static_cast<unsigned>(b.status));
  head.set(bhttp::field::content_type, b.sse ? "text/event-stream" : "application/octet-stream");
  head.set("x-upstream", name_);
  bool ok = co_await ex.SendHead(std::move(head));
  for (size_t k = 0; ok && k < b.chunks.size(); ++k) {
    if (b.fault == Behavior::Fault::kCloseMidStream && k == b.fault_after_chunks) {
      ex.Abort();
      --in_progress_;
      co_return;
    }
    if (!co_await sleep(b.chunk_delay)) {
      gone();
      co_return;
    }
    ok = co_await ex.SendBody(net::buffer(b.chunks[k]));
  }
  if (ok) ok = co_await ex.Finish();
  if (!ok) ++aborted_;
  --in_progress_;
}

}  // namespace prefix_router::testing
