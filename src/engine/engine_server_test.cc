// Loopback integration tests of the engine emulator: a real EngineServer on 127.0.0.1:0, driven
// by the synchronous test client. They check what a client (the OpenAI SDK, the gateway, a
// benchmark) relies on: every route and response shape, SSE streaming as OpenAI frames it, the
// x-engine-timing header, the prefix cache as vLLM's (shared prefixes, follow-up turns, LoRA
// isolation), vLLM's error bodies, clients that go away, and queueing under overload.
//
// Modelled times (x-engine-timing, the TTFT histogram) run on the emulator's virtual clock, so
// they are exact whatever the machine's speed: timing assertions are on modelled seconds, with
// tolerances taken from the profile's calibration. Wall-clock waits are bounded polls.
#include "engine/engine_server.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <latch>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "engine_model/tokenizer.h"
#include "testing/http_client.h"
#include "testing/wait.h"

namespace prefix_router::engine {
namespace {

using namespace std::chrono_literals;
namespace pt = prefix_router::testing;
namespace json = boost::json;
namespace bhttp = http::bhttp;
using Clock = std::chrono::steady_clock;
using engine_model::ChatMessage;
using pt::ClientResponse;
using pt::Eventually;
using pt::Get;
using pt::HttpClient;
using pt::Metric;
using pt::Post;
using pt::StreamedResponse;

constexpr std::string_view kChat = "/v1/chat/completions";
constexpr std::string_view kCompletions = "/v1/completions";
constexpr std::string_view kInvocations = "/invocations";
constexpr std::string_view kTiming = "x-engine-timing";

// The engine logs its start at info level; keep test output to warnings and errors.
const bool kQuietLogs = [] {
  spdlog::set_level(spdlog::level::warn);
  return true;
}();

// ------------------------------------------------------------------------------------ helpers

// Cached-token counts on (vLLM's --enable-prompt-tokens-details): most tests read them. The
// default (off) has tests of its own below.
EngineOptions Options(std::string profile, double time_scale, std::vector<std::string> adapters = {}) {
  EngineOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.profile = std::move(profile);
  o.time_scale = time_scale;
  o.adapters = std::move(adapters);
  o.enable_prompt_tokens_details = true;
  return o;
}

// Creates and starts an engine; nullptr (after a test failure) if either step fails.
std::unique_ptr<EngineServer> StartEngine(EngineOptions options) {
  auto created = EngineServer::Create(std::move(options));
  if (!created.ok()) {
    ADD_FAILURE() << "create: " << created.status().ToString();
    return nullptr;
  }
  std::unique_ptr<EngineServer> engine = std::move(*created);
  if (Status s = engine->Start(); !s.ok()) {
    ADD_FAILURE() << "start: " << s.ToString();
    return nullptr;
  }
  return engine;
}

// `n` distinct-looking words of 2 to 4 letters separated by single spaces: exactly n tokens
// (each word is one piece, the later ones with their leading space). `salt` varies the words.
std::string Words(size_t n, uint64_t salt) {
  static constexpr std::string_view kLetters = "abcdefghiklmnoprstuvwyz";
  std::string out;
  uint64_t h = salt * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < n; ++i) {
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 32;
    if (i > 0) out += ' ';
    const size_t letters = 2 + h % 3;
    for (size_t k = 0; k < letters; ++k) out += kLetters[(h >> (8 + 5 * k)) % kLetters.size()];
  }
  return out;
}

std::string Quote(std::string_view s) { return json::serialize(json::string(s)); }

struct Msg {
  std::string role;
  std::string content;
};

std::string MessagesJson(const std::vector<Msg>& messages) {
  std::string out = "[";
  for (const Msg& m : messages) {
    if (out.size() > 1) out += ',';
    out += R"({"role":)" + Quote(m.role) + R"(,"content":)" + Quote(m.content) + "}";
  }
  return out + "]";
}

struct ChatOptions {
  uint32_t max_tokens = 8;
  bool stream = false;
  bool include_usage = false;
  std::string model;  // "" = omitted
};

std::string ChatBody(const std::vector<Msg>& messages, const ChatOptions& o = {}) {
  std::string b = "{";
  if (!o.model.empty()) b += R"("model":)" + Quote(o.model) + ",";
  b += R"("messages":)" + MessagesJson(messages) + R"(,"max_tokens":)" + std::to_string(o.max_tokens);
  if (o.stream) b += R"(,"stream":true)";
  if (o.include_usage) b += R"(,"stream_options":{"include_usage":true})";
  return b + "}";
}

// The prompt length the engine computes for these messages (its chat template).
size_t RenderedTokens(const std::vector<Msg>& messages) {
  std::vector<ChatMessage> m;
  for (const Msg& x : messages) m.push_back(ChatMessage{x.role, x.content, {}});
  return engine_model::RenderChat(m).size();
}

json::value Parse(std::string_view body) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  EXPECT_FALSE(ec) << "not JSON: " << body;
  return v;
}

// The value at a path of object keys, or nullptr.
const json::value* At(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* cur = &v;
  for (std::string_view key : path) {
    if (!cur->is_object()) return nullptr;
    cur = cur->as_object().if_contains(key);
    if (!cur) return nullptr;
  }
  return cur;
}

int64_t Int(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* x = At(v, path);
  if (!x || !x->is_int64()) {
    ADD_FAILURE() << "no integer at path in " << json::serialize(v);
    return -1;
  }
  return x->as_int64();
}

std::string Str(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* x = At(v, path);
  if (!x || !x->is_string()) {
    ADD_FAILURE() << "no string at path in " << json::serialize(v);
    return "";
  }
  return std::string(x->as_string());
}

const json::object& Choice0(const json::value& v) {
  static const json::object kEmpty;
  const json::value* c = At(v, {"choices"});
  if (!c || !c->is_array() || c->as_array().empty() || !c->as_array()[0].is_object()) {
    ADD_FAILURE() << "no choices[0] in " << json::serialize(v);
    return kEmpty;
  }
  return c->as_array()[0].as_object();
}

// The x-engine-timing header, as documented in engine_server.h:
//   queue=<s>; ttft=<s>; cached=<tokens>; prompt=<tokens>
// (no cached= without enable_prompt_tokens_details).
struct Timing {
  double queue = -1;
  double ttft = -1;
  uint32_t cached = 0;
  uint32_t prompt = 0;
  bool has_cached = false;
};

