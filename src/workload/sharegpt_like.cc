// sharegpt-like: synthetic short multi-turn chats shaped like public chat logs
// (ShareGPT, LMSYS-Chat-1M): each turn resends the whole history, so turn k+1's prompt is turn
// k's prompt plus the reply and a new user message. See docs/workloads.md for the statistics.

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

constexpr std::string_view kName = "sharegpt-like";

struct ShareGptConfig {
  double system_prob = 0.25;
  uint32_t system_prompts = 12;
  double system_zipf = 1.0;
  Lengths system_tokens{250, 0.8, 30, 1500};
  double turns_mean = 5;
  uint32_t turns_max = 20;
  Lengths user_tokens{80, 1.0, 4, 1500};
  Lengths reply_tokens{220, 0.8, 8, 1024};
  double think_s = 10;
  std::string model;
};

// Immutable after the workload is made; sessions share it.
struct ShareGptShared {
  ShareGptConfig c;
  std::vector<std::string> system_prompts;
};

class ShareGptSession : public Session {
 public:
  ShareGptSession(std::shared_ptr<const ShareGptShared> shared, const ZipfTable& system_pick, uint64_t id,
                  uint64_t seed)
      : shared_(std::move(shared)), id_(id), rng_(seed) {
    const ShareGptConfig& c = shared_->c;
    if (rng_.NextDouble() < c.system_prob) {
      system_ = static_cast<int>(system_pick.Draw(rng_));
      history_.push_back(Message{"system", shared_->system_prompts[system_]});
    }
    turns_ = GeometricInt(rng_, c.turns_mean, c.turns_max);
  }

  double think_s() const override { return shared_->c.think_s; }

  std::optional<Request> Next(std::string_view previous_reply) override {
    if (turn_ >= turns_) return std::nullopt;
    const ShareGptConfig& c = shared_->c;
    if (turn_ > 0) {
      std::string reply(previous_reply);
      // A failed turn has no reply text; a client retrying the conversation would still have
      // some answer in its history, so stand in one of the requested length.
      if (reply.empty()) AppendProse(rng_, last_max_tokens_, reply);
      history_.push_back(Message{"assistant", std::move(reply)});
    }
    // The opening names the chat and the turn, so two chats with the same system prompt
    // differ right after it.
    std::string user = "Chat " + std::to_string(id_) + ", message " + std::to_string(turn_ + 1) + ":";
    const uint32_t target = c.user_tokens.Draw(rng_);
    const size_t header = engine_model::CountTokens(user);
    AppendProse(rng_, target > header ? target - header : 1, user, '?');
    history_.push_back(Message{"user", std::move(user)});
    ++turn_;

    Request r;
    r.model = c.model;
    r.messages = history_;
    r.max_tokens = last_max_tokens_ = c.reply_tokens.Draw(rng_);
    if (system_ >= 0) r.label = "system-" + std::to_string(system_);
    return r;
  }

 private:
  std::shared_ptr<const ShareGptShared> shared_;
  const uint64_t id_;
  Rng rng_;
  int system_ = -1;
  uint32_t turns_ = 1;
  uint32_t turn_ = 0;
  uint32_t last_max_tokens_ = 0;
  std::vector<Message> history_;
};

class ShareGptWorkload : public Workload {
 public:
  ShareGptWorkload(ShareGptConfig c, std::map<std::string, std::string> params, uint64_t seed)
      : params_(std::move(params)), seed_(seed), system_pick_(c.system_prompts, c.system_zipf) {
    auto shared = std::make_shared<ShareGptShared>();
    shared->c = std::move(c);
    for (uint32_t k = 0; k < shared->c.system_prompts; ++k) {
      Rng rng(SubSeed(seed, kStreamSystemPrompt, k));
      const uint32_t target = shared->c.system_tokens.Draw(rng);
      std::string s = "Assistant profile " + std::to_string(k) + ":";
      AppendTitle(rng, 2, s);
      s += "\n\n";
      const size_t header = engine_model::CountTokens(s);
      if (target > header) AppendProse(rng, target - header, s);
      shared->system_prompts.push_back(std::move(s));
    }
    shared_ = std::move(shared);
  }

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return GeometricClampedMean(shared_->c.turns_mean, shared_->c.turns_max); }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    const uint64_t id = counter_++;
    return SessionStart{
        std::make_unique<ShareGptSession>(shared_, system_pick_, id, SubSeed(seed_, kStreamSession, id)), std::nullopt};
  }

 private:
  const std::map<std::string, std::string> params_;
  const uint64_t seed_;
  const ZipfTable system_pick_;
  std::shared_ptr<const ShareGptShared> shared_;
  uint64_t counter_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeShareGptLike(const ParamMap& params, uint64_t seed) {
  ParamReader p(kName, params);
  ShareGptConfig c;
  c.system_prob = p.Real("system_prob", c.system_prob, 0, 1);
  c.system_prompts = p.Int("system_prompts", c.system_prompts, 1, 100'000);
  c.system_zipf = p.Real("system_zipf", c.system_zipf, 0, 10);
  c.system_tokens = ReadLengths(p, "system_tokens", c.system_tokens);
  c.turns_mean = p.Real("turns_mean", c.turns_mean, 1, 1000);
  c.turns_max = p.Int("turns_max", c.turns_max, 1, 10'000);
  c.user_tokens = ReadLengths(p, "user_tokens", c.user_tokens);
  c.reply_tokens = ReadLengths(p, "reply_tokens", c.reply_tokens);
  c.think_s = p.Real("think_s", c.think_s, 0, 86'400);
  c.model = p.Text("model", "");
  if (Status s = p.Finish(); !s.ok()) return s;
  return std::unique_ptr<Workload>(std::make_unique<ShareGptWorkload>(std::move(c), p.effective(), seed));
}

}  // namespace prefix_router::workload
