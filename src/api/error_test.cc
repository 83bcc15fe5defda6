#include "api/error.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <string_view>

#include "core/status.h"

namespace prefix_router::api {
namespace {

// The fields of an error body, read back with simdjson's DOM parser.
struct ParsedBody {
  bool valid = false;
  std::string message;
  std::string type;
  bool param_is_null = false;
  bool code_is_null = false;
  std::string code;  // when code is a string
  size_t top_level_fields = 0;
  size_t error_fields = 0;
};

ParsedBody ParseBody(const std::string& json) {
  ParsedBody out;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json).get(root)) return out;
  simdjson::dom::object top;
  if (root.get_object().get(top)) return out;
  out.top_level_fields = top.size();
  simdjson::dom::object error;
  if (top["error"].get_object().get(error)) return out;
  out.error_fields = error.size();
  std::string_view message, type;
  if (error["message"].get_string().get(message)) return out;
  if (error["type"].get_string().get(type)) return out;
  out.message = std::string(message);
  out.type = std::string(type);
  out.param_is_null = error["param"].is_null();
  out.code_is_null = error["code"].is_null();
  std::string_view code;
  if (!error["code"].get_string().get(code)) out.code = std::string(code);
  out.valid = true;
  return out;
}

// Each status code maps to its HTTP status and OpenAI error type, keeping the message.
TEST(ErrorTest, ErrorFromStatusMapsCodes) {
  struct Case {
    Status status;
    int http;
    std::string_view type;
  };
  const Case cases[] = {
      {Status::InvalidArgument("bad field"), 400, "invalid_request_error"},
      {Status::NotFound("no such model"), 404, "not_found_error"},
      {Status::ResourceExhausted("body too large"), 413, "invalid_request_error"},
      {Status::Unavailable("no instance"), 503, "server_error"},
      {Status::Internal("bug"), 500, "server_error"},
  };
  for (const Case& c : cases) {
    const ApiError e = ErrorFromStatus(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status.ToString();
    EXPECT_EQ(e.type, c.type) << c.status.ToString();
    EXPECT_EQ(e.message, c.status.message());
    EXPECT_EQ(e.code, "");
  }
}

// MakeError picks the OpenAI type from the HTTP status and keeps message and code.
TEST(ErrorTest, MakeErrorTypes) {
  EXPECT_EQ(MakeError(400, "m").type, "invalid_request_error");
  EXPECT_EQ(MakeError(401, "m").type, "authentication_error");
  EXPECT_EQ(MakeError(403, "m").type, "permission_error");
  EXPECT_EQ(MakeError(404, "m").type, "not_found_error");
  EXPECT_EQ(MakeError(429, "m").type, "rate_limit_error");
  EXPECT_EQ(MakeError(502, "m").type, "server_error");
  EXPECT_EQ(MakeError(504, "m").type, "server_error");
  const ApiError e = MakeError(429, "slow down", "rate_limited");
  EXPECT_EQ(e.http_status, 429);
  EXPECT_EQ(e.message, "slow down");
  EXPECT_EQ(e.code, "rate_limited");
}

// The body is the OpenAI shape: {"error":{"message","type","param":null,"code":null}}.
TEST(ErrorTest, ErrorBodyHasOpenAiShape) {
  const std::string body = ErrorBody(ErrorFromStatus(Status::InvalidArgument("model: is required")));
  const ParsedBody p = ParseBody(body);
  ASSERT_TRUE(p.valid) << body;
  EXPECT_EQ(p.top_level_fields, 1u);
  EXPECT_EQ(p.error_fields, 4u);
  EXPECT_EQ(p.message, "model: is required");
  EXPECT_EQ(p.type, "invalid_request_error");
  EXPECT_TRUE(p.param_is_null);
  EXPECT_TRUE(p.code_is_null);
}

// Quotes, backslashes and every control character in the message survive a JSON round trip.
TEST(ErrorTest, ErrorBodyEscapesMessage) {
  std::string message = "say \"hi\" \\ path C:\\x\n\r\t";
  for (int c = 0; c < 0x20; ++c) message += static_cast<char>(c);
  message += "\x7f caf\xc3\xa9 \xe6\x97\xa5 </script>";
  const std::string body = ErrorBody(MakeError(400, message));
  for (char c : body) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "raw control character in body";
  const ParsedBody p = ParseBody(body);
  ASSERT_TRUE(p.valid) << body;
  EXPECT_EQ(p.message, message);
}

// A non-empty code is a JSON string; an empty one is null.
TEST(ErrorTest, ErrorBodyCode) {
  const ParsedBody with = ParseBody(ErrorBody(MakeError(503, "busy", "no_capacity\"1")));
  ASSERT_TRUE(with.valid);
  EXPECT_FALSE(with.code_is_null);
  EXPECT_EQ(with.code, "no_capacity\"1");
  EXPECT_EQ(with.type, "server_error");
  const ParsedBody without = ParseBody(ErrorBody(MakeError(503, "busy")));
  ASSERT_TRUE(without.valid);
  EXPECT_TRUE(without.code_is_null);
}

}  // namespace
}  // namespace prefix_router::api
