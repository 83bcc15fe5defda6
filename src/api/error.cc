#include "api/error.h"

#include "base/json_text.h"

namespace prefix_router::api {
namespace {

std::string_view TypeFor(int http_status) {
  switch (http_status) {
    case 400:
    case 413:
    case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return http_status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

ApiError MakeError(int http_status, std::string message, std::string code) {
  return ApiError{http_status, std::string(TypeFor(http_status)), std::move(message), std::move(code)};
}

ApiError ErrorFromStatus(const Status& status) {
  int http = 500;
  switch (status.code()) {
    case StatusCode::kInvalidArgument: http = 400; break;
    case StatusCode::kNotFound: http = 404; break;
    case StatusCode::kResourceExhausted: http = 413; break;
    case StatusCode::kUnavailable: http = 503; break;
    default: http = 500; break;
  }
  return MakeError(http, status.message());
}

std::string ErrorBody(const ApiError& e) {
  std::string out = R"({"error":{"message":")";
  base::AppendJsonEscaped(out, e.message);
  out += R"(","type":")";
  base::AppendJsonEscaped(out, e.type);
  out += R"(","param":null,"code":)";
  if (e.code.empty()) {
    out += "null";
  } else {
    out += '"';
    base::AppendJsonEscaped(out, e.code);
    out += '"';
  }
  out += "}}";
  return out;
}

}  // namespace prefix_router::api
