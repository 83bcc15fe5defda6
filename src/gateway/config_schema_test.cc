// The configuration schema against everything it feeds: the YAML reader, the flags and --set,
// the validation's ranges, the reload's restart_required verdict and examples/router.yaml.
#include "gateway/config_schema.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gateway/config_flags.h"
#include "gateway/gateway.h"
#include "gateway/gateway_test_util.h"
#include "gateway/operations.h"

namespace prefix_router::gateway {
namespace {

ConfigFlags ParseFlags(std::vector<std::string> args) {
  CLI::App app{"serve"};
  ConfigFlags flags;
  AddConfigFlags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 consumes the vector from the back
  app.parse(args);
  return flags;
}

std::string ParseErrorOf(std::vector<std::string> args) {
  try {
    ParseFlags(std::move(args));
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

// A YAML document that sets `path` ("a.b.c") to `value` (quoted: the reader takes the scalar).
std::string YamlSetting(const std::string& path, const std::string& value) {
  std::string out;
  std::string indent;
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
    out += indent + path.substr(start, dot - start) + ":\n";
    indent += "  ";
    start = dot + 1;
  }
  std::string quoted;
  for (char c : value) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return out + indent + path.substr(start) + ": '" + quoted + "'\n";
}

// A file the other fields' examples are valid beside: an instance, an admin listener (for
// metrics.listener: admin) and a client key (for metrics.require_key and rate limits).
class SchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("SCHEMA_TEST_KEY", "a-client-key-of-some-length", 1);
    base_ = (std::filesystem::temp_directory_path() / ("schema-test-" + std::to_string(::getpid()) + ".yaml")).string();
    std::ofstream(base_) << "instances:\n  - url: http://127.0.0.1:1\n"
                            "admin: {listen: 127.0.0.1:9099}\n"
                            "clients: {keys: [{tenant: a, key_env: SCHEMA_TEST_KEY}]}\n";
  }
  void TearDown() override { std::filesystem::remove(base_); }

  Result<GatewayConfig> WithSet(const std::string& path, const std::string& value) {
    return BuildConfig(ParseFlags({"--config", base_, "--set", path + "=" + value}));
  }

