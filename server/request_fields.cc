// Readers of typed OpenAI request fields (request_fields.h).
#include "request_fields.h"

#include <cmath>

#include "api_error.h"

namespace kvshare::server {

using nlohmann::json;

std::string TypeName(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a decimal";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

[[noreturn]] void WrongType(const std::string& name, const std::string& expected, const json& v) {
  throw BadRequest("Invalid type for '" + name + "': expected " + expected + ", but got " + TypeName(v) + " instead.",
                   name, "invalid_type");
}

std::string Num(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<long long>(x));
  return json(x).dump();
}

std::optional<double> Number(const json& body, const std::string& name, double lo, double hi, bool lo_open) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) WrongType(name, "a decimal", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v)) throw BadRequest("Invalid '" + name + "': must be a finite number.", name, "invalid_value");
  if (lo_open ? v <= lo : v < lo) {
    throw BadRequest("Invalid '" + name + "': decimal below minimum value. Expected a value " +
                         (lo_open ? "> " : ">= ") + Num(lo) + ", but got " + Num(v) + " instead.",
                     name, "decimal_below_min_value");
  }
  if (v > hi) {
    throw BadRequest("Invalid '" + name + "': decimal above maximum value. Expected a value <= " + Num(hi) +
                         ", but got " + Num(v) + " instead.",
                     name, "decimal_above_max_value");
  }
  return v;
}

std::optional<std::int64_t> Integer(const json& body, const std::string& name, std::int64_t lo, std::int64_t hi) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::int64_t v = 0;
  if (it->is_number_integer() || it->is_number_unsigned()) {
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      v = INT64_MAX;
    } else {
      v = it->get<std::int64_t>();
    }
  } else if (const double d = it->is_number_float() ? it->get<double>() : 0.0;
             std::isfinite(d) && d == std::floor(d) && std::fabs(d) >= 0x1p63) {
    // An integer literal past uint64 (99999999999999999999) parses as a
    // double: out of range, not "a decimal".
    v = d > 0 ? INT64_MAX : INT64_MIN;
  } else {
    WrongType(name, "an integer", *it);
  }
  const std::string got = it->is_number_float() ? it->dump() : std::to_string(v);
  if (v < lo) {
    throw BadRequest("Invalid '" + name + "': integer below minimum value. Expected a value >= " + std::to_string(lo) +
                         ", but got " + got + " instead.",
                     name, "integer_below_min_value");
  }
  if (v > hi) {
    throw BadRequest("Invalid '" + name + "': integer above maximum value. Expected a value <= " + std::to_string(hi) +
                         ", but got " + got + " instead.",
                     name, "integer_above_max_value");
  }
  return v;
}

std::optional<bool> Bool(const json& body, const std::string& name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) WrongType(name, "a boolean", *it);
  return it->get<bool>();
}

[[noreturn]] void Unsupported(const std::string& name, const std::string& what) {
  throw BadRequest("'" + name + "' " + what + " is not supported by this server.", name, "unsupported_parameter");
}

void Unknown(const std::string& path, const RequestParsing& o, std::vector<std::string>& ignored) {
  if (o.strict) throw BadRequest("Unrecognized request argument supplied: " + path, path, "unknown_parameter");
  ignored.push_back(path);
}

}  // namespace kvshare::server