std::optional<Timing> ParseTiming(const std::string& header) {
  static const std::regex kFormat(R"(^queue=(\d+\.\d{6}); ttft=(\d+\.\d{6}); (?:cached=(\d+); )?prompt=(\d+)$)");
  std::smatch m;
  if (!std::regex_match(header, m, kFormat)) return std::nullopt;
  return Timing{std::stod(m[1]), std::stod(m[2]), m[3].matched ? static_cast<uint32_t>(std::stoul(m[3])) : 0u,
                static_cast<uint32_t>(std::stoul(m[4])), m[3].matched};
}

Timing TimingOf(const std::string& header) {
  auto t = ParseTiming(header);
  EXPECT_TRUE(t.has_value()) << "malformed x-engine-timing: '" << header << "'";
  return t.value_or(Timing{});
}

// The payloads of an SSE body's "data: " events, checking the framing (every event is one
// "data: " line followed by a blank line; nothing else).
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated SSE event at " << pos << ": " << body.substr(pos);
      break;
    }
    const std::string_view event(body.data() + pos, end - pos);
    EXPECT_TRUE(event.starts_with("data: ")) << event;
    EXPECT_EQ(event.find('\n'), std::string_view::npos) << event;
    out.emplace_back(event.substr(std::min<size_t>(6, event.size())));
    pos = end + 2;
  }
  return out;
}

constexpr std::string_view kRunning = R"(vllm:num_requests_running{model_name="llama"})";
constexpr std::string_view kWaiting = R"(vllm:num_requests_waiting{model_name="llama"})";
constexpr std::string_view kKvUsage = R"(vllm:kv_cache_usage_perc{model_name="llama"})";

// Checks status and vLLM's error shape: {"error":{"message","type","param":null,"code"}}.
void ExpectVllmError(const ClientResponse& r, int status, std::string_view type) {
  EXPECT_FALSE(r.error) << r.error.message();
  EXPECT_EQ(r.status(), status) << r.body();
  EXPECT_EQ(r.Header("content-type"), "application/json");
  const json::value v = Parse(r.body());
  EXPECT_EQ(Str(v, {"error", "type"}), type) << r.body();
  EXPECT_EQ(Int(v, {"error", "code"}), status) << r.body();
  EXPECT_FALSE(Str(v, {"error", "message"}).empty()) << r.body();
  const json::value* param = At(v, {"error", "param"});
  EXPECT_TRUE(param && param->is_null()) << r.body();
}

// The generated text of a successful chat response ("" after a test failure).
std::string ChatContent(const ClientResponse& r) {
  EXPECT_EQ(r.status(), 200) << r.error.message() << " " << r.body();
  if (r.status() != 200) return "";
  const json::value v = Parse(r.body());
  const json::value* c = Choice0(v).if_contains("message");
  if (!c) return "";
  return Str(*c, {"content"});
}

std::vector<Msg> Question(std::string_view user, size_t system_words = 40, uint64_t salt = 1) {
  return {{"system", Words(system_words, salt)}, {"user", std::string(user)}};
}

// ------------------------------------------------------------------------------------- routes

// A non-streaming chat completion has OpenAI's shape: usage counts the rendered prompt, exactly
// max_tokens generated tokens and the cached prompt tokens; the text is max_tokens words; the
// timing header agrees with usage.
TEST(EngineServerTest, ChatCompletionShapeAndUsage) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("What is a prefix cache?");
  const ClientResponse r = Post(engine->port(), kChat, ChatBody(messages, {.max_tokens = 12}));
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header("content-type"), "application/json");
  const json::value v = Parse(r.body());
  EXPECT_EQ(Str(v, {"object"}), "chat.completion");
  EXPECT_TRUE(Str(v, {"id"}).starts_with("chatcmpl-")) << r.body();
  EXPECT_EQ(Str(v, {"model"}), "llama");  // the base model when the request names none
  EXPECT_GT(Int(v, {"created"}), 1'600'000'000);
  const json::object& choice = Choice0(v);
  EXPECT_EQ(Str(choice, {"finish_reason"}), "length");
  EXPECT_EQ(Int(choice, {"index"}), 0);
  EXPECT_EQ(Str(choice, {"message", "role"}), "assistant");
  const std::string content = Str(choice, {"message", "content"});
  EXPECT_EQ(engine_model::CountTokens(content), 12u) << content;
  EXPECT_EQ(std::count(content.begin(), content.end(), ' '), 11) << content;

  const size_t prompt = RenderedTokens(messages);
  EXPECT_EQ(Int(v, {"usage", "prompt_tokens"}), static_cast<int64_t>(prompt));
  EXPECT_EQ(Int(v, {"usage", "completion_tokens"}), 12);
  EXPECT_EQ(Int(v, {"usage", "total_tokens"}), static_cast<int64_t>(prompt) + 12);
  // Nothing cached: vLLM leaves the details out (null) even with --enable-prompt-tokens-details.
  const json::value* details = At(v, {"usage", "prompt_tokens_details"});
  EXPECT_TRUE(details && details->is_null()) << r.body();

  const Timing t = TimingOf(r.Header(kTiming));
  EXPECT_EQ(t.prompt, prompt);
  EXPECT_TRUE(t.has_cached);
  EXPECT_EQ(t.cached, 0u);
  EXPECT_EQ(t.queue, 0.0);   // an idle engine admits at once
  EXPECT_GT(t.ttft, 0.005);  // at least tiny-test's 5 ms request overhead
}

// The same request twice gives the same text (the output is a function of the prompt tokens);
// a different prompt gives a different text; the second identical request hits the cache.
TEST(EngineServerTest, SameRequestGivesSameText) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const std::string body = ChatBody(Question("Name three rivers.", 60), {.max_tokens = 10});
  const ClientResponse a = Post(engine->port(), kChat, body);
  const ClientResponse b = Post(engine->port(), kChat, body);
  const std::string text = ChatContent(a);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(ChatContent(b), text);
  EXPECT_EQ(TimingOf(a.Header(kTiming)).cached, 0u);
  EXPECT_GT(TimingOf(b.Header(kTiming)).cached, 0u);
  const std::string other =
      ChatContent(Post(engine->port(), kChat, ChatBody(Question("Name three lakes.", 60), {.max_tokens = 10})));
  EXPECT_NE(other, text);
  // The id differs per request even when the text does not.
  EXPECT_NE(Str(Parse(a.body()), {"id"}), Str(Parse(b.body()), {"id"}));
}

