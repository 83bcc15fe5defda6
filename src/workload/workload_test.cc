#include "workload/workload.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <filesystem>
#include <string>

#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

namespace json = boost::json;
using testing::MustMake;
using testing::RunSessions;

std::string ExampleTrace() {
  return (std::filesystem::path(__FILE__).parent_path() / "../../examples/trace-example.jsonl")
      .lexically_normal()
      .string();
}

std::string MooncakeSlice() {
  return (std::filesystem::path(__FILE__).parent_path() / "../../data/mooncake/conversation_trace_600s.jsonl")
      .lexically_normal()
      .string();
}

// Small parameters per workload, so tests stay fast under sanitizers.
ParamMap SmallParams(std::string_view name) {
  if (name == "long-context" || name == "noisy-native") return {{"documents", "8"}, {"prefix_tokens", "400"}};
  if (name == "agentic") return {{"tools_tokens_median", "1500"}, {"steps_max", "6"}};
  if (name == "rag") return {{"corpus_documents", "50"}};
  if (name == "trace") return {{"file", ExampleTrace()}};
  if (name == "mooncake") return {{"file", MooncakeSlice()}, {"until_s", "10"}};
  return {};
}

std::vector<std::string> Bodies(std::string_view name, uint64_t seed, size_t sessions) {
  std::unique_ptr<Workload> w = MustMake(name, SmallParams(name), seed);
  std::vector<std::string> out;
  if (!w) return out;
  for (const Request& r : RunSessions(*w, sessions)) {
    out.push_back(std::string(PathFor(r.api)) + " " + r.routing_group + " " + r.label + " " + RenderBody(r, true, "m"));
  }
  return out;
}

// The seven documented names are listed and each can be made.
TEST(WorkloadTest, NamesAreListedAndMakeable) {
  const std::vector<std::string_view> names = WorkloadNames();
  ASSERT_EQ(names.size(), 7u);
  for (std::string_view n : names) {
    std::unique_ptr<Workload> w = MustMake(n, SmallParams(n));
    ASSERT_NE(w, nullptr) << n;
    EXPECT_EQ(w->name(), n);
    EXPECT_GE(w->mean_turns(), 1.0);
  }
}

// An unknown workload name is InvalidArgument naming it.
TEST(WorkloadTest, UnknownWorkloadIsRejected) {
  Result<std::unique_ptr<Workload>> w = MakeWorkload("chatty", {}, 1);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("chatty"), std::string::npos);
}

// Same seed: identical requests, turn for turn; another seed: different ones.
TEST(WorkloadTest, GeneratedWorkloadsAreDeterministicGivenTheSeed) {
  for (std::string_view n : {"long-context", "sharegpt-like", "agentic", "rag", "noisy-native"}) {
    const std::vector<std::string> a = Bodies(n, 42, 12);
    const std::vector<std::string> b = Bodies(n, 42, 12);
    const std::vector<std::string> c = Bodies(n, 43, 12);
    ASSERT_FALSE(a.empty()) << n;
    EXPECT_EQ(a, b) << n;
    EXPECT_NE(a, c) << n;
  }
}

// An unknown parameter is rejected by every workload, naming the parameter.
TEST(WorkloadTest, UnknownParameterIsRejected) {
  for (std::string_view n : WorkloadNames()) {
    ParamMap p = SmallParams(n);
    p["no_such_knob"] = "1";
    Result<std::unique_ptr<Workload>> w = MakeWorkload(n, p, 1);
    ASSERT_FALSE(w.ok()) << n;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("no_such_knob"), std::string::npos) << w.status().message();
  }
}

// Bad values are InvalidArgument naming the parameter.
TEST(WorkloadTest, BadValuesAreRejectedNamingTheParameter) {
  struct Case {
    std::string_view workload;
    std::string name;
    std::string value;
  };
  const Case cases[] = {
      {"long-context", "documents", "0"},
      {"long-context", "documents", "ten"},
      {"long-context", "documents", "5x"},
      {"long-context", "prefix_tokens", "-3"},
      {"long-context", "popularity", "zipf:"},
      {"long-context", "popularity", "zipf:abc"},
      {"long-context", "popularity", "zipf:-1"},
      {"long-context", "popularity", "pareto"},
      {"long-context", "output_tokens_sigma", "nan"},
      {"long-context", "question_tokens_min", "100"},  // above question_tokens_max (80)
      {"sharegpt-like", "system_prob", "1.5"},
      {"sharegpt-like", "turns_mean", "0.5"},
      {"sharegpt-like", "think_s", "-1"},
      {"sharegpt-like", "user_tokens_min", "2000"},  // above user_tokens_max
      {"agentic", "cache_key", "user"},
      {"agentic", "steps_min", "30"},  // above steps_max
      {"agentic", "tenants", "0"},
      {"rag", "retrieved", "0"},
      {"rag", "retrieved", "60"},  // more than corpus_documents (50)
      {"rag", "cache_key", "session"},
      {"trace", "loop", "maybe"},
      {"mooncake", "block_tokens", "8"},
      {"mooncake", "system_blocks", "-1"},
      {"mooncake", "from_s", "soon"},
      {"mooncake", "until_s", "0"},  // not above from_s
  };
  for (const Case& c : cases) {
    ParamMap p = SmallParams(c.workload);
    p[c.name] = c.value;
    Result<std::unique_ptr<Workload>> w = MakeWorkload(c.workload, p, 1);
    ASSERT_FALSE(w.ok()) << c.workload << " " << c.name << "=" << c.value;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find(c.name), std::string::npos) << w.status().message();
  }
}

