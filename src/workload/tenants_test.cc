#include "workload/tenants.h"

#include <gtest/gtest.h>

#include <vector>

namespace prefix_router::workload {
namespace {

TEST(TenantClassesTest, Parses) {
  auto ok = ParseTenantClasses("interactive:1:0.2,batch:0:0.8,bulk:-2:3");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[0].name, "interactive");
  EXPECT_EQ((*ok)[0].priority, 1);
  EXPECT_DOUBLE_EQ((*ok)[0].share, 0.2);
  EXPECT_EQ((*ok)[2].priority, -2);
  EXPECT_DOUBLE_EQ((*ok)[2].share, 3);
  EXPECT_DOUBLE_EQ(ShareSum(*ok), 4);
  EXPECT_EQ((*ok)[0].ttft_objective_ms, 0u);
  auto objectives = ParseTenantClasses("interactive:1:0.2:500,batch:0:0.8");
  ASSERT_TRUE(objectives.ok()) << objectives.status().message();
  EXPECT_EQ((*objectives)[0].ttft_objective_ms, 500u);
  EXPECT_DOUBLE_EQ((*objectives)[0].share, 0.2);
  EXPECT_EQ((*objectives)[1].ttft_objective_ms, 0u);
}

TEST(TenantClassesTest, RefusesWhatIsNotAClass) {
  for (const char* bad : {"", "a", "a:1", "a:1:0.5:x", ":1:0.5", "a:x:0.5", "a:11:0.5", "a:-11:0.5", "a:1:0", "a:1:-1",
                          "a:1:nan", "a:1:inf", "a:1:0.5,a:0:0.5", "a:1:0.5,", "a b:1:0.5", "a\r:1:0.5",
                          "a:1:0.5:0", "a:1:0.5:-1", "a:1:0.5:1.5", "a:1:0.5:", "a:1:0.5:86400001", "a:1:0.5:9:9"}) {
    EXPECT_FALSE(ParseTenantClasses(bad).ok()) << bad;
  }
  std::vector<TenantClass> many(kMaxTenantClasses + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i].name = "t" + std::to_string(i);
  EXPECT_FALSE(ValidateTenantClasses(many).ok());
  many.pop_back();
  EXPECT_TRUE(ValidateTenantClasses(many).ok());
}

// A class is drawn in proportion to its share, over the whole of [0, 1).
TEST(TenantClassesTest, PicksByShare) {
  const std::vector<TenantClass> classes{{"a", 0, 1}, {"b", 0, 3}};
  EXPECT_EQ(PickTenantClass({}, 0.5), -1);
  EXPECT_EQ(PickTenantClass(classes, 0.0), 0);
  EXPECT_EQ(PickTenantClass(classes, 0.2499), 0);
  EXPECT_EQ(PickTenantClass(classes, 0.2501), 1);
  EXPECT_EQ(PickTenantClass(classes, 0.9999999999), 1);
}

}  // namespace
}  // namespace prefix_router::workload