// /v1/completions answers a text_completion with choices[0].text, default max_tokens 16, and
// accepts a prompt as token ids.
TEST(EngineServerTest, CompletionsShape) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const std::string prompt = Words(30, 7);
  const ClientResponse r = Post(engine->port(), kCompletions, R"({"model":"llama","prompt":)" + Quote(prompt) + "}");
  ASSERT_EQ(r.status(), 200) << r.body();
  const json::value v = Parse(r.body());
  EXPECT_EQ(Str(v, {"object"}), "text_completion");
  EXPECT_TRUE(Str(v, {"id"}).starts_with("cmpl-")) << r.body();
  EXPECT_EQ(Str(Choice0(v), {"finish_reason"}), "length");
  EXPECT_EQ(engine_model::CountTokens(Str(Choice0(v), {"text"})), 16u);
  EXPECT_EQ(Int(v, {"usage", "completion_tokens"}), 16);
  EXPECT_EQ(Int(v, {"usage", "prompt_tokens"}), 31);  // <|begin_of_text|> + 30 words
  EXPECT_EQ(TimingOf(r.Header(kTiming)).prompt, 31u);

  const ClientResponse ids = Post(engine->port(), kCompletions, R"({"prompt":[1000,1001,1002,1003],"max_tokens":3})");
  ASSERT_EQ(ids.status(), 200) << ids.body();
  EXPECT_EQ(Int(Parse(ids.body()), {"usage", "prompt_tokens"}), 4);
  EXPECT_EQ(Int(Parse(ids.body()), {"usage", "completion_tokens"}), 3);
}

// /invocations (SageMaker's route) takes the chat shape, the completions shape and TGI's
// {"inputs", "parameters": {"max_new_tokens"}}, and answers each in its own shape.
TEST(EngineServerTest, InvocationsAcceptsChatPromptAndTgiShapes) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("hello");
  const ClientResponse chat = Post(engine->port(), kInvocations, ChatBody(messages, {.max_tokens = 5}));
  ASSERT_EQ(chat.status(), 200) << chat.body();
  EXPECT_EQ(Str(Parse(chat.body()), {"object"}), "chat.completion");
  // The same text as the same request on the OpenAI route.
  EXPECT_EQ(ChatContent(chat), ChatContent(Post(engine->port(), kChat, ChatBody(messages, {.max_tokens = 5}))));

  const ClientResponse prompt = Post(engine->port(), kInvocations, R"({"prompt":"Once upon a time","max_tokens":4})");
  ASSERT_EQ(prompt.status(), 200) << prompt.body();
  EXPECT_EQ(Str(Parse(prompt.body()), {"object"}), "text_completion");
  EXPECT_EQ(Int(Parse(prompt.body()), {"usage", "completion_tokens"}), 4);

  const ClientResponse tgi =
      Post(engine->port(), kInvocations, R"({"inputs":"Once upon a time","parameters":{"max_new_tokens":6}})");
  ASSERT_EQ(tgi.status(), 200) << tgi.body();
  const json::value v = Parse(tgi.body());
  ASSERT_TRUE(v.is_array() && v.as_array().size() == 1) << tgi.body();
  EXPECT_EQ(engine_model::CountTokens(Str(v.as_array()[0], {"generated_text"})), 6u) << tgi.body();
  EXPECT_TRUE(ParseTiming(tgi.Header(kTiming)).has_value()) << tgi.Header(kTiming);

  ExpectVllmError(Post(engine->port(), kInvocations, R"({"max_tokens":4})"), 400, "BadRequestError");
}

// GET /v1/models lists the base model and each served adapter (with the base as parent).
TEST(EngineServerTest, ModelsListsBaseModelAndAdapters) {
  auto engine = StartEngine(Options("tiny-test", 0.01, {"sql-lora", "chat-lora"}));
  ASSERT_NE(engine, nullptr);
  const ClientResponse r = Get(engine->port(), "/v1/models");
  ASSERT_EQ(r.status(), 200) << r.body();
  const json::value v = Parse(r.body());
  EXPECT_EQ(Str(v, {"object"}), "list");
  const json::value* data = At(v, {"data"});
  ASSERT_TRUE(data && data->is_array()) << r.body();
  std::vector<std::string> ids;
  for (const json::value& m : data->as_array()) {
    EXPECT_EQ(Str(m, {"object"}), "model");
    EXPECT_EQ(Str(m, {"owned_by"}), "vllm");
    EXPECT_EQ(Int(m, {"max_model_len"}), 4096);
    ids.push_back(Str(m, {"id"}));
    const json::value* parent = At(m, {"parent"});
    ASSERT_NE(parent, nullptr);
    if (ids.back() == "llama") {
      EXPECT_TRUE(parent->is_null());
    } else {
      EXPECT_EQ(Str(m, {"parent"}), "llama");
    }
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"llama", "sql-lora", "chat-lora"}));
}

// /health answers 200 without model work; an unknown path is 404 in vLLM's error shape.
TEST(EngineServerTest, HealthAndUnknownPath) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(Get(engine->port(), "/health").status(), 200);
  ExpectVllmError(Get(engine->port(), "/v2/nothing"), 404, "NotFoundError");
}

// /metrics exposes vLLM's series: running and waiting requests, KV usage, prefix cache queries
// and hits (in prompt tokens), and the TTFT histogram, consistent with the responses served.
TEST(EngineServerTest, MetricsExposeVllmSeries) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  EXPECT_EQ(Metric(port, kRunning), 0);
  EXPECT_EQ(Metric(port, kWaiting), 0);
  EXPECT_EQ(Metric(port, kKvUsage), 0);
  const std::string body = ChatBody(Question("metrics please", 70), {.max_tokens = 4});
  const Timing a = TimingOf(Post(port, kChat, body).Header(kTiming));
  const Timing b = TimingOf(Post(port, kChat, body).Header(kTiming));
  ASSERT_GT(b.cached, 0u);
  EXPECT_EQ(Metric(port, R"(vllm:prefix_cache_queries_total{model_name="llama"})"), a.prompt + b.prompt);
  EXPECT_EQ(Metric(port, R"(vllm:prefix_cache_hits_total{model_name="llama"})"), a.cached + b.cached);
  EXPECT_EQ(Metric(port, R"(vllm:time_to_first_token_seconds_count{model_name="llama"})"), 2);
  EXPECT_NEAR(Metric(port, R"(vllm:time_to_first_token_seconds_sum{model_name="llama"})"), a.ttft + b.ttft, 2e-6);
  EXPECT_EQ(Metric(port, R"(vllm:time_to_first_token_seconds_bucket{model_name="llama",le="+Inf"})"), 2);
  EXPECT_EQ(Metric(port, R"(vllm:generation_tokens_total{model_name="llama"})"), 8);
  EXPECT_EQ(Metric(port, R"(vllm:request_success_total{model_name="llama",finished_reason="length"})"), 2);
  EXPECT_EQ(Metric(port, kRunning), 0);
  EXPECT_EQ(Metric(port, kWaiting), 0);
  EXPECT_EQ(Metric(port, kKvUsage), 0);  // finished requests' blocks are free (cached, not used)
  const ClientResponse m = Get(port, "/metrics");
  EXPECT_TRUE(m.Header("content-type").starts_with("text/plain")) << m.Header("content-type");
  EXPECT_NE(m.body().find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
}