// Parameters() reports every default and the given overrides.
TEST(WorkloadTest, ParametersReportEffectiveValues) {
  std::unique_ptr<Workload> lc = MustMake("long-context", {{"popularity", "zipf:1.0"}});
  const auto p = lc->Parameters();
  EXPECT_EQ(p.at("documents"), "640");
  EXPECT_EQ(p.at("prefix_tokens"), "8000");
  EXPECT_EQ(p.at("preamble_tokens"), "300");
  EXPECT_EQ(p.at("question_tokens_min"), "20");
  EXPECT_EQ(p.at("question_tokens_max"), "80");
  EXPECT_EQ(p.at("popularity"), "zipf:1");
  EXPECT_EQ(p.at("output_tokens_median"), "128");
  EXPECT_EQ(p.at("output_tokens_sigma"), "0.6");
  EXPECT_EQ(p.at("output_tokens_min"), "16");
  EXPECT_EQ(p.at("output_tokens_max"), "512");
  EXPECT_EQ(p.at("model"), "");

  const auto s = MustMake("sharegpt-like", {})->Parameters();
  EXPECT_EQ(s.at("system_prob"), "0.25");
  EXPECT_EQ(s.at("system_prompts"), "12");
  EXPECT_EQ(s.at("turns_mean"), "5");
  EXPECT_EQ(s.at("turns_max"), "20");
  EXPECT_EQ(s.at("user_tokens_median"), "80");
  EXPECT_EQ(s.at("reply_tokens_median"), "220");
  EXPECT_EQ(s.at("think_s"), "10");

  const auto a = MustMake("agentic", {{"cache_key", "session"}})->Parameters();
  EXPECT_EQ(a.at("tenants"), "4");
  EXPECT_EQ(a.at("cache_key"), "session");
  EXPECT_EQ(a.at("tools_tokens_median"), "6000");
  EXPECT_EQ(a.at("steps_min"), "4");
  EXPECT_EQ(a.at("steps_max"), "20");

  const auto r = MustMake("rag", {})->Parameters();
  EXPECT_EQ(r.at("corpus_documents"), "2000");
  EXPECT_EQ(r.at("retrieved"), "4");
  EXPECT_EQ(r.at("doc_zipf"), "1.1");
  EXPECT_EQ(r.at("tenants"), "3");

  const auto t = MustMake("trace", {{"file", ExampleTrace()}})->Parameters();
  EXPECT_EQ(t.at("file"), ExampleTrace());
  EXPECT_EQ(t.at("loop"), "false");
}

Request ChatRequest() {
  Request r;
  r.messages = {{"system", "Be \"brief\".\n\tTabs\\slashes"},
                {"user", "ctl:\x01\x1f\x7f end \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"}};
  r.max_tokens = 77;
  r.routing_group = "tenant-1";
  return r;
}

// A chat body parses back to the same messages, with stream options and the cache key.
TEST(RenderBodyTest, ChatRoundTripsThroughJson) {
  const Request r = ChatRequest();
  const json::value v = json::parse(RenderBody(r, true, "llama"));
  const json::object& o = v.as_object();
  EXPECT_EQ(o.at("model").as_string(), "llama");
  const json::array& m = o.at("messages").as_array();
  ASSERT_EQ(m.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(m[i].at("role").as_string(), r.messages[i].role);
    EXPECT_EQ(m[i].at("content").as_string(), r.messages[i].content);
  }
  EXPECT_EQ(o.at("max_tokens").as_int64(), 77);
  EXPECT_TRUE(o.at("stream").as_bool());
  EXPECT_TRUE(o.at("stream_options").at("include_usage").as_bool());
  EXPECT_EQ(o.at("prompt_cache_key").as_string(), "tenant-1");
}

