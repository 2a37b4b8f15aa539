// Status: the error currency that crosses the plugin boundary.
//
// Exceptions never cross the boundary: factory trampolines (see plugin.h) run inside the
// plugin and turn any exception into a Status, which the host turns into its own error.
#pragma once

#include <string>
#include <utility>

#include "grpo/sdk/version.h"

GRPO_SDK_NAMESPACE_BEGIN

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad configuration or input
  kNotFound = 2,
  kFailedPrecondition = 3,
  kInternal = 4,  // a bug or an unexpected exception
  kUnavailable = 5,
};

inline const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kUnavailable: return "unavailable";
  }
  return "unknown";
}

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

GRPO_SDK_NAMESPACE_END
