#include "engine/engine_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <ctime>
#include <deque>

#include "api/error.h"
#include "api/native_request.h"
#include "base/json_text.h"
#include "engine_model/engine_request.h"
#include "engine_model/tokenizer.h"

namespace prefix_router::engine {

using engine_model::CompletionBody;
using engine_model::EngineHttpRequest;
using engine_model::ParseEngineRequest;
using engine_model::ParseTokenizeRequest;
using engine_model::PromptTokens;
using engine_model::RequestShape;
using engine_model::StreamChunk;
using engine_model::StreamEnd;
using engine_model::TokenizeResponseBody;
using engine_model::Usage;
using engine_model::VllmErrorBody;

namespace {

namespace bhttp = http::bhttp;
using namespace boost::asio::experimental::awaitable_operators;
using engine_model::EventKind;
using engine_model::RequestEvent;

// Below this a scaled step is not slept: the loop only yields so that handlers can run.
constexpr double kMinSleepSeconds = 20e-6;

http::StringResponse JsonResponse(int status, std::string body) {
  http::StringResponse res{static_cast<bhttp::status>(status), 11};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

// `cached=` only when the engine reports cached tokens (EngineOptions::enable_prompt_tokens_details).
std::string TimingHeader(double queue, double ttft, const Usage& usage) {
  if (!usage.prompt_tokens_details) {
    return fmt::format("queue={:.6f}; ttft={:.6f}; prompt={}", queue, ttft, usage.prompt_tokens);
  }
  return fmt::format("queue={:.6f}; ttft={:.6f}; cached={}; prompt={}", queue, ttft, usage.cached_tokens,
                     usage.prompt_tokens);
}

}  // namespace

// A request's mailbox: the loop appends events and cancels the timer to wake the handler. A
// streaming handler is woken for every token; a non-streaming one only when its request has
// finished (it has nothing to write before), which saves a coroutine wake-up and a race with
// the client-gone watch per generated token.
struct EngineServer::Pending {
  Pending(net::any_io_executor ex, bool stream)
      : notify(ex, net::steady_timer::time_point::max()), wake_each_token(stream) {}
  std::deque<RequestEvent> events;
  net::steady_timer notify;
  bool wake_each_token;
};

Result<std::unique_ptr<EngineServer>> EngineServer::Create(EngineOptions o) {
  if (!(o.time_scale > 0) || o.time_scale > 1000) {
    return Status::InvalidArgument("--time-scale: must be in (0, 1000]");
  }
  if (o.stream_interval < 1) return Status::InvalidArgument("--stream-interval: must be >= 1");
  auto profile = engine_model::FindProfile(o.profile);
  if (!profile.ok()) return profile.status();
  auto& c = profile->config;
  if (o.capacity_blocks) c.capacity_blocks = o.capacity_blocks;
  if (o.block_size) c.block_size = o.block_size;
  if (o.max_num_seqs) c.max_num_seqs = o.max_num_seqs;
  if (o.max_num_batched_tokens) c.max_num_batched_tokens = o.max_num_batched_tokens;
  if (Status s = c.Validate(); !s.ok()) return s;
  if (o.model.empty()) return Status::InvalidArgument("--model: must not be empty");
  for (size_t i = 0; i < o.inference_components.size(); ++i) {
    const std::string& c = o.inference_components[i];
    if (Status s = api::ValidateInferenceComponentName(c); !s.ok()) {
      return Status::InvalidArgument("--inference-component: " + s.message());
    }
    const auto first = o.inference_components.begin();
    if (c == o.model || std::find(o.adapters.begin(), o.adapters.end(), c) != o.adapters.end() ||
        std::find(first, first + static_cast<std::ptrdiff_t>(i), c) != first + static_cast<std::ptrdiff_t>(i)) {
      return Status::InvalidArgument("--inference-component '" + c +
                                     "': already served (as the model, an adapter or a component given before)");
    }
  }
  std::unique_ptr<KvEventPublisher> publisher;
  if (!o.kv_events.endpoint.empty()) {
    auto p = KvEventPublisher::Create(o.kv_events);
    if (!p.ok()) return p.status();
    publisher = std::move(*p);
  } else if (Status s = o.kv_events.Validate(); !s.ok()) {
    return s;
  }
  return std::unique_ptr<EngineServer>(new EngineServer(std::move(o), std::move(*profile), std::move(publisher)));
}

EngineServer::EngineServer(EngineOptions options, engine_model::Profile profile,
                           std::unique_ptr<KvEventPublisher> kv_publisher)
    : options_(std::move(options)),
      profile_(std::move(profile)),
      kv_publisher_(std::move(kv_publisher)),
      scheduler_(profile_.config, kv_publisher_.get()),
      running_(registry_.AddGauge("vllm:num_requests_running", "Requests in the running batch", {"model_name"})),
      waiting_(registry_.AddGauge("vllm:num_requests_waiting", "Requests waiting to be admitted", {"model_name"})),
      kv_usage_(registry_.AddGauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0 to 1)",
                                   {"model_name"})),
      cache_queries_(registry_.AddCounter("vllm:prefix_cache_queries_total",
                                          "Prompt tokens looked up in the prefix cache", {"model_name"})),
      cache_hits_(registry_.AddCounter("vllm:prefix_cache_hits_total", "Prompt tokens served from the prefix cache",
                                       {"model_name"})),
      prompt_tokens_(registry_.AddCounter("vllm:prompt_tokens_total", "Prompt tokens processed", {"model_name"})),
      generation_tokens_(registry_.AddCounter("vllm:generation_tokens_total", "Tokens generated", {"model_name"})),
      preemptions_(registry_.AddCounter("vllm:num_preemptions_total", "Preempted requests", {"model_name"})),
      successes_(registry_.AddCounter("vllm:request_success_total", "Requests that finished",
                                      {"model_name", "finished_reason"})),
      ttft_(registry_.AddHistogram("vllm:time_to_first_token_seconds",
                                   "Modelled time to first token, per-request overhead included", {"model_name"},
                                   {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                                    7.5, 10.0, 20.0, 40.0, 80.0})),
      queue_time_(registry_.AddHistogram("vllm:request_queue_time_seconds", "Modelled time from arrival to admission",
                                         {"model_name"}, metrics::Histogram::LatencyBuckets())) {
  registry_.AddCollector([this] {
    const std::string& m = options_.model;
    running_.WithLabels({m}).Set(static_cast<double>(scheduler_.num_running()));
    waiting_.WithLabels({m}).Set(static_cast<double>(scheduler_.num_waiting()));
    kv_usage_.WithLabels({m}).Set(scheduler_.kv_usage());
    const auto stats = scheduler_.kv_cache().stats();
    auto& q = cache_queries_.WithLabels({m});
    if (stats.query_tokens > q.Value()) q.Inc(stats.query_tokens - q.Value());
    auto& h = cache_hits_.WithLabels({m});
    if (stats.hit_tokens > h.Value()) h.Inc(stats.hit_tokens - h.Value());
    auto& p = preemptions_.WithLabels({m});
    if (scheduler_.num_preemptions() > p.Value()) p.Inc(scheduler_.num_preemptions() - p.Value());
  });
  http::ServerOptions so;
  so.host = options_.host;
  so.port = options_.port;
  so.io_threads = 1;  // handlers and the engine loop share one thread: no locks
  so.max_body_bytes = options_.max_body_bytes;
  so.server_name = "prefix-router-engine";
  server_ = std::make_unique<http::Server>(so, *this);
}

