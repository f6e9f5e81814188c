#pragma once
// An error answered to an API client as OpenAI's error object:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}} with an HTTP status.
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nanovllm::server {

struct ApiError : std::runtime_error {
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string param;  // the request field at fault, or empty
  std::string code;   // a machine-readable code, or empty

  ApiError(int status, std::string type, std::string message, std::string param = "",
           std::string code = "")
      : std::runtime_error(std::move(message)),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}

  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json e = {{"message", what()}, {"type", type}};
    e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
    e["code"] = code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code);
    return {{"error", e}};
  }
};

// 400 invalid_request_error naming `param`.
template <typename... Args>
[[noreturn]] void bad_request(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, "invalid_request_error", fmt::format(f, std::forward<Args>(args)...), param);
}

}  // namespace nanovllm::server
