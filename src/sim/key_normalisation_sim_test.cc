// The simulator keys requests through the api parsers with the pool's key normalisation, as the
// gateway does: on noisy native traffic, normalisation must show in the routing.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "sim/simulator.h"

namespace prefix_router::sim {
namespace {

SimOptions NoisyOptions(KeyNormalisation k) {
  SimOptions o;
  o.workload = "noisy-native";
  o.params = {{"documents", "12"},
              {"prefix_tokens", "600"},
              {"preamble_tokens", "20"},
              {"output_tokens_median", "8"},
              {"output_tokens_max", "16"}};
  auto profile = engine_model::FindProfile("tiny-test");
  EXPECT_TRUE(profile.ok());
  o.profile = *profile;
  o.instances = 4;
  o.rate_rps = 20;
  o.duration_s = 60;
  o.warmup_s = 10;
  o.series_window_s = 0;
  o.routing.prefix_length = 1024;
  o.routing.strategy = Strategy::kPrefixAware;
  o.routing.key_normalisation = std::move(k);
  return o;
}

// Per document label, the number of instances its counted requests went to.
std::map<std::string, std::set<int32_t>> HomesOf(const SimRun& run, const SimOptions& o) {
  // Labels are not recorded: regenerate the same traffic (same seed) to pair them up.
  auto w = workload::MakeWorkload(o.workload, o.params, o.seed);
  EXPECT_TRUE(w.ok());
  std::map<std::string, std::set<int32_t>> homes;
  for (const auto& rec : run.records) {
    auto s = (*w)->NextSession();
    auto r = s.session->Next("");
    if (rec.counted && !rec.error) homes[r->label].insert(rec.instance);
  }
  return homes;
}

// Excluding the dynamic fields gives each document one home and a higher hit rate than raw
// bytes; the run is labelled as normalised.
TEST(KeyNormalisationSimTest, NormalisedKeysKeepDocumentsTogether) {
  const SimOptions raw_options = NoisyOptions({});
  const SimOptions norm_options = NoisyOptions({true, {"id", "created", "metadata.trace_id"}, {}});
  auto raw = Simulate(raw_options);
  auto norm = Simulate(norm_options);
  ASSERT_TRUE(raw.ok()) << raw.status().message();
  ASSERT_TRUE(norm.ok()) << norm.status().message();
  EXPECT_EQ(norm->result.strategy, "prefix-aware+keynorm");
  EXPECT_EQ(raw->result.strategy, "prefix-aware");
  EXPECT_GT(norm->result.hit_rate, raw->result.hit_rate + 0.1)
      << "raw " << raw->result.hit_rate << " normalised " << norm->result.hit_rate;
  size_t raw_homes = 0, norm_homes = 0;
  for (const auto& [label, set] : HomesOf(*raw, raw_options)) raw_homes += set.size();
  for (const auto& [label, set] : HomesOf(*norm, norm_options)) {
    norm_homes += set.size();
    // Its home, a spill when it was full, and where its first request went if prefix-aware
    // placed the new key by load (no home is recorded for that: its next requests go home).
    EXPECT_LE(set.size(), 3u) << label;
  }
  EXPECT_LT(norm_homes * 2, raw_homes);
}

// A bad setting stops the run with the setting named.
TEST(KeyNormalisationSimTest, BadSettingIsRejected) {
  auto run = Simulate(NoisyOptions({false, {}, {"("}}));
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("exclude_patterns[0]"), std::string::npos) << run.status().message();
}

}  // namespace
}  // namespace prefix_router::sim