EngineServer::~EngineServer() { Stop(); }

double EngineServer::WallModelNow() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count() / options_.time_scale;
}

Status EngineServer::Start() {
  started_ = std::chrono::steady_clock::now();
  if (Status s = server_->Start(); !s.ok()) return s;
  wake_ = std::make_unique<net::steady_timer>(server_->context(0), net::steady_timer::time_point::max());
  net::co_spawn(server_->context(0), Loop(), net::detached);
  std::string components;
  for (const auto& c : options_.inference_components)
    components += (components.empty() ? ", inference components " : ", ") + c;
  spdlog::info("engine emulator on {}:{}: profile {}, model {}, {} KV blocks of {} tokens, time scale {}{}{}",
               options_.host, server_->port(), profile_.name, options_.model, profile_.config.capacity_blocks,
               profile_.config.block_size, options_.time_scale,
               options_.enable_prompt_tokens_details ? ", prompt tokens details on" : "", components);
  if (kv_publisher_) {
    spdlog::info("engine emulator: KV events on {} (topic \"{}\", {} encoding){}{}", kv_publisher_->endpoint(),
                 options_.kv_events.topic, api::KvEventEncodingName(options_.kv_events.encoding),
                 kv_publisher_->replay_endpoint().empty() ? "" : ", replay on ", kv_publisher_->replay_endpoint());
  }
  return Status::Ok();
}

