// OpenAI-style API errors of the HTTP layer: an HTTP status and the body
// {"error": {"message", "type", "param", "code"}} (docs/architecture.md §8).
// Handlers throw ApiError; the server turns it into the response.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kvshare::server {

class ApiError : public std::exception {
 public:
  // type: invalid_request_error (400, 404, 413), authentication_error (401),
  // unavailable_error (503), server_error (500), not_supported_error (501).
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::optional<std::string> param = std::nullopt, std::optional<std::string> code = std::nullopt)
      : status_(status),
        message_(std::move(message)),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  const char* what() const noexcept override { return message_.c_str(); }
  int status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }

  // {"error": {...}} with null for a missing param or code.
  nlohmann::json ToJson() const {
    nlohmann::json e = {{"message", message_}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
    if (param_) e["param"] = *param_;
    if (code_) e["code"] = *code_;
    return {{"error", e}};
  }

 private:
  int status_;
  std::string message_, type_;
  std::optional<std::string> param_, code_;
};

// A 400 invalid_request_error naming the parameter.
inline ApiError BadRequest(std::string message, std::optional<std::string> param = std::nullopt,
                           std::optional<std::string> code = std::nullopt) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD): token
// pieces may be parts of a character.
inline std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvshare::server