// ---------------------------------------------------------------------------------- streaming

// A streamed chat completion is OpenAI's SSE: chat.completion.chunk events with one id, the
// assistant role in the first delta only, one content delta per generated token (together the
// non-streamed text), a final empty delta with finish_reason "length", no usage event unless
// asked for, then "data: [DONE]". The timing header comes with the head.
TEST(EngineServerTest, StreamingChatFollowsOpenAiFormat) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("Stream me a story.");
  HttpClient client(engine->port());
  ASSERT_FALSE(
      client.Send(pt::MakeRequest(bhttp::verb::post, kChat, ChatBody(messages, {.max_tokens = 9, .stream = true}),
                                  {{"Content-Type", "application/json"}})));
  const StreamedResponse s = client.ReadStreamed();
  ASSERT_TRUE(s.complete) << s.error.message();
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(s.Header("content-type"), "text/event-stream");
  const Timing t = TimingOf(s.Header(kTiming));
  EXPECT_EQ(t.prompt, RenderedTokens(messages));

  const std::vector<std::string> data = SseData(s.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  std::string id, text;
  int content_deltas = 0;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    const json::value v = Parse(data[i]);
    EXPECT_EQ(Str(v, {"object"}), "chat.completion.chunk") << data[i];
    EXPECT_EQ(Str(v, {"model"}), "llama");
    EXPECT_EQ(At(v, {"usage"}), nullptr) << "usage without include_usage: " << data[i];
    if (i == 0) id = Str(v, {"id"});
    EXPECT_EQ(Str(v, {"id"}), id);
    const json::object& c = Choice0(v);
    const json::value* delta = c.if_contains("delta");
    ASSERT_TRUE(delta && delta->is_object()) << data[i];
    EXPECT_EQ(delta->as_object().contains("role"), i == 0) << data[i];
    if (i == 0) {
      EXPECT_EQ(Str(*delta, {"role"}), "assistant");
    }
    const bool last = i + 2 == data.size();
    if (last) {
      EXPECT_EQ(Str(c, {"finish_reason"}), "length") << data[i];
      EXPECT_TRUE(delta->as_object().empty()) << data[i];
    } else {
      EXPECT_TRUE(c.at("finish_reason").is_null()) << data[i];
      text += Str(*delta, {"content"});
      ++content_deltas;
    }
  }
  EXPECT_EQ(content_deltas, 9);
  EXPECT_TRUE(id.starts_with("chatcmpl-")) << id;
  // The stream carries the text the same request gets without streaming.
  EXPECT_EQ(text, ChatContent(Post(engine->port(), kChat, ChatBody(messages, {.max_tokens = 9}))));
}

// With a stream interval of 4, the first token comes alone and the rest in chunks of up to 4
// tokens (the last one shorter), carrying the same text as an unchunked stream.
TEST(EngineServerTest, StreamIntervalGroupsTokensAfterTheFirst) {
  EngineOptions o = Options("tiny-test", 0.01);
  o.stream_interval = 4;
  auto engine = StartEngine(o);
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("Stream me a story in chunks.");
  HttpClient client(engine->port());
  ASSERT_FALSE(
      client.Send(pt::MakeRequest(bhttp::verb::post, kChat, ChatBody(messages, {.max_tokens = 10, .stream = true}),
                                  {{"Content-Type", "application/json"}})));
  const StreamedResponse s = client.ReadStreamed();
  ASSERT_TRUE(s.complete) << s.error.message();
  const std::vector<std::string> data = SseData(s.body);
  std::vector<std::string> deltas;
  for (size_t i = 0; i + 2 < data.size(); ++i) {  // the last two: finish_reason, [DONE]
    const json::value v = Parse(data[i]);
    const json::value* delta = Choice0(v).if_contains("delta");
    ASSERT_NE(delta, nullptr) << data[i];
    deltas.push_back(Str(*delta, {"content"}));
  }
  ASSERT_EQ(deltas.size(), 4u);  // 1 + 4 + 4 + 1 tokens
  std::string text;
  for (const auto& d : deltas) text += d;
  EXPECT_EQ(engine_model::CountTokens(deltas[0]), 1u);
  EXPECT_EQ(engine_model::CountTokens(deltas[1]), 4u);
  EXPECT_EQ(engine_model::CountTokens(deltas[3]), 1u);
  EXPECT_EQ(text, ChatContent(Post(engine->port(), kChat, ChatBody(messages, {.max_tokens = 10}))));
  o.stream_interval = 0;
  EXPECT_FALSE(EngineServer::Create(o).ok());
}

// With stream_options.include_usage, one more chunk with empty choices and the usage comes
// after the finish_reason chunk and before [DONE]; streamed completions work the same way.
TEST(EngineServerTest, StreamingUsageOnlyWhenRequested) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("Count the tokens.", 50);
  const std::string body = ChatBody(messages, {.max_tokens = 5, .stream = true, .include_usage = true});
  HttpClient client(engine->port());
  ASSERT_FALSE(client.Send(pt::MakeRequest(bhttp::verb::post, kChat, body, {{"Content-Type", "application/json"}})));
  const StreamedResponse s = client.ReadStreamed();
  ASSERT_TRUE(s.complete) << s.error.message();
  const std::vector<std::string> data = SseData(s.body);
  ASSERT_EQ(data.size(), 5u + 3u);  // 5 content deltas, finish, usage, [DONE]
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(Str(Choice0(Parse(data[5])), {"finish_reason"}), "length");
  const json::value usage = Parse(data[6]);
  EXPECT_EQ(Str(usage, {"object"}), "chat.completion.chunk");
  EXPECT_TRUE(At(usage, {"choices"}) && At(usage, {"choices"})->as_array().empty()) << data[6];
  EXPECT_EQ(Int(usage, {"usage", "prompt_tokens"}), static_cast<int64_t>(RenderedTokens(messages)));
  EXPECT_EQ(Int(usage, {"usage", "completion_tokens"}), 5);
  // Nothing cached: no details in a stream's usage chunk (vLLM dumps chunks without nulls).
  EXPECT_EQ(At(usage, {"usage", "prompt_tokens_details"}), nullptr) << data[6];
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(At(Parse(data[i]), {"usage"}), nullptr) << data[i];

  // A streamed completion: text_completion chunks with "text", then finish, usage, [DONE].
  HttpClient c2(engine->port());
  ASSERT_FALSE(c2.Send(
      pt::MakeRequest(bhttp::verb::post, kCompletions,
                      R"({"prompt":"a b c d","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}})",
                      {{"Content-Type", "application/json"}})));
  const StreamedResponse s2 = c2.ReadStreamed();
  ASSERT_TRUE(s2.complete);
  const std::vector<std::string> d2 = SseData(s2.body);
  ASSERT_EQ(d2.size(), 3u + 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Str(Parse(d2[i]), {"object"}), "text_completion");
    EXPECT_FALSE(Str(Choice0(Parse(d2[i])), {"text"}).empty());
  }
  EXPECT_EQ(Str(Choice0(Parse(d2[3])), {"finish_reason"}), "length");
  EXPECT_EQ(Int(Parse(d2[4]), {"usage", "completion_tokens"}), 3);
  EXPECT_EQ(d2[5], "[DONE]");
}

