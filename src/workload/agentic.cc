// agentic: tenants running tool-using agent sessions. Every step of a task resends the
// tenant's long tool/instruction block, the task and the whole trajectory so far (assistant
// tool calls and tool results), so prefixes are long and grow quickly; tenants 0 and 1 run the
// same agent framework (an identical block), so only their routing groups tell them apart.
// See docs/workloads.md.

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine_model/tokenizer.h"
#include "workload/generators.h"
#include "workload/params.h"
#include "workload/sampling.h"
#include "workload/text.h"

namespace prefix_router::workload {
namespace {

constexpr std::string_view kName = "agentic";

struct AgenticConfig {
  uint32_t tenants = 4;
  double tenant_zipf = 1.0;
  Lengths tools_tokens{6000, 0.5, 1500, 16000};
  uint32_t task_tokens_min = 100;
  uint32_t task_tokens_max = 400;
  Lengths tool_result_tokens{400, 1.0, 20, 4000};
  uint32_t steps_min = 4;
  uint32_t steps_max = 20;
  Lengths reply_tokens{120, 0.6, 16, 512};
  std::string cache_key = "tenant";  // tenant | session | none
  double think_s = 0;
  std::string model;
};

struct AgenticShared {
  AgenticConfig c;
  std::vector<std::string> blocks;  // by tenant
  ZipfTable tenant_pick{1, 0};
};

// A tool block: a distinct first line, then one section per tool (a heading and a paragraph
// of 150 to 400 tokens), about `tokens` tokens in all.
std::string ToolBlock(Rng& rng, uint32_t framework, uint32_t tokens) {
  std::string s = "Agent framework " + std::to_string(framework) + ":";
  AppendTitle(rng, 2, s);
  s += "\n\nYou can call the tools below.";
  size_t used = engine_model::CountTokens(s);
  for (uint32_t tool = 1; used < tokens; ++tool) {
    const size_t start = s.size();
    s += "\n\nTool " + std::to_string(tool) + ":";
    AppendTitle(rng, 2, s);
    s += "\n";
    used += engine_model::CountTokens(std::string_view(s).substr(start));
    const size_t left = tokens > used ? tokens - used : 1;
    const size_t section = std::min<size_t>(UniformInt(rng, 150, 400), left);
    used += AppendProse(rng, section, s);
  }
  return s;
}

class AgenticSession : public Session {
 public:
  AgenticSession(std::shared_ptr<const AgenticShared> shared, uint64_t id, uint64_t seed)
      : shared_(std::move(shared)), id_(id), rng_(seed) {
    const AgenticConfig& c = shared_->c;
    tenant_ = static_cast<uint32_t>(shared_->tenant_pick.Draw(rng_));
    steps_ = UniformInt(rng_, c.steps_min, c.steps_max);
    history_.push_back(Message{"system", shared_->blocks[tenant_]});
    const uint32_t task = UniformInt(rng_, c.task_tokens_min, c.task_tokens_max);
    history_.push_back(Message{"user", HeadedText(rng_, "Task " + std::to_string(id_) + ":", task)});
    if (c.cache_key == "tenant") {
      group_ = "tenant-" + std::to_string(tenant_);
    } else if (c.cache_key == "session") {
      group_ = "tenant-" + std::to_string(tenant_) + "-session-" + std::to_string(id_);
    }
  }

  double think_s() const override { return shared_->c.think_s; }

  std::optional<Request> Next(std::string_view previous_reply) override {
    if (step_ >= steps_) return std::nullopt;
    const AgenticConfig& c = shared_->c;
    if (step_ > 0) {
      // The previous reply is the tool call; a failed step stands in one of its length.
      std::string call(previous_reply);
      if (call.empty()) AppendProse(rng_, last_max_tokens_, call);
      history_.push_back(Message{"assistant", std::move(call)});
      history_.push_back(Message{
          "tool", HeadedText(rng_, "Result of step " + std::to_string(step_) + ":", c.tool_result_tokens.Draw(rng_))});
    }
    ++step_;
    Request r;
    r.model = c.model;
    r.messages = history_;
    r.routing_group = group_;
    r.max_tokens = last_max_tokens_ = c.reply_tokens.Draw(rng_);
    r.label = "tenant-" + std::to_string(tenant_) + "/tools";
    return r;
  }

 private:
  std::shared_ptr<const AgenticShared> shared_;
  const uint64_t id_;
  Rng rng_;
  uint32_t tenant_ = 0;
  uint32_t steps_ = 1;
  uint32_t step_ = 0;
  uint32_t last_max_tokens_ = 0;
  std::string group_;
  std::vector<Message> history_;
};

class AgenticWorkload : public Workload {
 public:
  AgenticWorkload(AgenticConfig c, std::map<std::string, std::string> params, uint64_t seed)
      : params_(std::move(params)), seed_(seed) {
    auto shared = std::make_shared<AgenticShared>();
    shared->tenant_pick = ZipfTable(c.tenants, c.tenant_zipf);
    for (uint32_t k = 0; k < c.tenants; ++k) {
      if (k == 1) {
        // Tenant 1 runs tenant 0's framework: the identical block.
        shared->blocks.push_back(shared->blocks[0]);
        continue;
      }
      Rng rng(SubSeed(seed, kStreamToolBlock, k));
      shared->blocks.push_back(ToolBlock(rng, k, c.tools_tokens.Draw(rng)));
    }
    shared->c = std::move(c);
    shared_ = std::move(shared);
  }

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return (static_cast<double>(shared_->c.steps_min) + shared_->c.steps_max) / 2; }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    const uint64_t id = counter_++;
    return SessionStart{std::make_unique<AgenticSession>(shared_, id, SubSeed(seed_, kStreamSession, id)),
                        std::nullopt};
  }

 private:
  const std::map<std::string, std::string> params_;
  const uint64_t seed_;
  std::shared_ptr<const AgenticShared> shared_;
  uint64_t counter_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeAgentic(const ParamMap& params, uint64_t seed) {
  ParamReader p(kName, params);
  AgenticConfig c;
  c.tenants = p.Int("tenants", c.tenants, 1, 10'000);
  c.tenant_zipf = p.Real("tenant_zipf", c.tenant_zipf, 0, 10);
  c.tools_tokens = ReadLengths(p, "tools_tokens", c.tools_tokens);
  c.task_tokens_min = p.Int("task_tokens_min", c.task_tokens_min, 1, 1'000'000);
  c.task_tokens_max = p.Int("task_tokens_max", c.task_tokens_max, 1, 1'000'000);
  p.CheckOrder("task_tokens_min", c.task_tokens_min, "task_tokens_max", c.task_tokens_max);
  c.tool_result_tokens = ReadLengths(p, "tool_result_tokens", c.tool_result_tokens);
  c.steps_min = p.Int("steps_min", c.steps_min, 1, 10'000);
  c.steps_max = p.Int("steps_max", c.steps_max, 1, 10'000);
  p.CheckOrder("steps_min", c.steps_min, "steps_max", c.steps_max);
  c.reply_tokens = ReadLengths(p, "reply_tokens", c.reply_tokens);
  c.cache_key = p.Choice("cache_key", c.cache_key, {"tenant", "session", "none"});
  c.think_s = p.Real("think_s", c.think_s, 0, 86'400);
  c.model = p.Text("model", "");
  if (Status s = p.Finish(); !s.ok()) return s;
  return std::unique_ptr<Workload>(std::make_unique<AgenticWorkload>(std::move(c), p.effective(), seed));
}

}  // namespace prefix_router::workload
