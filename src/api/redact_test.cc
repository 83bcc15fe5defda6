#include "api/redact.h"

#include <gtest/gtest.h>

namespace prefix_router::api {
namespace {

TEST(RedactUrlTest, HidesUserInformation) {
  EXPECT_EQ(RedactUrl("http://user:secret@10.0.0.1:8000/v1"), "http://***@10.0.0.1:8000/v1");
  EXPECT_EQ(RedactUrl("https://token@host"), "https://***@host");
  // The last '@' of the authority ends the user information (a password may hold '@').
  EXPECT_EQ(RedactUrl("http://u:p@ss@host/x@y"), "http://***@host/x@y");
  // Malformed: no scheme, or junk after it.
  EXPECT_EQ(RedactUrl("user:secret@host:80"), "***@host:80");
  EXPECT_EQ(RedactUrl("http://a b:c@d"), "http://***@d");
}

TEST(RedactUrlTest, LeavesOtherUrlsAlone) {
  EXPECT_EQ(RedactUrl("http://10.0.0.1:8000/v1"), "http://10.0.0.1:8000/v1");
  EXPECT_EQ(RedactUrl("http://host/path@x?q=a@b"), "http://host/path@x?q=a@b");
  EXPECT_EQ(RedactUrl("notaurl"), "notaurl");
  EXPECT_EQ(RedactUrl(""), "");
}

}  // namespace
}  // namespace prefix_router::api
