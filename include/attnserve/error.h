// Errors: one exception type carrying file and line. Never exit(): a server must survive.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace attnserve {

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const char* file, int line) : std::runtime_error(what), file_(file), line_(line) {}
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Parts>
[[noreturn]] void throw_error(const char* file, int line, const char* cond, const Parts&... parts) {
  std::ostringstream os;
  ((os << parts), ...);
  if (cond && *cond) os << " [check failed: " << cond << "]";
  os << " (" << file << ":" << line << ")";
  throw Error(os.str(), file, line);
}
}  // namespace detail
}  // namespace attnserve

// ATTNSERVE_CHECK(cond, "message parts", value, ...): throws attnserve::Error naming file and line.
#define ATTNSERVE_CHECK(cond, ...)                                                         \
  do {                                                                                     \
    if (!(cond)) ::attnserve::detail::throw_error(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

#define ATTNSERVE_FAIL(...) ::attnserve::detail::throw_error(__FILE__, __LINE__, "", __VA_ARGS__)
