#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "engine_model/tokenizer.h"
#include "workload/workload.h"
#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

namespace json = boost::json;
using engine_model::CountTokens;
using testing::MustMake;

std::string Slice() {
  return (std::filesystem::path(__FILE__).parent_path() / "../../data/mooncake/conversation_trace_600s.jsonl")
      .lexically_normal()
      .string();
}

// Writes `text` to a fresh file in the test temp directory and returns its path.
std::string WriteTrace(const std::string& text) {
  static int n = 0;
  const std::string path =
      ::testing::TempDir() + "mooncake_test_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".jsonl";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// One line of the Mooncake format.
std::string Line(double ms, uint32_t input, uint32_t output, const std::vector<int>& ids) {
  std::string s = "{\"timestamp\": " + std::to_string(static_cast<long long>(ms)) +
                  ", \"input_length\": " + std::to_string(input) + ", \"output_length\": " + std::to_string(output) +
                  ", \"hash_ids\": [";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]}\n";
}

Result<std::unique_ptr<Workload>> Make(const std::string& text, ParamMap params = {}, uint64_t seed = 1) {
  params["file"] = WriteTrace(text);
  return MakeWorkload("mooncake", params, seed);
}

struct Replayed {
  std::vector<Request> requests;
  std::vector<double> arrivals;
};

Replayed Replay(Workload& w) {
  Replayed out;
  while (true) {
    SessionStart s = w.NextSession();
    if (!s.session) break;
    std::optional<Request> r = s.session->Next("");
    EXPECT_TRUE(r.has_value());
    EXPECT_FALSE(s.session->Next("reply").has_value());
    EXPECT_TRUE(s.arrival_s.has_value());
    out.requests.push_back(std::move(*r));
    out.arrivals.push_back(s.arrival_s.value_or(-1));
  }
  return out;
}

Replayed MustReplay(const std::string& text, ParamMap params = {}, uint64_t seed = 1) {
  auto w = Make(text, std::move(params), seed);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return {};
  return Replay(**w);
}

std::vector<uint32_t> Tok(std::string_view text) {
  std::vector<uint32_t> out;
  engine_model::Tokenize(text, out);
  return out;
}

std::string Content(const Request& r, std::string_view role) {
  for (const Message& m : r.messages) {
    if (m.role == role) return m.content;
  }
  return "";
}

std::vector<engine_model::ChatMessage> ChatOf(const Request& r, bool empty_contents = false) {
  std::vector<engine_model::ChatMessage> out;
  for (const Message& m : r.messages) out.push_back({m.role, empty_contents ? "" : m.content, {}});
  return out;
}

// A bad line stops the workload with the file's path, the line number and the field.
TEST(MooncakeTest, BadLinesNameFileLineAndField) {
  struct Case {
    std::string line;
    std::string expected;
  };
  const std::string head = "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 1, ";
  const Case cases[] = {
      {"{\"timestamp\": 1000, \"input_length\": 600,\n", "invalid JSON"},
      {"[1, 2]\n", "expected a JSON object"},
      {"{\"input_length\": 600, \"output_length\": 1, \"hash_ids\": [0, 1]}\n", "timestamp"},
      {"{\"timestamp\": -5, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [0, 1]}\n", "timestamp"},
      {Line(1000, 0, 1, {}), "input_length"},
      {"{\"timestamp\": 1000, \"input_length\": 600.5, \"output_length\": 1, \"hash_ids\": []}\n", "input_length"},
      {"{\"timestamp\": 1000, \"input_length\": 600, \"hash_ids\": [0, 1]}\n", "output_length"},
      {head + "\"hash_ids\": 3}\n", "hash_ids: expected an array"},
      {head + "\"hash_ids\": [0, -1]}\n", "hash_ids[1]"},
      {head + "\"hash_ids\": [0, \"a\"]}\n", "hash_ids[1]"},
      // Three blocks listed for 600 tokens, or one for 1,100: not Mooncake's 512-token blocks.
      {Line(1000, 600, 1, {0, 1, 2}), "does not fit 3 hash_ids of block_tokens 512"},
      {Line(1000, 1100, 1, {0}), "does not fit 1 hash_ids"},
      {Line(0, 600, 1, {0, 1}), "timestamp decreases"},
  };
  for (const Case& c : cases) {
    // Line 1 is good, line 2 blank (skipped, still counted), line 3 the bad one.
    const std::string path = WriteTrace(Line(500, 600, 10, {0, 1}) + "\n" + c.line);
    auto w = MakeWorkload("mooncake", {{"file", path}}, 1);
    ASSERT_FALSE(w.ok()) << c.line;
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = w.status().message();
    EXPECT_NE(m.find("mooncake " + path + " line 3: "), std::string::npos) << m;
    EXPECT_NE(m.find(c.expected), std::string::npos) << m;
  }
}

