#include "api/error.h"

#include "api/utf8.h"

namespace prefix_router::api {
namespace {

std::string_view TypeFor(int http_status) {
  switch (http_status) {
    case 400: case 413: case 422: return "invalid_request_error";
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

void AppendJsonEscaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) {  // JSON text is UTF-8: a byte that starts no valid sequence becomes U+FFFD
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += ch;
        }
    }
  }
}

std::string ErrorBody(const ApiError& e) {
  std::string out = R"({"error":{"message":")";
  AppendJsonEscaped(out, e.message);
  out += R"(","type":")";
  AppendJsonEscaped(out, e.type);
  out += R"(","param":null,"code":)";
  if (e.code.empty()) {
    out += "null";
  } else {
    out += '"';
    AppendJsonEscaped(out, e.code);
    out += '"';
  }
  out += "}}";
  return out;
}

}  // namespace prefix_router::api
