// OpenAI-style error responses.
//
// Every error the router answers itself carries a JSON body shaped like OpenAI's:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": null}}
// so that OpenAI clients surface the message. ApiError maps a Status to the HTTP status and the
// error type; the gateway adds its own cases (timeouts, upstream failures) through the same
// function. Values only; no I/O.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace prefix_router::api {

struct ApiError {
  int http_status = 500;
  std::string type;  // invalid_request_error, not_found_error, server_error, ...
  std::string message;
  std::string code;  // optional machine-readable code ("" -> null)
};

// InvalidArgument -> 400, NotFound -> 404, ResourceExhausted -> 413, Unavailable -> 503,
// anything else -> 500.
ApiError ErrorFromStatus(const Status& status);
ApiError MakeError(int http_status, std::string message, std::string code = "");

// The JSON body for an error.
std::string ErrorBody(const ApiError& error);

}  // namespace prefix_router::api