void EngineServer::Stop() {
  if (!server_ || server_->stopping()) return;
  if (wake_) {
    net::post(server_->context(0), [this] {
      stopping_ = true;
      wake_->cancel();
      for (auto& [id, p] : pending_) p->notify.cancel();
    });
  }
  server_->Stop(std::chrono::milliseconds(0));
}

void EngineServer::Wake() {
  if (wake_) wake_->cancel();
}

net::awaitable<void> EngineServer::Loop() {
  auto executor = co_await net::this_coro::executor;
  net::steady_timer step_timer(executor);
  std::vector<RequestEvent> events;
  while (!stopping_) {
    if (!scheduler_.HasWork()) {
      wake_->expires_at(net::steady_timer::time_point::max());
      co_await wake_->async_wait(http::kTuple);
      continue;
    }
    const engine_model::StepResult& r = scheduler_.Step(virtual_now_);
    if (r.duration <= 0) {  // nothing could be scheduled: wait for a change
      wake_->expires_at(net::steady_timer::time_point::max());
      co_await wake_->async_wait(http::kTuple);
      continue;
    }
    events.assign(r.events.begin(), r.events.end());
    virtual_now_ += r.duration;
    const double wall = r.duration * options_.time_scale;
    if (wall >= kMinSleepSeconds) {
      step_timer.expires_after(
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(wall)));
      co_await step_timer.async_wait(http::kTuple);
    } else {
      co_await net::post(executor, net::use_awaitable);
    }
    // The step's KV events go out when its modelled time has passed, as one batch.
    if (kv_publisher_) kv_publisher_->Flush();
    for (const RequestEvent& e : events) {
      auto it = pending_.find(e.request_id);
      if (it == pending_.end()) continue;
      Pending& p = *it->second;
      if (e.kind == EventKind::kFirstToken) {
        // Observed when the first token exists, whether or not its handler wakes for it.
        if (!ttft_child_) ttft_child_ = &ttft_.WithLabels({options_.model});
        if (!queue_time_child_) queue_time_child_ = &queue_time_.WithLabels({options_.model});
        ttft_child_->Observe(e.ttft + profile_.config.cost.request_overhead);
        queue_time_child_->Observe(e.queue_wait);
      }
      p.events.push_back(e);
      if (p.wake_each_token || e.kind == EventKind::kFinished) p.notify.cancel();
    }
  }
}

