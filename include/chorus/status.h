// Public: Status and Result<T>, error values that name the problem; no exceptions cross the API.
// Standard C++ only, like every header in include/chorus. A caller builds its own message
// (Status::Error("no model at " + path)); inside chorus, src/util/status.h adds the formatting
// overload Status::Error("no model at {}", path) (fmt's checked format strings), declared below
// but usable only where that header is included.
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace chorus {

namespace detail {
// The format-string type of Status::Error(format, args...): src/util/status.h defines it; a
// translation unit without that header has no formatting overload.
template <typename... Args>
struct StatusFormat;
}  // namespace detail

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status Ok() { return Status(); }
  // An error with this message ("error" if it is empty).
  static Status Error(std::string message) {
    Status s;
    s.message_ = message.empty() ? "error" : std::move(message);
    return s;
  }
  // An error whose message is formatted from arguments (defined in src/util/status.h).
  template <typename Arg, typename... Args>
  static Status Error(typename detail::StatusFormat<Arg, Args...>::type format, Arg&& arg, Args&&... args);
  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }
  // Prefix context: "loading model: " + message.
  Status Context(const std::string& prefix) const { return ok() ? *this : Error(prefix + ": " + message_); }

 private:
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must be an error
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

 private:
  std::variant<T, Status> v_;
};

}  // namespace chorus

// Propagate an error Status from an expression returning Status.
#define CHORUS_RETURN_IF_ERROR(expr) \
  do {                               \
    ::chorus::Status _st = (expr);   \
    if (!_st.ok()) return _st;       \
  } while (0)

#define CHORUS_CONCAT_INNER(a, b) a##b
#define CHORUS_CONCAT(a, b) CHORUS_CONCAT_INNER(a, b)
// Assign the value of a Result<T> expression to lhs or return its error Status.
#define CHORUS_ASSIGN_OR_RETURN(lhs, expr)                                                  \
  auto CHORUS_CONCAT(_res_, __LINE__) = (expr);                                             \
  if (!CHORUS_CONCAT(_res_, __LINE__).ok()) return CHORUS_CONCAT(_res_, __LINE__).status(); \
  lhs = std::move(CHORUS_CONCAT(_res_, __LINE__)).value()