// ------------------------------------------------------------------- prompt_tokens_details

// The usage chunk of a streamed chat request with include_usage (after a test failure: null).
json::value StreamedUsage(uint16_t port, const std::vector<Msg>& messages, std::string* timing) {
  HttpClient client(port);
  EXPECT_FALSE(client.Send(pt::MakeRequest(bhttp::verb::post, kChat,
                                           ChatBody(messages, {.max_tokens = 4, .stream = true, .include_usage = true}),
                                           {{"Content-Type", "application/json"}})));
  const StreamedResponse s = client.ReadStreamed();
  EXPECT_TRUE(s.complete) << s.error.message();
  *timing = s.Header(kTiming);
  const std::vector<std::string> data = SseData(s.body);
  if (data.size() < 2) {
    ADD_FAILURE() << s.body;
    return nullptr;
  }
  return Parse(data[data.size() - 2]);  // ..., usage, [DONE]
}

constexpr std::string_view kCacheHits = R"(vllm:prefix_cache_hits_total{model_name="llama"})";

// Sends the same chat body twice (the second is served from the cache) and returns the second
// response; the first must succeed.
ClientResponse PostTwice(uint16_t port, const std::string& body) {
  const ClientResponse first = Post(port, kChat, body);
  EXPECT_EQ(first.status(), 200) << first.body();
  return Post(port, kChat, body);
}

// Off by default, as vLLM without --enable-prompt-tokens-details: a request served mostly from
// the cache carries no cached-token count anywhere a client looks (prompt_tokens_details null in
// a whole response, absent from a stream's usage chunk, no cached= in x-engine-timing), while
// /metrics still counts the prefix cache hits.
TEST(EngineServerTest, PromptTokensDetailsOffByDefault) {
  EXPECT_FALSE(EngineOptions{}.enable_prompt_tokens_details);
  EngineOptions o = Options("tiny-test", 0.01);
  o.enable_prompt_tokens_details = false;
  auto engine = StartEngine(o);
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("What is in the cache?", 60);
  const ClientResponse again = PostTwice(engine->port(), ChatBody(messages, {.max_tokens = 4}));
  ASSERT_EQ(again.status(), 200) << again.body();
  const json::value v = Parse(again.body());
  const json::value* details = At(v, {"usage", "prompt_tokens_details"});
  EXPECT_TRUE(details && details->is_null()) << again.body();
  EXPECT_EQ(Int(v, {"usage", "prompt_tokens"}), static_cast<int64_t>(RenderedTokens(messages)));
  const Timing t = TimingOf(again.Header(kTiming));
  EXPECT_FALSE(t.has_cached) << again.Header(kTiming);
  EXPECT_EQ(t.prompt, RenderedTokens(messages));

  std::string timing;
  const json::value usage = StreamedUsage(engine->port(), messages, &timing);
  EXPECT_EQ(Int(usage, {"usage", "completion_tokens"}), 4) << json::serialize(usage);
  EXPECT_EQ(At(usage, {"usage", "prompt_tokens_details"}), nullptr) << json::serialize(usage);
  EXPECT_FALSE(TimingOf(timing).has_cached) << timing;

  // The engine did serve both repeats from its cache: only the responses are silent about it.
  EXPECT_GT(Metric(engine->port(), kCacheHits), static_cast<double>(RenderedTokens(messages)) / 2);
}

// With enable_prompt_tokens_details, a request served from the cache reports its cached tokens
// in a whole response's usage, in a stream's usage chunk and in x-engine-timing, all alike.
TEST(EngineServerTest, PromptTokensDetailsWhenEnabled) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("What is in the cache?", 60);
  const ClientResponse again = PostTwice(engine->port(), ChatBody(messages, {.max_tokens = 4}));
  ASSERT_EQ(again.status(), 200) << again.body();
  const Timing t = TimingOf(again.Header(kTiming));
  ASSERT_TRUE(t.has_cached) << again.Header(kTiming);
  EXPECT_GT(t.cached, t.prompt / 2);
  EXPECT_EQ(Int(Parse(again.body()), {"usage", "prompt_tokens_details", "cached_tokens"}),
            static_cast<int64_t>(t.cached));

  std::string timing;
  const json::value usage = StreamedUsage(engine->port(), messages, &timing);
  EXPECT_EQ(Int(usage, {"usage", "prompt_tokens_details", "cached_tokens"}), static_cast<int64_t>(t.cached))
      << json::serialize(usage);
  EXPECT_EQ(TimingOf(timing).cached, t.cached) << timing;
}

// --------------------------------------------------------------------------------- prefix cache

