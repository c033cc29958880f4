// The JSON Schema compiler's negations (json_schema_compiler.h): `not` of
// const / enum, type, required and anyOf / allOf of those (Negation), and
// if / then / else (Conditional): exact where `if` is a test the grammar can negate, a
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
      const Json outside = Outside(values, path, "if");
      branches.push_back(both(
          Json{{"type", "object"}, {"required", Json::array({k})}, {"properties", {{k, outside}}}}, other));
    }
  }
  if (branches.size() == 1) return both(rest, branches[0]);
  return both(rest, Json{{"anyOf", branches}});
}

Json SchemaCompiler::Outside(const Json& values, const std::string& path, const char* key) {
  Json outside = Json::array();
  std::set<bool> bools;
  std::vector<std::string> strings;
  bool null = false;
  for (const Json& x : values) {
    if (x.is_boolean()) bools.insert(x.get<bool>());
    if (x.is_string()) strings.push_back(x.get<std::string>());
    if (x.is_null()) null = true;
    if (x.is_number() || x.is_object() || x.is_array()) {
      Unsupported(path, key, "only values outside a set of strings, booleans or null can be written");
    }
  }
  for (const char* t : {"object", "array", "number"}) outside.push_back(Json{{"type", t}});
  if (!null) outside.push_back(Json{{"type", "null"}});
  if (bools.size() < 2) outside.push_back(bools.empty() ? Json{{"type", "boolean"}} : Json{{"const", !*bools.begin()}});
  if (strings.empty()) {
    outside.push_back(Json{{"type", "string"}});
  } else {
    std::string alts;
    // Built by appends: GCC 12 warns (-Wrestrict) on "..." + std::string&&.
    for (const std::string& x : strings) {
      if (!alts.empty()) alts += '|';
      alts += Escaped(x);
    }
    std::string pattern = "^(?!(?:";
    pattern += alts;
    pattern += ")$)";
    outside.push_back(Json{{"type", "string"}, {"pattern", pattern}});
  }
  return Json{{"anyOf", outside}};
}

Json SchemaCompiler::Negation(const Json& x, const std::string& path, int depth) {
  // path: where the negated schema is (…/not, …/not/anyOf/0).
  auto refuse = [&](const std::string& why) {
    throw Error("unsupported JSON Schema keyword 'not' at " + path + ": " + why);
  };
  if (depth > 8) refuse("nested too deeply");
  if (x == true) Empty(path, "not true matches nothing");
  if (x == false) return Json::object();
  if (!x.is_object()) refuse("'not' must be a schema");
  const Json others = Json{{"type", {"array", "string", "number", "boolean", "null"}}};
  std::vector<std::string> keys;
  for (const auto& [k, v] : x.items()) {
    if (Constrains(Json{{k, v}}, "")) keys.push_back(k);
  }
  const bool object = x.contains("type") && (x["type"] == "object" || x["type"] == Json::array({"object"}));
  if (keys.empty()) Empty(path, "'not' of a schema that every value matches");
  if (keys.size() == 1 && (keys[0] == "enum" || keys[0] == "const")) {
    return Outside(keys[0] == "const" ? Json::array({x["const"]}) : x["enum"], path, "not");
  }
  // Strings without a match of the pattern (json_regex_dfa.cc complements
  // its automaton); `pattern` holds for other types.
  if (keys.size() == 1 && keys[0] == "pattern" && x["pattern"].is_string()) {
    return Json{{"anyOf", Json::array({Json{{"type", {"object", "array", "number", "boolean", "null"}}},
                                       Json{{"type", "string"}, {"pattern", Json::array({Json{{"not", x["pattern"]}}})}}})}};
  }
  if (keys.size() == 1 && keys[0] == "type") {
    std::set<std::string> named;
    for (const Json& t : x["type"].is_array() ? x["type"] : Json::array({x["type"]})) {
      if (t.is_string()) named.insert(t.get<std::string>());
    }
    Json rest = Json::array();
    for (const char* t : {"object", "array", "string", "boolean", "null"}) {
      if (!named.count(t)) rest.push_back(t);
    }
    if (named.count("integer") && !named.count("number")) refuse("'not' of integer (numbers other than integers)");
    if (!named.count("number")) rest.push_back("number");
    if (rest.empty()) Empty(path, "'not' of every type");
    return Json{{"type", rest}};
  }
  // Objects without one of the required names (non-objects match
  // `required`, so they are kept out unless x says object).
  if ((keys.size() == 1 || (keys.size() == 2 && object)) && x.contains("required") && x["required"].is_array()) {
    Json alts = Json::array();
    if (object) alts.push_back(others);
    for (const Json& r : x["required"]) {
      if (!r.is_string()) refuse("'required' must be an array of strings");
      alts.push_back(Json{{"type", "object"}, {"properties", {{r.get<std::string>(), false}}}});
    }
    if (alts.empty()) Empty(path, "'not' of required [] matches nothing");
    return alts.size() == 1 ? alts[0] : Json{{"anyOf", alts}};
  }
  // not anyOf: none of them; not allOf: one of them fails.
  if (keys.size() == 1 && (keys[0] == "anyOf" || keys[0] == "allOf") && x[keys[0]].is_array()) {
    Json parts = Json::array();
    for (std::size_t i = 0; i < x[keys[0]].size(); ++i) {
      parts.push_back(Negation(x[keys[0]][i], path + "/" + keys[0] + "/" + std::to_string(i), depth + 1));
    }
    return Json{{keys[0] == "anyOf" ? "allOf" : "anyOf", parts}};
  }
  throw Error("unsupported JSON Schema keyword 'not' at " + path +
              ": only 'not' of const / enum, type, required, pattern, and anyOf / allOf of those can be enforced");
}

}  // namespace kvshare::detail