  std::string base_;
};

// Every scalar field reads its example from YAML, from --set and, when it has one, from its
// flag, to the same value; the example differs from the default (so the read is seen).
TEST_F(SchemaTest, EveryScalarIsReachableByYamlAndByFlagOrSet) {
  size_t checked = 0;
  for (const ConfigField& f : ConfigSchema()) {
    if (!f.scalar()) continue;
    SCOPED_TRACE(f.path);
    GatewayConfig expected;
    ASSERT_TRUE(f.set(expected, f.example, f.path).ok()) << "the example does not read: " << f.example;
    const std::string want = f.get(expected);
    if (!f.example.empty()) {
      EXPECT_NE(want, DefaultOf(f)) << "the example is the default";
    }

    Result<GatewayConfig> yaml = ParseConfigYaml(YamlSetting(f.path, f.example));
    ASSERT_TRUE(yaml.ok()) << yaml.status().ToString();
    EXPECT_EQ(f.get(*yaml), want);

    ConfigFlags by_set = ParseFlags({"--set", f.path + "=" + f.example});
    ASSERT_EQ(by_set.values.size(), 1u);
    EXPECT_EQ(by_set.values[0].first, &f);
    if (!f.flag.empty() && f.flag.starts_with("--") && f.flag.find(' ') == std::string::npos) {
      ConfigFlags by_flag = ParseFlags({f.flag, f.example});
      ASSERT_EQ(by_flag.values.size(), 1u);
      EXPECT_EQ(by_flag.values[0].first, &f);
    }
    // Through the whole path (file, flags, validation), where the example needs no file of
    // its own (certificates, token files: tested with their features).
    if (!f.example.empty()) {
      Result<GatewayConfig> built = WithSet(f.path, f.example);
      ASSERT_TRUE(built.ok()) << built.status().ToString();
      EXPECT_EQ(f.get(*built), want);
    }
    ++checked;
  }
  EXPECT_GT(checked, 60u);
}

// A field of `routing` set by --set reaches the pools that do not set it, and only those.
TEST_F(SchemaTest, RoutingSetsReachPoolsThatDoNotSetTheField) {
  std::ofstream(base_) << "instances:\n  - url: http://127.0.0.1:1\n"
                          "pools:\n  a: {cache_aware: {load_weight: 0.3}}\n  b: {}\n";
  Result<GatewayConfig> r =
      BuildConfig(ParseFlags({"--config", base_, "--set", "routing.cache_aware.load_weight=0.7"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->routing.cache_aware.load_weight, 0.7);
  EXPECT_EQ(r->pools.at("a").cache_aware.load_weight, 0.3);
  EXPECT_EQ(r->pools.at("b").cache_aware.load_weight, 0.7);
}

// Each field's `bad` value is refused by the validation, with the field's path in the message:
// the table's ranges and ValidateConfig's agree.
TEST_F(SchemaTest, EveryRangeIsEnforced) {
  size_t checked = 0;
  for (const ConfigField& f : ConfigSchema()) {
    if (!f.scalar() || f.bad.empty()) continue;
    SCOPED_TRACE(f.path);
    Result<GatewayConfig> r = WithSet(f.path, f.bad);
    ASSERT_FALSE(r.ok()) << f.bad << " was accepted";
    EXPECT_NE(r.status().message().find(f.path), std::string::npos) << r.status().message();
    ++checked;
  }
  EXPECT_GT(checked, 40u);
}

TEST(SchemaFlagsTest, SetRefusesUnknownFieldsListsAndBadValues) {
  EXPECT_NE(ParseErrorOf({"--set", "timeouts.nope=1"}).find("no field 'timeouts.nope'"), std::string::npos);
  EXPECT_NE(ParseErrorOf({"--set", "instances=x"}).find("YAML file only"), std::string::npos);
  EXPECT_NE(ParseErrorOf({"--set", "timeouts.connect"}).find("expected PATH=VALUE"), std::string::npos);
  EXPECT_NE(ParseErrorOf({"--set", "timeouts.connect=5s"}).find("--set timeouts.connect: expected a number"),
            std::string::npos);
  EXPECT_NE(ParseErrorOf({"--prefix-length", "0x800"}).find("--prefix-length"), std::string::npos);
  // By its flag and by --set: refused, whichever comes first.
  Result<GatewayConfig> twice = BuildConfig(
      ParseFlags({"--instance", "http://127.0.0.1:1", "--set", "timeouts.connect=1", "--connect-timeout", "2"}));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("timeouts.connect: given twice"), std::string::npos);
}

// A reload names exactly the restart-only field that changed; a reloadable field is not named.
TEST(SchemaReloadTest, RestartRequiredFollowsTheTable) {
  for (const ConfigField& f : ConfigSchema()) {
    if (!f.scalar() || f.example.empty()) continue;
    SCOPED_TRACE(f.path);
    GatewayConfig a;
    a.admin.enabled = true;
    GatewayConfig b = a;
    ASSERT_TRUE(f.set(b, f.example, f.path).ok());
    const std::vector<std::string> named = RestartRequired(a, b);
    if (f.reloadable) {
      EXPECT_TRUE(named.empty()) << named.front();
    } else {
      EXPECT_EQ(named, std::vector<std::string>{f.path});
    }
  }
}

// The paths examples/router.yaml mentions, set or commented out: a key's path is the keys of
// the lines above it with less indentation; `- ` opens a list item (`[]`); `{a: 1, b: 2}`
// lists keys of the line's key. Under pools and rate_limits.tenants, keys are names.
std::set<std::string> ExamplePaths(const std::string& file) {
  std::ifstream in(file);
  std::set<std::string> paths;
  std::vector<std::pair<size_t, std::string>> stack;  // (indent, path)
  const std::regex line_re(R"(^(\s*)#?(\s*)(- )?([A-Za-z_]+):(.*)$)");
  const std::regex flow_key(R"([{,]\s*([A-Za-z_]+):)");
  const std::regex flow_item(R"(^\s*#?\s*- (\{.*\}).*$)");
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, flow_item)) {  // "- {a: 1, b: 2}": an item of the list above
      const std::string list = stack.empty() ? "" : stack.back().second;
      const std::string items = m[1].str();
      for (auto it = std::sregex_iterator(items.begin(), items.end(), flow_key); it != std::sregex_iterator(); ++it) {
        paths.insert(list + "[]." + (*it)[1].str());
      }
      continue;
    }
    if (!std::regex_match(line, m, line_re)) continue;
    // A commented-out key sits where its '#' is ("    # key:" beside "    key:"; "#   key:"
    // under "# section:").
    const bool commented = line[m[1].length()] == '#';
    size_t indent = m[1].length() + (commented ? std::max<size_t>(m[2].length(), 1) - 1 : m[2].length());
    while (!stack.empty() && stack.back().first >= indent) stack.pop_back();
    std::string parent = stack.empty() ? "" : stack.back().second;
    if (parent == "pools" || parent == "rate_limits.tenants") continue;  // a name, not a field
    if (parent.starts_with("pools.") || parent.starts_with("rate_limits.tenants.")) continue;
    if (m[3].matched) {  // "- key:" opens an item of the list `parent`, whose keys sit 2 further
      parent += "[]";
      stack.emplace_back(indent, parent);
      indent += 2;
    }
    const std::string path = (parent.empty() ? "" : parent + ".") + m[4].str();
    paths.insert(path);
    stack.emplace_back(indent, path);
    const std::string rest = m[5].str();
    const std::string value = rest.substr(0, rest.find(" #"));
    for (auto it = std::sregex_iterator(value.begin(), value.end(), flow_key); it != std::sregex_iterator(); ++it) {
      const std::string key = (*it)[1].str();
      paths.insert(path + (value.find("[{") != std::string::npos ? "[]." : ".") + key);
    }
  }
  return paths;
}