// The file is required, must open, and must hold a request in the replayed window.
TEST(MooncakeTest, FileAndWindowErrors) {
  auto none = MakeWorkload("mooncake", {}, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("parameter file is required"), std::string::npos);
  auto missing = MakeWorkload("mooncake", {{"file", "/nonexistent/trace.jsonl"}}, 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/trace.jsonl"), std::string::npos);
  auto empty = Make("\n\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no requests"), std::string::npos);
  auto outside = Make(Line(0, 600, 1, {0, 1}), {{"from_s", "5"}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("no request with from_s"), std::string::npos);
  auto order = Make(Line(0, 600, 1, {0, 1}), {{"from_s", "5"}, {"until_s", "5"}});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find("until_s"), std::string::npos);
  auto small = Make(Line(0, 600, 1, {0, 1}), {{"block_tokens", "8"}});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("block_tokens"), std::string::npos);
}

// Every whole block is exactly block_tokens engine tokens, whatever the block size.
TEST(MooncakeTest, WholeBlocksAreExactlyBlockTokens) {
  for (uint32_t b : {16u, 100u, 512u, 2048u}) {
    const std::string text = Line(0, 4 * b, 5, {0, 1, 2, 3});
    const Replayed r = MustReplay(text, {{"block_tokens", std::to_string(b)}, {"system_blocks", "0"}});
    ASSERT_EQ(r.requests.size(), 1u);
    const std::string user = Content(r.requests[0], "user");
    EXPECT_EQ(CountTokens(user), 4u * b) << b;
    // Each block alone, from a request of that one block.
    for (int id = 0; id < 4; ++id) {
      const Replayed one =
          MustReplay(Line(0, b, 5, {id}), {{"block_tokens", std::to_string(b)}, {"system_blocks", "0"}});
      ASSERT_EQ(one.requests.size(), 1u);
      const std::string block = Content(one.requests[0], "user");
      EXPECT_EQ(CountTokens(block), b) << b << " " << id;
      EXPECT_EQ(block.substr(block.size() - 3), ".\n\n");
    }
  }
}

// Equal ids give equal text wherever they stand, and a concatenation of blocks tokenizes to the
// blocks' tokens back to back: the engine sees equal KV blocks for equal ids.
TEST(MooncakeTest, EqualIdsGiveEqualTextAndTokens) {
  const Replayed r = MustReplay(Line(0, 512, 1, {5}) + Line(0, 512, 1, {7}) + Line(0, 1024, 1, {5, 7}) +
                                    Line(0, 1024, 1, {7, 5}) + Line(0, 1536, 1, {5, 7, 9}),
                                {{"system_blocks", "0"}});
  ASSERT_EQ(r.requests.size(), 5u);
  const std::string a = Content(r.requests[0], "user");
  const std::string b = Content(r.requests[1], "user");
  EXPECT_NE(a, b);
  EXPECT_EQ(Content(r.requests[2], "user"), a + b);
  EXPECT_EQ(Content(r.requests[3], "user"), b + a);
  std::vector<uint32_t> ab = Tok(a);
  const std::vector<uint32_t> tb = Tok(b);
  ab.insert(ab.end(), tb.begin(), tb.end());
  EXPECT_EQ(Tok(a + b), ab);
  // A longer prompt with the same leading ids starts with the same tokens.
  const std::vector<uint32_t> longer = Tok(Content(r.requests[4], "user"));
  ASSERT_GE(longer.size(), ab.size());
  EXPECT_TRUE(std::equal(ab.begin(), ab.end(), longer.begin()));
}

// The prompt's contents hold exactly input_length tokens (the last block cut), and the engine's
// prompt adds only the chat template's tokens.
TEST(MooncakeTest, PromptIsInputLengthPlusTheTemplate) {
  const Replayed r = MustReplay(Line(0, 513, 1, {0, 1}) + Line(0, 1000, 1, {0, 1}) + Line(0, 1024, 1, {0, 1}) +
                                Line(0, 1, 1, {0}) + Line(0, 1300, 1, {0, 1, 3}));
  ASSERT_EQ(r.requests.size(), 5u);
  const uint32_t inputs[] = {513, 1000, 1024, 1, 1300};
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const Request& q = r.requests[i];
    size_t content = 0;
    for (const Message& m : q.messages) content += CountTokens(m.content);
    EXPECT_EQ(content, inputs[i]) << i;
    const size_t prompt = engine_model::RenderChat(ChatOf(q)).size();
    const size_t template_tokens = engine_model::RenderChat(ChatOf(q, true)).size();
    EXPECT_EQ(prompt, inputs[i] + template_tokens) << i;
  }
  // System and user messages, as the gateway's clients send them: 17 template tokens.
  EXPECT_EQ(engine_model::RenderChat(ChatOf(r.requests[0], true)).size(), 17u);
  // A cut block is a token prefix of the whole block.
  const std::vector<uint32_t> cut = Tok(Content(r.requests[1], "user"));
  const std::vector<uint32_t> whole = Tok(Content(r.requests[2], "user"));
  ASSERT_EQ(cut.size(), 1000u - 512u);
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), whole.begin()));
  // Block 0 cut to one token.
  EXPECT_EQ(r.requests[3].messages.size(), 1u);
  EXPECT_EQ(CountTokens(Content(r.requests[3], "system")), 1u);
}

