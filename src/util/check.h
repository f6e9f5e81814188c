#pragma once
// Errors: nanovllm::Error for bad input from outside (files, requests, parameters), with a
// message that names the file, tensor, field or value; NV_CHECK for internal invariants
// (always on, never compiled out).
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace nanovllm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws Error(fmt::format(...)): for input from outside the process.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace nanovllm

// Internal invariant: a violation is a bug in nanovllm, reported with file and line.
#define NV_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::nanovllm::check_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