TEST(SchemaExamplesTest, RouterYamlShowsEveryField) {
  const std::string file = std::string(PR_SOURCE_DIR) + "/examples/router.yaml";
  const std::set<std::string> paths = ExamplePaths(file);
  ASSERT_GT(paths.size(), 20u) << file;
  for (const ConfigField& f : ConfigSchema()) {
    EXPECT_TRUE(paths.count(f.path)) << file << " lacks " << f.path;
  }
  // And the file, with its commented-out sections as written, is a valid configuration.
  Result<GatewayConfig> r = LoadConfigFile(file);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

// Every reloadable scalar field, changed in the file and reloaded the way SIGHUP does it (the
// file and the flags read again, LoadAndReload): the running gateway has the new value (for a
// routing field, its live default pool does), and nothing is reported as needing a restart.
// Fields whose example needs a file of its own (certificates, CA bundles, key files) are
// reloaded by their features' tests (tls_test, limits_test).
class ReloadEachFieldTest : public ::testing::TestWithParam<const ConfigField*> {};

TEST_P(ReloadEachFieldTest, AppliedWithoutRestart) {
  const ConfigField& f = *GetParam();
  ::setenv("SCHEMA_TEST_KEY", "a-client-key-of-some-length", 1);
  testing::QuietLogs();
  testing::Fakes fakes = testing::StartFakes({"a"});
  testing::TempFile file("reload-" + std::to_string(&f - ConfigSchema().data()) + ".yaml");
  const std::string base =
      "listen: 127.0.0.1:0\nio_threads: 1\nhealth: {interval: 0}\ntimeouts: {drain: 1}\n"
      "clients: {keys: [{tenant: a, key_env: SCHEMA_TEST_KEY}]}\n"
      "instances:\n  - {name: a, url: '" +
      fakes[0]->url() + "'}\n";
  file.Write(base);
  ConfigFlags flags = ParseFlags({"--config", file.path()});
  Result<GatewayConfig> initial = BuildConfig(flags);
  ASSERT_TRUE(initial.ok()) << initial.status().ToString();
  auto g = testing::StartGateway(*initial);
  ASSERT_NE(g, nullptr);

  file.Write(base + YamlSetting(f.path, f.example));
  Result<ReloadReport> report = LoadAndReload(
      *g, [&] { return BuildConfig(flags); }, "SIGHUP");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->restart_required.empty()) << report->restart_required.front();
  GatewayConfig want;
  ASSERT_TRUE(f.set(want, f.example, f.path).ok());
  if (f.routing()) {
    EXPECT_EQ(f.get_routing(g->routing()->default_pool.options), f.get_routing(want.routing));
  }
  EXPECT_EQ(f.get(g->running_config()), f.get(want));
}

std::vector<const ConfigField*> ReloadableScalars() {
  std::vector<const ConfigField*> out;
  for (const ConfigField& f : ConfigSchema()) {
    if (f.scalar() && f.reloadable && !f.example.empty()) out.push_back(&f);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schema, ReloadEachFieldTest, ::testing::ValuesIn(ReloadableScalars()),
                         [](const ::testing::TestParamInfo<const ConfigField*>& info) {
                           std::string name;
                           for (char c : info.param->path)
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace prefix_router::gateway