// The issue's acceptance case (llama-70b-h100x8): two chat requests sharing an ~8,000-token
// prefix. The first (8,000 uncached tokens) reports a modelled TTFT near the calibrated 280 ms;
// the second reuses >= 7,984 tokens and reports near the calibrated 63 ms.
TEST(EngineServerTest, SharedPrefixIsReusedAndCutsTtft) {
  auto engine = StartEngine(Options("llama-70b-h100x8", 0.01));
  ASSERT_NE(engine, nullptr);
  // A long system document, sized so that the first rendered prompt is exactly 8,000 tokens;
  // the two user questions have the same length (3 tokens) but different words.
  const std::string q1 = "why is sky", q2 = "how are you";
  const size_t frame = RenderedTokens({{"system", ""}, {"user", q1}});
  ASSERT_LT(frame, 100u);
  const std::string document = Words(8000 - frame, 42);
  const std::vector<Msg> first = {{"system", document}, {"user", q1}};
  const std::vector<Msg> second = {{"system", document}, {"user", q2}};
  ASSERT_EQ(RenderedTokens(first), 8000u);
  ASSERT_EQ(RenderedTokens(second), 8000u);

  const ClientResponse a = Post(engine->port(), kChat, ChatBody(first, {.max_tokens = 4}));
  const ClientResponse b = Post(engine->port(), kChat, ChatBody(second, {.max_tokens = 4}));
  ASSERT_EQ(a.status(), 200) << a.body();
  ASSERT_EQ(b.status(), 200) << b.body();
  const Timing ta = TimingOf(a.Header(kTiming));
  const Timing tb = TimingOf(b.Header(kTiming));
  EXPECT_EQ(ta.prompt, 8000u);
  EXPECT_EQ(ta.cached, 0u);
  // The reference calibration (280 / 63 ms on average), within the step jitter's 3-sigma band.
  EXPECT_GE(ta.ttft, 0.245);
  EXPECT_LE(ta.ttft, 0.320);
  EXPECT_EQ(tb.prompt, 8000u);
  EXPECT_GE(tb.cached, 7984u);
  EXPECT_GE(tb.ttft, 0.060);
  EXPECT_LE(tb.ttft, 0.066);
  EXPECT_EQ(Int(Parse(b.body()), {"usage", "prompt_tokens_details", "cached_tokens"}), tb.cached);
  // An idle engine admits as soon as the API server has tokenized the prompt: 8,000 x 2 us.
  EXPECT_NEAR(ta.queue, 0.016, 1e-6);
  EXPECT_NEAR(tb.queue, 0.016, 1e-6);
}

// A follow-up chat turn that resends the previous assistant reply reuses the blocks written
// while that reply was decoded: its cached tokens go beyond the first turn's prompt.
TEST(EngineServerTest, FollowUpTurnHitsBlocksWrittenWhileDecoding) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const uint32_t kReply = 40;
  std::vector<Msg> turn = Question("Tell me about caches.", 60);
  const ClientResponse r1 = Post(engine->port(), kChat, ChatBody(turn, {.max_tokens = kReply}));
  const std::string reply = ChatContent(r1);
  ASSERT_FALSE(reply.empty());
  const uint32_t p1 = TimingOf(r1.Header(kTiming)).prompt;

  turn.push_back({"assistant", reply});
  turn.push_back({"user", "And then?"});
  const ClientResponse r2 = Post(engine->port(), kChat, ChatBody(turn, {.max_tokens = 4}));
  ASSERT_EQ(r2.status(), 200) << r2.body();
  const Timing t2 = TimingOf(r2.Header(kTiming));
  // The first turn's KV holds its prompt and all but the last generated token (the last one is
  // sampled, never fed back); its full blocks are what the second turn can reuse.
  const uint32_t written = p1 + kReply - 1;
  EXPECT_GT(t2.cached, p1);
  EXPECT_EQ(t2.cached, written / 16 * 16);
}

// ------------------------------------------------------------------------------------------ LoRA

// A model the instance does not serve is 404 with vLLM's error body, on every generating route.
TEST(EngineServerTest, UnknownAdapterIs404InVllmShape) {
  auto engine = StartEngine(Options("tiny-test", 0.01, {"sql-lora"}));
  ASSERT_NE(engine, nullptr);
  const ClientResponse r = Post(engine->port(), kChat, ChatBody(Question("hi"), {.model = "other-lora"}));
  ExpectVllmError(r, 404, "NotFoundError");
  EXPECT_NE(Str(Parse(r.body()), {"error", "message"}).find("other-lora"), std::string::npos) << r.body();
  ExpectVllmError(Post(engine->port(), kCompletions, R"({"model":"other-lora","prompt":"x"})"), 404, "NotFoundError");
  ExpectVllmError(Post(engine->port(), kChat, ChatBody(Question("hi"), {.stream = true, .model = "other-lora"})), 404,
                  "NotFoundError");
  EXPECT_EQ(Metric(engine->port(), R"(vllm:prefix_cache_queries_total{model_name="llama"})"), 0);
}

// POST /tokenize answers vLLM's shape with the prompt's tokens: as many as a chat completion of
// the same messages counts, for the base model or an adapter; unknown models are 404, broken
// bodies 400, both in vLLM's error shape; tokenizing schedules nothing.
TEST(EngineServerTest, TokenizeAnswersThePromptTokens) {
  auto engine = StartEngine(Options("tiny-test", 0.01, {"sql-lora"}));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("What is a prefix cache?");
  const ClientResponse r = Post(engine->port(), "/tokenize", ChatBody(messages));
  ASSERT_EQ(r.status(), 200) << r.body();
  EXPECT_EQ(r.Header("content-type"), "application/json");
  const json::value v = Parse(r.body());
  const size_t prompt = RenderedTokens(messages);
  EXPECT_EQ(Int(v, {"count"}), static_cast<int64_t>(prompt));
  ASSERT_TRUE(At(v, {"tokens"}) && At(v, {"tokens"})->is_array());
  EXPECT_EQ(At(v, {"tokens"})->as_array().size(), prompt);
  EXPECT_GT(Int(v, {"max_model_len"}), 0);
  ASSERT_EQ(Post(engine->port(), "/tokenize", ChatBody(messages, {.model = "sql-lora"})).status(), 200);
  ExpectVllmError(Post(engine->port(), "/tokenize", ChatBody(messages, {.model = "other"})), 404, "NotFoundError");
  ExpectVllmError(Post(engine->port(), "/tokenize", R"({"messages":7})"), 400, "BadRequestError");
  EXPECT_EQ(Metric(engine->port(), R"(vllm:prefix_cache_queries_total{model_name="llama"})"), 0);
}

// A served adapter answers under its own name, and its KV blocks are its own: the same prompt
// on the base model and on the adapter never hits the other's blocks.
TEST(EngineServerTest, AdapterWorksAndKeepsItsOwnCacheBlocks) {
  auto engine = StartEngine(Options("tiny-test", 0.01, {"sql-lora"}));
  ASSERT_NE(engine, nullptr);
  const auto messages = Question("SELECT what?", 100);
  const uint16_t port = engine->port();
  auto cached = [&](const std::string& model) {
    const ClientResponse r = Post(port, kChat, ChatBody(messages, {.max_tokens = 2, .model = model}));
    EXPECT_EQ(r.status(), 200) << r.body();
    if (!model.empty()) {
      EXPECT_EQ(Str(Parse(r.body()), {"model"}), model);
    }
    return TimingOf(r.Header(kTiming)).cached;
  };
  EXPECT_EQ(cached(""), 0u);            // base, cold
  EXPECT_EQ(cached("sql-lora"), 0u);    // the base model's blocks do not count for the adapter
  EXPECT_GT(cached("sql-lora"), 100u);  // the adapter's own blocks do
  EXPECT_GT(cached("llama"), 100u);     // and the base model's are still there
}

// ------------------------------------------------------------------------ inference components