// Tokens beyond the listed blocks (a trace listing whole blocks only) are a partial block of the
// request's own: the listed blocks keep their text, the rest differs between requests.
TEST(MooncakeTest, TokensBeyondTheListedBlocksAreTheRequestsOwn) {
  const Replayed r =
      MustReplay(Line(0, 1024 + 100, 1, {0, 1}) + Line(0, 1024 + 100, 1, {0, 1}) + Line(0, 1024, 1, {0, 1}));
  ASSERT_EQ(r.requests.size(), 3u);
  const std::string blocks = Content(r.requests[2], "user");
  const std::string a = Content(r.requests[0], "user");
  const std::string b = Content(r.requests[1], "user");
  EXPECT_EQ(CountTokens(a), 512u + 100u);
  EXPECT_EQ(a.substr(0, blocks.size()), blocks);
  EXPECT_EQ(b.substr(0, blocks.size()), blocks);
  EXPECT_NE(a, b);
}

// from_s and until_s keep the requests recorded in [from_s, until_s) and times restart at the
// first one kept.
TEST(MooncakeTest, WindowFiltersAndRebasesArrivals) {
  const std::string text = Line(0, 600, 1, {0, 1}) + Line(1000, 600, 2, {0, 2}) + Line(2500, 600, 3, {0, 3}) +
                           Line(3000, 600, 4, {0, 4}) + Line(4000, 600, 5, {0, 5});
  const Replayed all = MustReplay(text);
  EXPECT_EQ(all.arrivals, (std::vector<double>{0, 1, 2.5, 3, 4}));
  const Replayed mid = MustReplay(text, {{"from_s", "1"}, {"until_s", "3"}});
  ASSERT_EQ(mid.requests.size(), 2u);
  EXPECT_EQ(mid.arrivals, (std::vector<double>{0, 1.5}));
  EXPECT_EQ(mid.requests[0].max_tokens, 2u);
  EXPECT_EQ(mid.requests[1].max_tokens, 3u);
  const Replayed tail = MustReplay(text, {{"from_s", "2.6"}});
  EXPECT_EQ(tail.arrivals, (std::vector<double>{0, 1}));
  EXPECT_EQ(tail.requests[0].label, "conv-4");
  // The same request gets the same text inside or outside a window.
  EXPECT_EQ(mid.requests[0].messages[1].content, all.requests[1].messages[1].content);
}

// system_blocks leading blocks form the system message, the rest the user message.
TEST(MooncakeTest, SystemBlocksSplitTheMessages) {
  const std::string text = Line(0, 1800, 1, {0, 1, 2, 3});
  const Replayed one = MustReplay(text);
  ASSERT_EQ(one.requests[0].messages.size(), 2u);
  EXPECT_EQ(one.requests[0].messages[0].role, "system");
  EXPECT_EQ(CountTokens(one.requests[0].messages[0].content), 512u);
  EXPECT_EQ(one.requests[0].messages[1].role, "user");
  EXPECT_EQ(CountTokens(one.requests[0].messages[1].content), 1800u - 512u);
  EXPECT_EQ(one.requests[0].label, "conv-1");

  // Two system blocks: the same text, cut between messages one block later.
  const Replayed two = MustReplay(text, {{"system_blocks", "2"}});
  const std::string s1 = Content(one.requests[0], "system");
  const std::string s2 = Content(two.requests[0], "system");
  EXPECT_EQ(CountTokens(s2), 1024u);
  EXPECT_EQ(s2.substr(0, s1.size()), s1);
  EXPECT_EQ(s2.substr(s1.size()) + Content(two.requests[0], "user"), Content(one.requests[0], "user"));
  EXPECT_EQ(two.requests[0].label, "conv-2");

  const Replayed none = MustReplay(text, {{"system_blocks", "0"}});
  ASSERT_EQ(none.requests[0].messages.size(), 1u);
  EXPECT_EQ(none.requests[0].messages[0].role, "user");
  EXPECT_EQ(none.requests[0].label, "conv-0");

  const Replayed all = MustReplay(text, {{"system_blocks", "9"}});
  ASSERT_EQ(all.requests[0].messages.size(), 1u);
  EXPECT_EQ(all.requests[0].messages[0].role, "system");
  EXPECT_EQ(CountTokens(all.requests[0].messages[0].content), 1800u);
  EXPECT_EQ(all.requests[0].label, "system-only");
}

