// rag: retrieval-augmented generation. Each request puts a tenant's system prompt first, then
// `retrieved` documents from a shared corpus (popular documents are retrieved often, in
// retrieval-score order), then a question of its own. Two requests share a prefix as far as
// their tenant and their first retrieved document agree. See docs/workloads.md.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "workload/generators.h"
#include "workload/params.h"
#include "workload/sampling.h"
#include "workload/text.h"

namespace prefix_router::workload {
namespace {

constexpr std::string_view kName = "rag";
constexpr std::string_view kSeparator = "\n\n---\n\n";

struct RagConfig {
  uint32_t corpus_documents = 2000;
  uint32_t doc_tokens_min = 300;
  uint32_t doc_tokens_max = 1200;
  double doc_zipf = 1.1;
  uint32_t retrieved = 4;
  uint32_t tenants = 3;
  double tenant_zipf = 0;
  uint32_t system_tokens_min = 200;
  uint32_t system_tokens_max = 600;
  uint32_t question_tokens_min = 20;
  uint32_t question_tokens_max = 80;
  Lengths reply_tokens{200, 0.6, 16, 1024};
  std::string cache_key = "tenant";  // tenant | none
  std::string model;
};

class RagWorkload : public Workload {
 public:
  RagWorkload(RagConfig c, std::map<std::string, std::string> params, uint64_t seed)
      : c_(std::move(c)),
        params_(std::move(params)),
        seed_(seed),
        rng_(SubSeed(seed, kStreamWorkload, 0)),
        doc_pick_(c_.corpus_documents, c_.doc_zipf),
        tenant_pick_(c_.tenants, c_.tenant_zipf),
        docs_(c_.corpus_documents) {
    for (uint32_t k = 0; k < c_.tenants; ++k) {
      Rng rng(SubSeed(seed, kStreamTenantPrompt, k));
      std::string header = "Tenant " + std::to_string(k) + " assistant:";
      AppendTitle(rng, 2, header);
      header += "\n\n";
      prompts_.push_back(
          HeadedText(rng, std::move(header), UniformInt(rng, c_.system_tokens_min, c_.system_tokens_max)));
    }
  }

  std::string_view name() const override { return kName; }
  double mean_turns() const override { return 1.0; }
  std::map<std::string, std::string> Parameters() const override { return params_; }

  SessionStart NextSession() override {
    const uint64_t n = counter_++;
    const size_t tenant = tenant_pick_.Draw(rng_);
    const std::vector<size_t> docs = doc_pick_.DrawDistinct(rng_, c_.retrieved);
    Request r;
    r.model = c_.model;
    r.label = "tenant-" + std::to_string(tenant) + "/";
    std::string user;
    size_t size = 0;
    for (size_t d : docs) size += Document(d).size() + kSeparator.size();
    user.reserve(size + static_cast<size_t>(c_.question_tokens_max) * 6 + 32);
    for (size_t i = 0; i < docs.size(); ++i) {
      if (i > 0) r.label += "+";
      r.label += "doc-" + std::to_string(docs[i]);
      user += Document(docs[i]);
      user += kSeparator;
    }
    user += HeadedText(rng_, "Question " + std::to_string(n) + ":",
                       UniformInt(rng_, c_.question_tokens_min, c_.question_tokens_max), '?');
    r.messages.push_back(Message{"system", prompts_[tenant]});
    r.messages.push_back(Message{"user", std::move(user)});
    if (c_.cache_key == "tenant") r.routing_group = "tenant-" + std::to_string(tenant);
    r.max_tokens = c_.reply_tokens.Draw(rng_);
    return SessionStart{std::make_unique<OneShotSession>(std::move(r)), std::nullopt};
  }

 private:
  // Document `i` of the corpus, generated on first use from its own seed and kept.
  const std::string& Document(size_t i) {
    std::string& s = docs_[i];
    if (!s.empty()) return s;
    Rng rng(SubSeed(seed_, kStreamDocument, i));
    const uint32_t tokens = UniformInt(rng, c_.doc_tokens_min, c_.doc_tokens_max);
    std::string header = "Passage " + std::to_string(i) + ":";
    AppendTitle(rng, 3, header);
    header += "\n\n";
    s = HeadedText(rng, std::move(header), tokens);
    return s;
  }

  const RagConfig c_;
  const std::map<std::string, std::string> params_;
  const uint64_t seed_;
  Rng rng_;
  const ZipfTable doc_pick_;
  const ZipfTable tenant_pick_;
  std::vector<std::string> prompts_;  // by tenant
  std::vector<std::string> docs_;     // "" until first retrieved
  uint64_t counter_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeRag(const ParamMap& params, uint64_t seed) {
  ParamReader p(kName, params);
  RagConfig c;
  c.corpus_documents = p.Int("corpus_documents", c.corpus_documents, 1, 1'000'000);
  c.doc_tokens_min = p.Int("doc_tokens_min", c.doc_tokens_min, 1, 1'000'000);
  c.doc_tokens_max = p.Int("doc_tokens_max", c.doc_tokens_max, 1, 1'000'000);
  p.CheckOrder("doc_tokens_min", c.doc_tokens_min, "doc_tokens_max", c.doc_tokens_max);
  c.doc_zipf = p.Real("doc_zipf", c.doc_zipf, 0, 10);
  c.retrieved = p.Int("retrieved", c.retrieved, 1, 1000);
  p.CheckOrder("retrieved", c.retrieved, "corpus_documents", c.corpus_documents);
  c.tenants = p.Int("tenants", c.tenants, 1, 10'000);
  c.tenant_zipf = p.Real("tenant_zipf", c.tenant_zipf, 0, 10);
  c.system_tokens_min = p.Int("system_tokens_min", c.system_tokens_min, 1, 1'000'000);
  c.system_tokens_max = p.Int("system_tokens_max", c.system_tokens_max, 1, 1'000'000);
  p.CheckOrder("system_tokens_min", c.system_tokens_min, "system_tokens_max", c.system_tokens_max);
  c.question_tokens_min = p.Int("question_tokens_min", c.question_tokens_min, 1, 100'000);
  c.question_tokens_max = p.Int("question_tokens_max", c.question_tokens_max, 1, 100'000);
  p.CheckOrder("question_tokens_min", c.question_tokens_min, "question_tokens_max", c.question_tokens_max);
  c.reply_tokens = ReadLengths(p, "reply_tokens", c.reply_tokens);
  c.cache_key = p.Choice("cache_key", c.cache_key, {"tenant", "none"});
  c.model = p.Text("model", "");
  if (Status s = p.Finish(); !s.ok()) return s;
  return std::unique_ptr<Workload>(std::make_unique<RagWorkload>(std::move(c), p.effective(), seed));
}

}  // namespace prefix_router::workload