net::awaitable<void> EngineServer::Handle(http::Exchange& ex) {
  const auto& req = ex.request();
  std::string_view target(req.target().data(), req.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  if (req.method() == bhttp::verb::post &&
      (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/invocations")) {
    co_await HandleGenerate(ex, path);
  } else if (req.method() == bhttp::verb::post && path == "/tokenize") {
    co_await HandleTokenize(ex);
  } else if (req.method() == bhttp::verb::get && path == "/v1/models") {
    co_await HandleModels(ex);
  } else if (req.method() == bhttp::verb::get && (path == "/health" || path == "/ping")) {
    co_await ex.Send(JsonResponse(200, "{}"));
  } else if (req.method() == bhttp::verb::get && path == "/metrics") {
    http::StringResponse res{bhttp::status::ok, 11};
    res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    res.body() = registry_.Render();
    co_await ex.Send(std::move(res));
  } else {
    co_await ex.Send(JsonResponse(404, VllmErrorBody(404, "NotFoundError", "Not Found")));
  }
}

Result<std::string> EngineServer::ServedName(const http::Request& req, std::string_view model) const {
  const auto& components = options_.inference_components;
  if (auto it = req.find(api::kInferenceComponentHeader); it != req.end() && !it->value().empty()) {
    const std::string_view name(it->value().data(), it->value().size());
    if (std::find(components.begin(), components.end(), name) == components.end()) {
      return Status::NotFound("The inference component `" + std::string(name) + "` does not exist.");
    }
    return std::string(name);
  }
  if (model.empty() || model == options_.model) return options_.model;
  if (std::find(options_.adapters.begin(), options_.adapters.end(), model) == options_.adapters.end() &&
      std::find(components.begin(), components.end(), model) == components.end()) {
    return Status::NotFound("The model `" + std::string(model) + "` does not exist.");
  }
  return std::string(model);
}

net::awaitable<void> EngineServer::HandleModels(http::Exchange& ex) {
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  auto quote = [](const std::string& s) {
    std::string out = "\"";
    base::AppendJsonEscaped(out, s);
    return out + "\"";
  };
  auto entry = [&](const std::string& id, const std::string& parent) {
    return fmt::format(
        R"({{"id":{},"object":"model","created":{},"owned_by":"vllm","root":{},"parent":{},"max_model_len":{}}})",
        quote(id), created, quote(id), parent.empty() ? "null" : quote(parent), profile_.config.max_model_len);
  };
  std::string body = "{\"object\":\"list\",\"data\":[" + entry(options_.model, "");
  for (const auto& a : options_.adapters) body += "," + entry(a, options_.model);
  // A component is a model of its own (its own container on the service), not an adapter.
  for (const auto& c : options_.inference_components) body += "," + entry(c, "");
  body += "]}";
  co_await ex.Send(JsonResponse(200, std::move(body)));
}

net::awaitable<void> EngineServer::HandleTokenize(http::Exchange& ex) {
  auto parsed = ParseTokenizeRequest(ex.request().body());
  if (!parsed.ok()) {
    co_await ex.Send(JsonResponse(400, VllmErrorBody(400, "BadRequestError", parsed.status().message())));
    co_return;
  }
  if (auto served = ServedName(ex.request(), parsed->model); !served.ok()) {
    co_await ex.Send(JsonResponse(404, VllmErrorBody(404, "NotFoundError", served.status().message())));
    co_return;
  }
  co_await ex.Send(JsonResponse(200, TokenizeResponseBody(parsed->tokens, profile_.config.max_model_len)));
}

net::awaitable<void> EngineServer::HandleGenerate(http::Exchange& ex, std::string_view path) {
  auto parsed = ParseEngineRequest(path, ex.request().body());
  if (!parsed.ok()) {
    co_await ex.Send(JsonResponse(400, VllmErrorBody(400, "BadRequestError", parsed.status().message())));
    co_return;
  }
  EngineHttpRequest& r = *parsed;
  auto served = ServedName(ex.request(), r.model);
  if (!served.ok()) {
    co_await ex.Send(JsonResponse(404, VllmErrorBody(404, "NotFoundError", served.status().message())));
    co_return;
  }
  r.model = std::move(*served);
  // Adapters and components keep KV blocks of their own (the scheduler keys blocks by it).
  const std::string adapter = r.model == options_.model ? std::string() : r.model;

  engine_model::EngineRequest er;
  er.id = next_id_++;
  er.prompt = PromptTokens(r);
  er.adapter = adapter;
  er.max_tokens = r.max_tokens;
  er.output_seed = engine_model::OutputSeed(er.prompt);
  const uint32_t prompt_tokens = static_cast<uint32_t>(er.prompt.size());
  const uint64_t id = er.id;
  const uint64_t seed = er.output_seed;  // selects the generated text (before er is moved)
  auto executor = co_await net::this_coro::executor;

  // The per-request overhead outside the engine (API server, tokenization, network) passes
  // before the request reaches the scheduler.
  const double overhead = profile_.config.cost.request_overhead;
  if (overhead * options_.time_scale >= kMinSleepSeconds) {
    net::steady_timer t(executor, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(overhead * options_.time_scale)));
    co_await t.async_wait(http::kTuple);
  }
  if (stopping_) co_return;
  if (!scheduler_.HasWork()) virtual_now_ = std::max(virtual_now_, WallModelNow());
  if (Status s = scheduler_.Submit(std::move(er), virtual_now_); !s.ok()) {
    co_await ex.Send(JsonResponse(400, VllmErrorBody(400, "BadRequestError", s.message())));
    co_return;
  }
  auto pending = std::make_shared<Pending>(executor, r.stream);
  pending_[id] = pending;
  Wake();

  const std::string response_id = (r.shape == RequestShape::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(id);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  Usage usage;
  usage.prompt_tokens = prompt_tokens;
  usage.prompt_tokens_details = options_.enable_prompt_tokens_details;
  std::string text;         // non-streaming: the whole output
  std::string pending_out;  // streaming: events not yet written
  std::string unsent_text;  // streaming: generated text not yet in an event
  uint32_t unsent_tokens = 0;
  bool finished = false;
  bool client_gone = false;
  bool head_sent = false;
  double queue = 0, ttft = 0;
  while (!finished && !client_gone && !stopping_) {
    if (pending->events.empty()) {
      pending->notify.expires_at(net::steady_timer::time_point::max());
      auto woke = co_await (pending->notify.async_wait(http::kTuple) || ex.WaitClientGone());
      if (woke.index() == 1) client_gone = true;
      continue;
    }
    pending_out.clear();
    while (!pending->events.empty()) {
      const RequestEvent e = pending->events.front();
      pending->events.pop_front();
      if (e.kind == EventKind::kFirstToken || e.kind == EventKind::kToken) {
        if (e.kind == EventKind::kFirstToken) {
          usage.cached_tokens = e.cached_tokens;
          queue = e.queue_wait;
          ttft = e.ttft + overhead;
        }
        ++usage.completion_tokens;
        if (r.stream) {
          // Streamed tokens go out in chunks of stream_interval tokens; the first one alone.
          engine_model::AppendGeneratedPiece(seed, e.token_index, unsent_text);
          if (++unsent_tokens >= options_.stream_interval || e.token_index == 0) {
            pending_out += StreamChunk(r, response_id, created, unsent_text, e.token_index == 0);
            unsent_text.clear();
            unsent_tokens = 0;
          }
        } else {
          engine_model::AppendGeneratedPiece(seed, e.token_index, text);
        }
      } else if (e.kind == EventKind::kFinished) {
        finished = true;
      }
    }
    if (r.stream && finished && unsent_tokens > 0) {  // the last, shorter chunk
      pending_out += StreamChunk(r, response_id, created, unsent_text, false);
      unsent_text.clear();
      unsent_tokens = 0;
    }
    if (r.stream && !pending_out.empty()) {
      if (!head_sent) {
        bhttp::response_header<> head;
        head.result(bhttp::status::ok);
        head.set(bhttp::field::content_type, "text/event-stream");
        head.set(bhttp::field::cache_control, "no-cache");
        head.set("x-engine-timing", TimingHeader(queue, ttft, usage));
        head_sent = true;
        if (!co_await ex.SendHead(std::move(head))) client_gone = true;
      }
      if (!client_gone && !co_await ex.SendBody(net::buffer(pending_out))) client_gone = true;
    }
  }
  pending_.erase(id);
  if (client_gone || stopping_) {
    // Frees its blocks (a no-op if it already finished). Wake the loop: if it was waiting for
    // a change because nothing could be scheduled, the freed blocks are one.
    if (scheduler_.Abort(id)) Wake();
    if (kv_publisher_) kv_publisher_->Flush();
    co_return;
  }
  if (!prompt_tokens_child_) {
    prompt_tokens_child_ = &prompt_tokens_.WithLabels({options_.model});
    generation_tokens_child_ = &generation_tokens_.WithLabels({options_.model});
    successes_length_child_ = &successes_.WithLabels({options_.model, "length"});
  }
  prompt_tokens_child_->Inc(prompt_tokens);
  generation_tokens_child_->Inc(usage.completion_tokens);
  successes_length_child_->Inc();
  if (r.stream) {
    std::string end = StreamEnd(r, response_id, created, usage);
    if (co_await ex.SendBody(net::buffer(end))) co_await ex.Finish();
  } else {
    auto res = JsonResponse(200, CompletionBody(r, response_id, created, text, usage));
    res.set("x-engine-timing", TimingHeader(queue, ttft, usage));
    co_await ex.Send(std::move(res));
  }
}

}  // namespace prefix_router::engine
