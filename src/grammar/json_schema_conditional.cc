// The JSON Schema compiler's if / then / else (json_schema_compiler.h
// Conditional): exact where `if` is a test the grammar can negate, a
// discriminator — `properties` whose schemas are const / enum of strings,
// booleans or null, `required`, `type: "object"` — or constrains nothing.
// Then s is (if ∧ then) ∨ (¬if ∧ else), and ¬if is one of: not an object
// (when `if` says object), a required name absent, a discriminator present
// with a value outside its set (strings outside it as a pattern,
// ^(?!(?:a|b)$), compiled exactly by json_regex_dfa.cc). Any other `if` is
// refused with its pointer.
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

using Json = SchemaCompiler::Json;

// text as a regular expression that matches it literally.
std::string Escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Json SchemaCompiler::Conditional(const Json& s, const std::string& path) {
  auto refuse = [&](const std::string& why) { Unsupported(path, "if", why); };
  Json rest = s;
  const Json cond = rest["if"];
  const Json then = rest.value("then", Json(true)), other = rest.value("else", Json(true));
  rest.erase("if"), rest.erase("then"), rest.erase("else");
  auto both = [](const Json& a, const Json& b) { return Json{{"allOf", Json::array({a, b})}}; };
  if (!s.contains("then") && !s.contains("else")) return rest;  // constrains nothing
  Json branches = Json::array();
  if (cond.is_boolean() || (cond.is_object() && !Constrains(cond, ""))) {
    branches.push_back(cond == false ? other : then);  // `if` true for every value (or none)
  } else {
    if (!cond.is_object()) refuse("'if' must be a schema");
    for (const auto& [k, v] : cond.items()) {
      const bool object = k == "type" && (v == "object" || v == Json::array({"object"}));
      if (Constrains(Json{{k, v}}, "") && k != "properties" && k != "required" && !object) {
        refuse("only an 'if' of properties with const / enum values, required and type object can be negated, "
               "not '" + k + "'");
      }
    }
    branches.push_back(both(cond, then));
    // ¬if, one way at a time (the ways may overlap: the branches are anyOf's).
    if (cond.contains("type")) {
      branches.push_back(both(Json{{"type", {"array", "string", "number", "boolean", "null"}}}, other));
    }
    for (const Json& k : cond.value("required", Json::array())) {
      if (!k.is_string()) refuse("'required' must be an array of strings");
      branches.push_back(both(Json{{"type", "object"}, {"properties", {{k.get<std::string>(), false}}}}, other));
    }
    const Json props = cond.value("properties", Json::object());
    for (const auto& [k, v] : props.items()) {
      Json bare = v.is_object() ? v : Json::object();
      bare.erase("type");
      if (!v.is_object() || Constrains(bare, "enum") == Constrains(bare, "const") ||
          (v.contains("enum") && !v["enum"].is_array())) {
        refuse("the schema of '" + k + "' in 'if' is not one const or enum");
      }
      const Json values = v.contains("const") ? Json::array({v["const"]}) : v["enum"];
      if (v.contains("type") && !Matches(Json{{"type", v["type"]}, {"enum", values}}, values[0])) {
        refuse("the schema of '" + k + "' in 'if' has a type its values do not have");
      }
      // The values outside the set, type by type.
      Json outside = Json::array();
      std::set<bool> bools;
      std::vector<std::string> strings;
      bool null = false;
      for (const Json& x : values) {
        if (x.is_boolean()) bools.insert(x.get<bool>());
        if (x.is_string()) strings.push_back(x.get<std::string>());
        if (x.is_null()) null = true;
        if (x.is_number() || x.is_object() || x.is_array()) {
          refuse("the values of '" + k + "' in 'if' are not strings, booleans or null");
        }
      }
      for (const char* t : {"object", "array", "number"}) outside.push_back(Json{{"type", t}});
      if (!null) outside.push_back(Json{{"type", "null"}});
      if (bools.size() < 2) outside.push_back(bools.empty() ? Json{{"type", "boolean"}} : Json{{"const", !*bools.begin()}});
      if (strings.empty()) {
        outside.push_back(Json{{"type", "string"}});
      } else {
        std::string alts;
        for (const std::string& x : strings) alts += (alts.empty() ? "" : "|") + Escaped(x);
        outside.push_back(Json{{"type", "string"}, {"pattern", "^(?!(?:" + alts + ")$)"}});
      }
      branches.push_back(both(
          Json{{"type", "object"}, {"required", Json::array({k})}, {"properties", {{k, {{"anyOf", outside}}}}}}, other));
    }
  }
  if (branches.size() == 1) return both(rest, branches[0]);
  return both(rest, Json{{"anyOf", branches}});
}

}  // namespace kvshare::detail
