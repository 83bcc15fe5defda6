// Status and Result<T>: how the pure libraries report failure without exceptions.
//
// A Status is cheap when ok (no allocation) and carries a code and a message otherwise, in the
// manner of leveldb's Status. Result<T> holds either a value or a non-ok Status. Both are plain
// values: copy them, return them, compare their codes. Not thread-safe beyond that (no shared
// state).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace prefix_router {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is malformed or out of range
  kNotFound,            // a named thing (model, instance) does not exist
  kUnavailable,         // nothing can serve the request now
  kResourceExhausted,   // a size or count limit was exceeded
  kInternal,            // an invariant broke
  kFailedPrecondition,  // the request conflicts with the current state (a name already taken,
                        // a change that would leave a pool without instances)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(StatusCode::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(StatusCode::kUnavailable, std::move(msg)); }
  static Status ResourceExhausted(std::string msg) { return Status(StatusCode::kResourceExhausted, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }
  static Status FailedPrecondition(std::string msg) { return Status(StatusCode::kFailedPrecondition, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a T or a non-ok Status.
// REQUIRES: a Result is never constructed from an ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace prefix_router
