// Readers of typed OpenAI request fields, with OpenAI's error wording
// (400 invalid_type, *_below_min_value, *_above_max_value, ...): the pieces
// every part of the request parser (openai_request.h) is built from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "openai_request.h"

namespace kvshare::server {

// "a string", "an integer", "a decimal", ... (OpenAI's names of JSON types).
std::string TypeName(const nlohmann::json& v);
// Throws the 400 invalid_type for `name`: expected `expected`, got v's type.
[[noreturn]] void WrongType(const std::string& name, const std::string& expected, const nlohmann::json& v);
// 2 (not 2.0) for whole numbers, as OpenAI writes them.
std::string Num(double x);
// body[name]: a number (or null when allowed: nullopt) in [lo, hi], ends open as asked.
std::optional<double> Number(const nlohmann::json& body, const std::string& name, double lo, double hi,
                             bool lo_open = false);
// body[name]: an integer in [lo, hi], or absent / null (nullopt).
std::optional<std::int64_t> Integer(const nlohmann::json& body, const std::string& name, std::int64_t lo,
                                    std::int64_t hi);
// body[name]: a boolean, or absent / null (nullopt).
std::optional<bool> Bool(const nlohmann::json& body, const std::string& name);
// Throws the 400 unsupported_parameter: "'NAME' WHAT is not supported by this server."
[[noreturn]] void Unsupported(const std::string& name, const std::string& what);
// Refuses an unknown field (strict) or notes it in `ignored`.
void Unknown(const std::string& path, const RequestParsing& o, std::vector<std::string>& ignored);

}  // namespace kvshare::server
