// Hand-made traffic for the simulator's tests (simulator_test.cc, gateways_sim_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "workload/workload.h"

namespace prefix_router::sim::test_traffic {

// Hand-made traffic: `documents` shared contexts of about `doc_words` words, each request one
// of them (round robin or drawn) followed by a unique question; `turns` turns per session,
// each resending the history with the previous reply.
class DocWorkload : public workload::Workload {
 public:
  DocWorkload(uint64_t seed, uint32_t documents, uint32_t doc_words, uint32_t turns) : rng_(seed), turns_(turns) {
    for (uint32_t d = 0; d < documents; ++d) {
      std::string doc = "Document " + std::to_string(d) + " seed " + std::to_string(seed) + ".";
      for (uint32_t w = 0; w < doc_words; ++w) doc += " w" + std::to_string((d * 7919 + w) % 9973);
      docs_.push_back(std::move(doc));
    }
  }
  std::string_view name() const override { return "docs"; }
  double mean_turns() const override { return turns_; }
  std::map<std::string, std::string> Parameters() const override { return {}; }
  workload::SessionStart NextSession() override {
    const uint32_t doc = rng_.Uniform(static_cast<uint32_t>(docs_.size()));
    return {std::make_unique<Conversation>(this, doc, next_++), std::nullopt};
  }

 private:
  class Conversation : public workload::Session {
   public:
    Conversation(DocWorkload* w, uint32_t doc, uint64_t id) : w_(w), doc_(doc), id_(id) {}
    std::optional<workload::Request> Next(std::string_view previous_reply) override {
      if (turn_ == w_->turns_) return std::nullopt;
      if (turn_ == 0) {
        messages_.push_back({"system", w_->docs_[doc_]});
      } else {
        messages_.push_back({"assistant", std::string(previous_reply)});
      }
      messages_.push_back({"user", "Question " + std::to_string(id_) + "." + std::to_string(turn_) + "?"});
      ++turn_;
      workload::Request r;
      r.messages = messages_;
      r.max_tokens = 8;
      r.label = "doc-" + std::to_string(doc_);
      return r;
    }

   private:
    DocWorkload* w_;
    uint32_t doc_;
    uint64_t id_;
    uint32_t turn_ = 0;
    std::vector<workload::Message> messages_;
  };

  Rng rng_;
  uint32_t turns_;
  uint64_t next_ = 0;
  std::vector<std::string> docs_;
};

}  // namespace prefix_router::sim::test_traffic