constexpr std::string_view kComponentHeader = "X-Amzn-SageMaker-Inference-Component";

EngineOptions WithComponents(std::vector<std::string> components) {
  EngineOptions o = Options("tiny-test", 0.01);
  o.inference_components = std::move(components);
  return o;
}

// GET /v1/models lists each served inference component as a model of its own (no parent), after
// the base model: the gateway's discovery makes pools of these names.
TEST(EngineServerTest, ModelsListsInferenceComponents) {
  auto engine = StartEngine(WithComponents({"ic-a", "ic-b"}));
  ASSERT_NE(engine, nullptr);
  const ClientResponse r = Get(engine->port(), "/v1/models");
  ASSERT_EQ(r.status(), 200) << r.body();
  const json::value v = Parse(r.body());
  const json::value* data = At(v, {"data"});
  ASSERT_TRUE(data && data->is_array()) << r.body();
  std::vector<std::string> ids;
  for (const json::value& m : data->as_array()) {
    ids.push_back(Str(m, {"id"}));
    const json::value* parent = At(m, {"parent"});
    ASSERT_NE(parent, nullptr);
    EXPECT_TRUE(parent->is_null()) << r.body();
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"llama", "ic-a", "ic-b"}));
}

// The component header selects the component on /invocations and on the OpenAI routes, whatever
// the body's model says; a component is also a model name; its KV blocks are its own.
TEST(EngineServerTest, ComponentHeaderServesThatComponent) {
  auto engine = StartEngine(WithComponents({"ic-a", "ic-b"}));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  const auto messages = Question("Which component?", 100);
  const std::string body = ChatBody(messages, {.max_tokens = 2});
  auto served = [&](std::string_view path, const std::string& b, std::string component) {
    pt::Headers h;
    if (!component.empty()) h.emplace_back(std::string(kComponentHeader), std::move(component));
    const ClientResponse r = Post(port, path, b, h);
    EXPECT_EQ(r.status(), 200) << r.body();
    return std::pair{Str(Parse(r.body()), {"model"}), TimingOf(r.Header(kTiming)).cached};
  };
  // Cold on the component, although the base model has the prompt already.
  EXPECT_EQ(served(kInvocations, body, ""), std::pair(std::string("llama"), uint32_t{0}));
  EXPECT_EQ(served(kInvocations, body, "ic-a"), std::pair(std::string("ic-a"), uint32_t{0}));
  // Warm on the same component, by any route; the header wins over the body's model.
  EXPECT_EQ(served(kChat, ChatBody(messages, {.max_tokens = 2, .model = "llama"}), "ic-a").first, "ic-a");
  EXPECT_GT(served(kInvocations, body, "ic-a").second, 100u);
  // The other component is cold, also when named by `model` alone (no header).
  EXPECT_EQ(served(kChat, ChatBody(messages, {.max_tokens = 2, .model = "ic-b"}), ""),
            std::pair(std::string("ic-b"), uint32_t{0}));
  // A streamed request on /invocations streams as on the OpenAI route.
  const ClientResponse s = Post(port, kInvocations, ChatBody(messages, {.max_tokens = 3, .stream = true}),
                                {{std::string(kComponentHeader), "ic-b"}});
  ASSERT_EQ(s.status(), 200) << s.body();
  EXPECT_EQ(s.Header("content-type"), "text/event-stream");
  const auto data = SseData(s.body());
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(Str(Parse(data.front()), {"model"}), "ic-b");
}

// A component the engine does not serve is 404 in vLLM's error shape naming it, on every POST
// route, /tokenize included, and nothing is scheduled; an empty header is no header.
TEST(EngineServerTest, UnknownComponentIs404) {
  auto engine = StartEngine(WithComponents({"ic-a"}));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  const pt::Headers other{{std::string(kComponentHeader), "ic-other"}};
  const std::string body = ChatBody(Question("hi"));
  for (std::string_view path : {kInvocations, kChat, std::string_view("/tokenize")}) {
    const ClientResponse r = Post(port, path, body, other);
    ExpectVllmError(r, 404, "NotFoundError");
    EXPECT_NE(Str(Parse(r.body()), {"error", "message"}).find("ic-other"), std::string::npos) << r.body();
  }
  ExpectVllmError(Post(port, kCompletions, R"({"prompt":"x"})", other), 404, "NotFoundError");
  ExpectVllmError(Post(port, kInvocations, ChatBody(Question("hi"), {.stream = true}), other), 404, "NotFoundError");
  EXPECT_EQ(Metric(port, R"(vllm:prefix_cache_queries_total{model_name="llama"})"), 0);
  // Without a component engine, the header is still checked: it names nothing served.
  auto plain = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(plain, nullptr);
  ExpectVllmError(Post(plain->port(), kInvocations, body, {{std::string(kComponentHeader), "ic-a"}}), 404,
                  "NotFoundError");
  const ClientResponse empty = Post(port, kInvocations, body, {{std::string(kComponentHeader), ""}});
  ASSERT_EQ(empty.status(), 200) << empty.body();
  EXPECT_EQ(Str(Parse(empty.body()), {"model"}), "llama");
  ASSERT_EQ(Post(port, "/tokenize", body, {{std::string(kComponentHeader), "ic-a"}}).status(), 200);
}

// Component names are the service's (letters, digits, '-') and must not repeat a served name.
TEST(EngineServerTest, BadComponentNamesAreRefused) {
  for (std::vector<std::string> bad : {std::vector<std::string>{"ic_a"}, {"-ic"}, {""}, {"ic-a", "ic-a"}, {"llama"}}) {
    auto created = EngineServer::Create(WithComponents(bad));
    ASSERT_FALSE(created.ok()) << bad.front();
    EXPECT_NE(created.status().message().find("--inference-component"), std::string::npos)
        << created.status().message();
  }
  EngineOptions o = WithComponents({"sql-lora"});
  o.adapters = {"sql-lora"};
  EXPECT_FALSE(EngineServer::Create(o).ok());
}

// ------------------------------------------------------------------------------------- errors