// output_length is max_tokens, at least 1; requests are chat completions without a group.
TEST(MooncakeTest, OutputLengthIsMaxTokens) {
  const Replayed r =
      MustReplay(Line(0, 600, 0, {0, 1}) + Line(0, 600, 1, {0, 1}) + Line(0, 600, 2000, {0, 1}), {{"model", "kimi"}});
  ASSERT_EQ(r.requests.size(), 3u);
  EXPECT_EQ(r.requests[0].max_tokens, 1u);
  EXPECT_EQ(r.requests[1].max_tokens, 1u);
  EXPECT_EQ(r.requests[2].max_tokens, 2000u);
  for (const Request& q : r.requests) {
    EXPECT_EQ(q.api, api::ApiKind::kChatCompletions);
    EXPECT_EQ(q.model, "kimi");
    EXPECT_TRUE(q.routing_group.empty());
  }
}

// A seed fixes the texts: the same seed gives identical bodies, another seed other texts of the
// same lengths and the same sharing.
TEST(MooncakeTest, DeterministicPerSeed) {
  const std::string text = Line(0, 1000, 9, {0, 1}) + Line(1500, 1400, 9, {0, 1, 2});
  const Replayed a = MustReplay(text, {}, 7);
  const Replayed b = MustReplay(text, {}, 7);
  const Replayed c = MustReplay(text, {}, 8);
  ASSERT_EQ(a.requests.size(), 2u);
  ASSERT_EQ(c.requests.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(RenderBody(a.requests[i], true, "m"), RenderBody(b.requests[i], true, "m"));
    EXPECT_NE(RenderBody(a.requests[i], true, "m"), RenderBody(c.requests[i], true, "m"));
    EXPECT_EQ(engine_model::RenderChat(ChatOf(a.requests[i])).size(),
              engine_model::RenderChat(ChatOf(c.requests[i])).size());
  }
  EXPECT_EQ(Content(c.requests[0], "system"), Content(c.requests[1], "system"));
  EXPECT_EQ(a.arrivals, c.arrivals);
}

// The committed slice replays whole: 1,750 requests over its first 600 s, every prompt of
// input_length tokens behind the one shared system block.
TEST(MooncakeTest, CommittedSliceReplays) {
  auto w = MustMake("mooncake", {{"file", Slice()}});
  ASSERT_NE(w, nullptr);
  const auto p = w->Parameters();
  EXPECT_EQ(p.at("file"), Slice());
  EXPECT_EQ(p.at("block_tokens"), "512");
  EXPECT_EQ(p.at("system_blocks"), "1");
  EXPECT_EQ(p.at("from_s"), "0");
  EXPECT_EQ(p.at("until_s"), "none");
  EXPECT_EQ(p.at("model"), "");
  EXPECT_EQ(w->name(), "mooncake");
  EXPECT_EQ(w->mean_turns(), 1.0);
  std::ifstream lines(Slice());
  size_t n = 0;
  double last = 0;
  std::string system, line;
  while (true) {
    SessionStart s = w->NextSession();
    if (!s.session) break;
    ASSERT_TRUE(std::getline(lines, line));
    ASSERT_TRUE(s.arrival_s.has_value());
    EXPECT_GE(*s.arrival_s, last);
    last = *s.arrival_s;
    // Building every request costs seconds under the sanitizers: one in 10 is checked in full.
    if (n++ % 10 != 0) continue;
    const json::object recorded = json::parse(line).as_object();
    std::optional<Request> r = s.session->Next("");
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(r->messages.size(), 2u);
    if (system.empty()) system = r->messages[0].content;
    EXPECT_EQ(r->messages[0].content, system);
    EXPECT_EQ(CountTokens(r->messages[0].content) + CountTokens(r->messages[1].content),
              recorded.at("input_length").to_number<size_t>());
    EXPECT_EQ(r->max_tokens, recorded.at("output_length").to_number<uint32_t>());
    EXPECT_EQ(r->label, "conv-" + std::to_string(recorded.at("hash_ids").as_array()[1].to_number<uint64_t>()));
  }
  EXPECT_EQ(n, 1750u);
  EXPECT_EQ(last, 597.0);
}

}  // namespace
}  // namespace prefix_router::workload
