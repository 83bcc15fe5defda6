#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <map>
#include <set>
#include <string>

#include "api/key_normalisation.h"
#include "api/native_request.h"
#include "workload/workload_test_util.h"

namespace prefix_router::workload {
namespace {

namespace json = boost::json;
using testing::MustMake;
using testing::RunSessions;

const ParamMap kSmall = {{"documents", "4"}, {"prefix_tokens", "600"}, {"preamble_tokens", "100"}};

PrefixKey Key(const Request& r, const api::KeyNormaliser* n) {
  auto p = api::ParseNative(r.body, 2048, std::nullopt, std::nullopt, n);
  EXPECT_TRUE(p.ok());
  return p.ok() ? p->key : PrefixKey{};
}

// Same seed, same bodies; another seed, other bodies.
TEST(NoisyNativeTest, DeterministicPerSeed) {
  auto body = [](uint64_t seed) {
    std::vector<std::string> out;
    auto w = MustMake("noisy-native", kSmall, seed);
    for (const Request& r : RunSessions(*w, 30)) out.push_back(r.body);
    return out;
  };
  EXPECT_EQ(body(7), body(7));
  EXPECT_NE(body(7), body(8));
}

// Bodies are native JSON whose `inputs` is the prompt the engine sees, with metadata.
TEST(NoisyNativeTest, BodiesAreNativeJsonAroundThePrompt) {
  auto w = MustMake("noisy-native", kSmall);
  for (const Request& r : RunSessions(*w, 40)) {
    EXPECT_EQ(r.api, api::ApiKind::kNative);
    EXPECT_EQ(RenderBody(r, false, "m"), r.body);
    const json::object o = json::parse(r.body).as_object();
    EXPECT_EQ(o.at("inputs").as_string(), r.prompt);
    EXPECT_EQ(o.at("id").as_string().subview().substr(0, 4), "req-");
    EXPECT_TRUE(o.at("created").is_int64());
    EXPECT_EQ(o.at("parameters").at("max_new_tokens").as_int64(), r.max_tokens);
    EXPECT_EQ(o.at("metadata").at("trace_id").as_string().size(), 32u);
    EXPECT_EQ(r.label.rfind("doc-", 0), 0u);
  }
}

// The noise is there: orders, spacing and escapes vary, metadata often comes first, so the
// raw key scatters one document's requests; canonical form with the metadata excluded keys
// them alike, and different documents still apart.
TEST(NoisyNativeTest, CarriesNoiseThatNormalisationRemoves) {
  auto w = MustMake("noisy-native", kSmall);
  const std::vector<Request> rs = RunSessions(*w, 200);
  std::set<std::string> openings;
  bool pretty = false, unicode = false, metadata_first = false;
  for (const Request& r : rs) {
    openings.insert(r.body.substr(0, r.body.find(':')));
    pretty |= r.body.find("\n  \"") != std::string::npos;
    unicode |= r.body.find("\\u000a") != std::string::npos;
    metadata_first |= r.body.rfind("{\"id\"", 0) == 0 || r.body.rfind("{\"created\"", 0) == 0;
  }
  EXPECT_GE(openings.size(), 4u);
  EXPECT_TRUE(pretty);
  EXPECT_TRUE(unicode);
  EXPECT_TRUE(metadata_first);

  auto n = api::KeyNormaliser::Create(KeyNormalisation{true, {"id", "created", "metadata.trace_id"}, {}});
  ASSERT_TRUE(n.ok());
  std::map<std::string, std::set<std::string>> raw, normalised;
  for (const Request& r : rs) {
    raw[r.label].insert(Key(r, nullptr).ToHex());
    normalised[r.label].insert(Key(r, n->get()).ToHex());
  }
  std::set<std::string> all;
  size_t raw_keys = 0;
  for (const auto& [label, keys] : normalised) {
    // metadata.client stays in the key: one key per (document, client) at most.
    EXPECT_LE(keys.size(), 6u) << label;
    raw_keys += raw[label].size();
    all.insert(keys.begin(), keys.end());
  }
  EXPECT_GT(raw_keys, 100u);  // id or created first: nearly every request its own key
  size_t normalised_keys = 0;
  for (const auto& [label, keys] : normalised) normalised_keys += keys.size();
  EXPECT_EQ(all.size(), normalised_keys);  // no key shared across documents
  // With the whole metadata excluded, one key per document.
  auto m = api::KeyNormaliser::Create(KeyNormalisation{true, {"id", "created", "metadata"}, {}});
  ASSERT_TRUE(m.ok());
  std::map<std::string, std::set<std::string>> per_doc;
  for (const Request& r : rs) per_doc[r.label].insert(Key(r, m->get()).ToHex());
  for (const auto& [label, keys] : per_doc) EXPECT_EQ(keys.size(), 1u) << label;
}

// `clients` is checked; other parameters are long-context's.
TEST(NoisyNativeTest, ParametersAreChecked) {
  EXPECT_FALSE(MakeWorkload("noisy-native", {{"clients", "0"}}, 1).ok());
  auto bad = MakeWorkload("noisy-native", {{"documents", "0"}}, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("noisy-native"), std::string::npos) << bad.status().message();
  auto w = MustMake("noisy-native", {{"clients", "2"}, {"documents", "3"}});
  EXPECT_EQ(w->Parameters().at("clients"), "2");
  EXPECT_EQ(w->Parameters().at("documents"), "3");
}

}  // namespace
}  // namespace prefix_router::workload
