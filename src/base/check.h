// CHECK: for broken invariants only (programming errors). Fallible paths return Status.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace rw::detail {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond,
                                     const std::string& msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}
}  // namespace rw::detail

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) ::rw::detail::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
  do {                                                                                             \
    if (!(cond)) ::rw::detail::CheckFailed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)
