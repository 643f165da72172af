// Status and Result<T>: how fallible operations report errors across library boundaries.
// Library code returns these; only the CLI turns them into exit codes.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace rw {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,    // bad flag, bad request, bad id
  kNotFound,           // missing file or tensor
  kAlreadyExists,      // refusing to overwrite
  kCorrupt,            // malformed or damaged file (bad header, checksum mismatch)
  kUnsupported,        // valid input we do not handle (unknown dtype, format version)
  kIo,                 // an OS call failed
  kOutOfRange,         // ids or context beyond limits
  kResourceExhausted,  // memory or disk budget
  kCancelled,
  kInternal,
  kDevice,  // the GPU reported an error (CUDA): the fault policies act on these alone
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: <message>"
  std::string ToString() const;

  // Prefixes context: Status("bad header").Annotate("model.safetensors") -> "model.safetensors: bad
  // header".
  Status Annotate(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename... Args>
Status Error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT

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

}  // namespace rw

#define RW_CONCAT_INNER(a, b) a##b
#define RW_CONCAT(a, b) RW_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if it is not ok.
#define RW_RETURN_IF_ERROR(expr)     \
  do {                               \
    ::rw::Status _rw_st = (expr);    \
    if (!_rw_st.ok()) return _rw_st; \
  } while (0)

// RW_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status on failure.
#define RW_ASSIGN_OR_RETURN(lhs, expr) \
  RW_ASSIGN_OR_RETURN_IMPL(RW_CONCAT(_rw_res_, __LINE__), lhs, expr)
#define RW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