// Without streaming there are no stream options; without a group no prompt_cache_key; a set
// model wins over the default.
TEST(RenderBodyTest, OptionalFieldsAreOmitted) {
  Request r = ChatRequest();
  r.routing_group.clear();
  r.model = "lora-a";
  const json::object o = json::parse(RenderBody(r, false, "llama")).as_object();
  EXPECT_FALSE(o.at("stream").as_bool());
  EXPECT_FALSE(o.contains("stream_options"));
  EXPECT_FALSE(o.contains("prompt_cache_key"));
  EXPECT_EQ(o.at("model").as_string(), "lora-a");
}

// Malformed UTF-8 still gives valid JSON (replacement characters), never a parse error.
TEST(RenderBodyTest, InvalidUtf8StillGivesValidJson) {
  Request r;
  r.api = api::ApiKind::kCompletions;
  r.prompt = std::string(
      "a\xff"
      "b\xc3"
      "c\xed\xa0\x80"
      "d\xe2\x82",
      11);
  boost::system::error_code ec;
  const json::value v = json::parse(RenderBody(r, false, "m"), ec);
  ASSERT_FALSE(ec) << RenderBody(r, false, "m");
  const std::string prompt(v.at("prompt").as_string());
  EXPECT_EQ(prompt.substr(0, 1), "a");
  EXPECT_NE(prompt.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_NE(prompt.find('d'), std::string::npos);
}

// Every character that needs escaping is escaped wherever it sits in a long text (the escaper
// skips plain ASCII in blocks).
TEST(RenderBodyTest, EscapesAtEveryOffsetOfLongText) {
  const std::string specials[] = {"\"", "\\", "\n", "\x01", "\x1f", "\x7f", "\xc3\xa9", "\xf0\x9f\x98\x80"};
  for (const std::string& special : specials) {
    for (size_t at = 0; at < 80; ++at) {
      Request r;
      r.api = api::ApiKind::kCompletions;
      r.prompt = std::string(100, 'a');
      r.prompt.insert(at, special);
      boost::system::error_code ec;
      const std::string body = RenderBody(r, false, "m");
      const json::value v = json::parse(body, ec);
      ASSERT_FALSE(ec) << at << " " << body;
      ASSERT_EQ(v.at("prompt").as_string(), r.prompt) << at;
    }
  }
  Request bad;
  bad.api = api::ApiKind::kCompletions;
  bad.prompt = std::string(100, 'a');
  bad.prompt[50] = '\xff';
  boost::system::error_code ec;
  const json::value v = json::parse(RenderBody(bad, false, "m"), ec);
  ASSERT_FALSE(ec);
  EXPECT_EQ(v.at("prompt").as_string(), std::string(50, 'a') + "\xEF\xBF\xBD" + std::string(49, 'a'));
}

// Completions bodies carry the prompt; native bodies are the recorded body unchanged, else a
// chat- or prompt-shaped body without prompt_cache_key (the group goes in a header).
TEST(RenderBodyTest, CompletionsAndNativeShapes) {
  Request c;
  c.api = api::ApiKind::kCompletions;
  c.prompt = "Once upon a time";
  c.routing_group = "g";
  const json::object co = json::parse(RenderBody(c, false, "m")).as_object();
  EXPECT_EQ(co.at("prompt").as_string(), "Once upon a time");
  EXPECT_EQ(co.at("prompt_cache_key").as_string(), "g");
  EXPECT_FALSE(co.contains("messages"));

  Request n;
  n.api = api::ApiKind::kNative;
  n.body = "{\"inputs\": \"hi\",  \"parameters\": {\"max_new_tokens\": 1.0e1}}";
  EXPECT_EQ(RenderBody(n, true, "m"), n.body);

  n.body.clear();
  n.messages = {{"user", "hello"}};
  n.routing_group = "g";
  const json::object no = json::parse(RenderBody(n, false, "m")).as_object();
  EXPECT_EQ(no.at("messages").as_array().size(), 1u);
  EXPECT_FALSE(no.contains("prompt_cache_key"));

  n.messages.clear();
  n.prompt = "p";
  const json::object np = json::parse(RenderBody(n, false, "m")).as_object();
  EXPECT_EQ(np.at("prompt").as_string(), "p");

  EXPECT_EQ(PathFor(api::ApiKind::kChatCompletions), "/v1/chat/completions");
  EXPECT_EQ(PathFor(api::ApiKind::kCompletions), "/v1/completions");
  EXPECT_EQ(PathFor(api::ApiKind::kNative), "/invocations");
}

}  // namespace
}  // namespace prefix_router::workload
