// Recoverable errors as values. C++20 has no std::expected, so this is the small subset
// the project needs: a value or an Error carrying a message that already says what failed
// and where (file, key, line), and a code when one errno explains it (ENOENT: gone, EPERM:
// refused), so callers decide on the code and print the message. Callers add context and
// log once (core/log_once.h).
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace gdw {

struct Error {
  std::string message;
  int code = 0;  // the errno behind it, 0 when none
};

inline Error errno_error(int code, std::string message) { return Error{std::move(message), code}; }

// strerror() of an errno, positive as errno holds it or negative as libbpf and sd-bus return it.
inline std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}       // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}   // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

// Prefixes an error with context: "reading /x: permission denied".
inline Error with_context(const std::string& context, const Error& e) {
  return Error{context + ": " + e.message, e.code};
}

}  // namespace gdw