// Malformed JSON and invalid fields are 400 BadRequestError in vLLM's shape, and leave nothing
// behind in the scheduler.
TEST(EngineServerTest, MalformedRequestsAre400) {
  auto engine = StartEngine(Options("tiny-test", 0.01));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  ExpectVllmError(Post(port, kChat, R"({"messages":[{"role":"user","content":"hi"}])"), 400, "BadRequestError");
  ExpectVllmError(Post(port, kChat, "not json"), 400, "BadRequestError");
  ExpectVllmError(Post(port, kChat, "[1,2]"), 400, "BadRequestError");
  ExpectVllmError(Post(port, kChat, R"({"messages":[]})"), 400, "BadRequestError");
  ExpectVllmError(Post(port, kChat, R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":0})"), 400,
                  "BadRequestError");
  ExpectVllmError(Post(port, kChat, R"({"messages":[{"role":"user","content":"hi"}],"stream":"yes"})"), 400,
                  "BadRequestError");
  ExpectVllmError(Post(port, kCompletions, R"({"prompt":{}})"), 400, "BadRequestError");
  // Longer than tiny-test's 4,096-token context: rejected as vLLM rejects it.
  ExpectVllmError(Post(port, kCompletions, R"({"prompt":)" + Quote(Words(4100, 3)) + "}"), 400, "BadRequestError");
  EXPECT_EQ(Metric(port, kRunning), 0);
  EXPECT_EQ(Metric(port, kWaiting), 0);
  // The engine still serves.
  EXPECT_EQ(Post(port, kChat, ChatBody(Question("still there?"))).status(), 200);
}

// ------------------------------------------------------------------------------ clients that go

// A client that disconnects mid-stream frees its request: running returns to 0 and its KV
// blocks are released long before the stream would have ended (3,000 tokens, ~10 s modelled
// in real time).
TEST(EngineServerTest, ClientGoneMidStreamFreesItsRequest) {
  auto engine = StartEngine(Options("tiny-test", 1.0));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  HttpClient client(port);
  ASSERT_FALSE(client.Send(pt::MakeRequest(bhttp::verb::post, kChat,
                                           ChatBody(Question("go on and on"), {.max_tokens = 3000, .stream = true}),
                                           {{"Content-Type", "application/json"}})));
  ASSERT_TRUE(Eventually([&] { return Metric(port, kRunning) == 1; }));
  EXPECT_GT(Metric(port, kKvUsage), 0);
  // Reads the head and the first piece, then drops the connection (ReadStreamed closes an
  // incomplete stream).
  const auto closed_at = Clock::now();
  const StreamedResponse s = client.ReadStreamed([](const StreamedResponse&) { return false; });
  EXPECT_EQ(s.status, 200);
  ASSERT_FALSE(s.pieces.empty());
  EXPECT_FALSE(s.complete);
  client.Close();
  EXPECT_TRUE(Eventually([&] { return Metric(port, kRunning) == 0; }, 3000ms));
  EXPECT_LT(Clock::now() - closed_at, 3000ms);
  EXPECT_EQ(Metric(port, kKvUsage), 0);
  EXPECT_EQ(Metric(port, kWaiting), 0);
  EXPECT_EQ(Metric(port, R"(vllm:request_success_total{model_name="llama",finished_reason="length"})"), -1);
  // The engine serves the next request normally.
  EXPECT_EQ(Post(port, kChat, ChatBody(Question("next"))).status(), 200);
}

// A non-streaming client that disconnects while its request runs frees it as well.
TEST(EngineServerTest, ClientGoneWhileWaitingFreesItsRequest) {
  auto engine = StartEngine(Options("tiny-test", 1.0));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  HttpClient client(port);
  ASSERT_FALSE(
      client.Send(pt::MakeRequest(bhttp::verb::post, kChat, ChatBody(Question("take your time"), {.max_tokens = 3000}),
                                  {{"Content-Type", "application/json"}})));
  ASSERT_TRUE(Eventually([&] { return Metric(port, kRunning) == 1; }));
  client.Close();
  EXPECT_TRUE(Eventually([&] { return Metric(port, kRunning) == 0; }, 3000ms));
  EXPECT_EQ(Metric(port, kKvUsage), 0);
}

// ----------------------------------------------------------------------------------- overload

// Under overload (24 concurrent requests, tiny-test runs 8 at a time) requests queue: the
// modelled queue time in x-engine-timing grows for later arrivals, and TTFT with it. Real time
// (--time-scale 1), so that the clients' arrival spread is small next to the modelled waves.
TEST(EngineServerTest, QueueAndTtftGrowUnderOverload) {
  auto engine = StartEngine(Options("tiny-test", 1.0));
  ASSERT_NE(engine, nullptr);
  const uint16_t port = engine->port();
  constexpr int kRequests = 24;
  struct Outcome {
    int status = 0;
    uint64_t id = 0;  // the engine's request number: its arrival order
    Timing timing;
  };
  std::vector<Outcome> outcomes(kRequests);
  std::vector<std::thread> threads;
  std::latch start(kRequests);  // all clients send at once
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      const std::string body = ChatBody(Question("request " + std::to_string(i), 20, 100 + i), {.max_tokens = 64});
      start.arrive_and_wait();
      const ClientResponse r = Post(port, kChat, body);
      outcomes[i].status = r.status();
      if (r.status() != 200) return;
      outcomes[i].id = std::stoull(Str(Parse(r.body()), {"id"}).substr(sizeof("chatcmpl-") - 1));
      outcomes[i].timing = TimingOf(r.Header(kTiming));
    });
  }
  for (auto& t : threads) t.join();
  for (const Outcome& o : outcomes) ASSERT_EQ(o.status, 200);
  std::sort(outcomes.begin(), outcomes.end(), [](const Outcome& a, const Outcome& b) { return a.id < b.id; });
  // Three waves of 8: the first admitted at once, the later ones after ~64 decode steps of
  // ~3.5 ms (~230 ms modelled) per wave ahead of them; the margins below allow ~150 ms of
  // arrival spread on a loaded machine.
  auto mean = [&](int from, int to, auto field) {
    double s = 0;
    for (int i = from; i < to; ++i) s += field(outcomes[i].timing);
    return s / (to - from);
  };
  auto queue = [](const Timing& t) { return t.queue; };
  auto ttft = [](const Timing& t) { return t.ttft; };
  const double q_first = mean(0, 8, queue), q_last = mean(16, 24, queue);
  const double t_first = mean(0, 8, ttft), t_last = mean(16, 24, ttft);
  EXPECT_LT(q_first, 0.05);
  EXPECT_GT(q_last, q_first + 0.2) << "first " << q_first << " last " << q_last;
  EXPECT_GT(t_last, t_first + 0.2) << "first " << t_first << " last " << t_last;
  double max_queue = 0;
  for (const Outcome& o : outcomes) {
    EXPECT_GE(o.timing.ttft, o.timing.queue);
    max_queue = std::max(max_queue, o.timing.queue);
  }
  EXPECT_GT(max_queue, 0.3);
  EXPECT_GT(Metric(port, R"(vllm:request_queue_time_seconds_sum{model_name="llama"})"), 1.0);
  EXPECT_EQ(Metric(port, kRunning), 0);
}

}  // namespace
}  // namespace prefix_router::engine
