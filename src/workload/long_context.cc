// long-context: the published prefix-aware routing benchmark (Llama 3.1 70B on 7 instances):
// every request carries one of `documents` long documents behind a shared instruction
// preamble, followed by a short question of its own. See docs/workloads.md for the defaults.

#include <charconv>
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

constexpr std::string_view kName = "long-context";

struct LongContextConfig {
  uint32_t documents = 640;
  uint32_t prefix_tokens = 8000;
  uint32_t preamble_tokens = 300;
  uint32_t question_tokens_min = 20;
  uint32_t question_tokens_max = 80;
  double zipf_s = 0;  // 0 = uniform
  double output_tokens_median = 128;
  double output_tokens_sigma = 0.6;
  uint32_t output_tokens_min = 16;
  uint32_t output_tokens_max = 512;
  std::string model;
};

// "uniform" or "zipf:S" with 0 < S <= 10.
bool ParsePopularity(std::string_view text, double& s) {
  if (text == "uniform") {
    s = 0;
    return true;
  }
  if (text.substr(0, 5) != "zipf:") return false;
  const std::string_view number = text.substr(5);
  double v = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !(v > 0) || !(v <= 10)) {
    return false;
  }
  s = v;
  return true;
}

class LongContextWorkload : public Workload {
 public:
  LongContextWorkload(LongContextConfig c, std::map<std::string, std::string> params, uint64_t seed)
      : c_(std::move(c)),
        params_(std::move(params)),
        seed_(seed),
        rng_(SubSeed(seed, kStreamWorkload, 0)),
        popularity_(c_.documents, c_.zipf_s),
        system_(c_.documents) {
    if (c_.preamble_tokens > 0) {
      Rng rng(SubSeed(seed_, kStreamPreamble, 0));
      preamble_ = "Instructions.";
      const size_t header = engine_model::CountTokens(preamble_);
      if (c_.preamble_tokens > header) {
        AppendProse(rng, c_.preamble_tokens - header, preamble_);
      }
    }
  }

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return 1.0; }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    const uint64_t n = counter_++;
    const size_t doc = popularity_.Draw(rng_);
    Request r;
    r.model = c_.model;
    r.label = "doc-" + std::to_string(doc);
    r.messages.reserve(2);
    r.messages.push_back(Message{"system", SystemContent(doc)});
    std::string question = "Question " + std::to_string(n) + ":";
    const uint32_t q = UniformInt(rng_, c_.question_tokens_min, c_.question_tokens_max);
    const size_t header = engine_model::CountTokens(question);
    AppendProse(rng_, q > header ? q - header : 1, question, '?');
    r.messages.push_back(Message{"user", std::move(question)});
    r.max_tokens =
        LogNormalInt(rng_, c_.output_tokens_median, c_.output_tokens_sigma, c_.output_tokens_min, c_.output_tokens_max);
    return SessionStart{std::make_unique<OneShotSession>(std::move(r)), std::nullopt};
  }

 private:
  // Preamble + document `i`, generated on first use from the document's own seed (so the
  // text does not depend on the order documents are first drawn in) and kept.
  const std::string& SystemContent(size_t i) {
    std::string& s = system_[i];
    if (!s.empty()) return s;
    Rng rng(SubSeed(seed_, kStreamDocument, i));
    s.reserve(preamble_.size() + 2 + static_cast<size_t>(c_.prefix_tokens) * 4 + 64);
    if (!preamble_.empty()) s = preamble_ + "\n\n";
    // The distinct first line: routing keys hash the leading characters of the document.
    const size_t start = s.size();
    s += "Document " + std::to_string(i) + ":";
    AppendTitle(rng, 3, s);
    s += "\n\n";
    const size_t header = engine_model::CountTokens(std::string_view(s).substr(start));
    if (c_.prefix_tokens > header) AppendProse(rng, c_.prefix_tokens - header, s);
    return s;
  }

  const LongContextConfig c_;
  const std::map<std::string, std::string> params_;
  const uint64_t seed_;
  Rng rng_;
  ZipfTable popularity_;
  std::string preamble_;
  std::vector<std::string> system_;  // "" until first drawn
  uint64_t counter_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeLongContext(const ParamMap& params, uint64_t seed) {
  ParamReader p(kName, params);
  LongContextConfig c;
  c.documents = p.Int("documents", c.documents, 1, 1'000'000);
  c.prefix_tokens = p.Int("prefix_tokens", c.prefix_tokens, 1, 1'000'000);
  c.preamble_tokens = p.Int("preamble_tokens", c.preamble_tokens, 0, 1'000'000);
  c.question_tokens_min = p.Int("question_tokens_min", c.question_tokens_min, 1, 100'000);
  c.question_tokens_max = p.Int("question_tokens_max", c.question_tokens_max, 1, 100'000);
  p.CheckOrder("question_tokens_min", c.question_tokens_min, "question_tokens_max", c.question_tokens_max);
  const std::string popularity = p.Raw("popularity", "uniform");
  if (!ParsePopularity(popularity, c.zipf_s)) {
    p.Fail("popularity", "'" + popularity + "' is not uniform or zipf:S with 0 < S <= 10");
  }
  p.Record("popularity", c.zipf_s == 0 ? "uniform" : "zipf:" + FormatNumber(c.zipf_s));
  c.output_tokens_median = p.Real("output_tokens_median", c.output_tokens_median, 1, 1e6);
  c.output_tokens_sigma = p.Real("output_tokens_sigma", c.output_tokens_sigma, 0, 10);
  c.output_tokens_min = p.Int("output_tokens_min", c.output_tokens_min, 1, 1'000'000);
  c.output_tokens_max = p.Int("output_tokens_max", c.output_tokens_max, 1, 1'000'000);
  p.CheckOrder("output_tokens_min", c.output_tokens_min, "output_tokens_max", c.output_tokens_max);
  c.model = p.Text("model", "");
  if (Status s = p.Finish(); !s.ok()) return s;
  return std::unique_ptr<Workload>(std::make_unique<LongContextWorkload>(std::move(c), p.effective(), seed));
}

}  // namespace prefix_router::workload
