// The JSON Schema compiler's 'type' keyword: which types a schema allows,
// strings (length bounds, pattern, format), booleans and null; objects,
// arrays and numbers have files of their own (json_schema_compiler.h).
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/json_regex.h"
#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

constexpr int kMaxBound = 4096;  // minLength, maxLength, minItems, maxItems

}  // namespace

const std::set<std::string>& SchemaCompiler::TypeNames() {
  static const std::set<std::string> s = {"object", "array", "string", "number", "integer", "boolean", "null"};
  return s;
}

int SchemaCompiler::Bound(const Json& s, const char* key, const std::string& path, int absent) {
  auto it = s.find(key);
  if (it == s.end()) return absent;
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    Fail(path, std::string("'") + key + "' must be a non-negative integer, got " + it->dump());
  }
  const bool huge = it->is_number_unsigned() && it->get<unsigned long long>() > kMaxBound;
  const long long v = huge ? kMaxBound + 1LL : it->get<long long>();
  if (v < 0) Fail(path, std::string("'") + key + "' must be a non-negative integer, got " + it->dump());
  // An upper bound above 4096 is lowered to it: fewer items or characters
  // are still valid, and the counted grammar stays small.
  if (v > kMaxBound && std::string_view(key).starts_with("max")) return kMaxBound;
  if (v > kMaxBound) Fail(path, std::string("'") + key + "' " + it->dump() + " is above the supported 4096");
  return static_cast<int>(v);
}

std::set<std::string> SchemaCompiler::DeclaredTypes(const Json& s, const std::string& path) {
  std::set<std::string> types;
  if (auto t = s.find("type"); t != s.end()) {
    std::vector<Json> names = t->is_array() ? std::vector<Json>(t->begin(), t->end()) : std::vector<Json>{*t};
    if (names.empty()) Fail(path, "'type' must not be an empty array");
    for (const Json& n : names) {
      if (!n.is_string() || !TypeNames().count(n.get<std::string>())) {
        Fail(path,
             "'type' must be one of object, array, string, number, integer, boolean, null (or an array of "
             "them), got " +
                 n.dump());
      }
      types.insert(n.get<std::string>());
    }
  }
  return types;
}

std::set<std::string> SchemaCompiler::ImpliedTypes(const Json& s) {
  // A keyword of one type implies it (narrower than the spec, where it
  // leaves other types free: the output is still valid).
  std::set<std::string> types;
  for (const char* k : {"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
                        "minProperties", "maxProperties", "dependentRequired", "dependencies"}) {
    if (s.contains(k)) types.insert("object");
  }
  for (const char* k : {"items", "prefixItems", "additionalItems", "minItems", "maxItems"}) {
    if (s.contains(k)) types.insert("array");
  }
  if (auto u = s.find("uniqueItems"); u != s.end() && *u == true) types.insert("array");
  for (const char* k : {"minLength", "maxLength", "pattern"}) {
    if (s.contains(k)) types.insert("string");
  }
  if (auto f = s.find("format"); f != s.end() && f->is_string() && FormatPattern(f->get<std::string>())) {
    types.insert("string");
  }
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
    if (s.contains(k)) types.insert("number");
  }
  return types;
}

std::uint32_t SchemaCompiler::OfTypes(std::set<std::string> types, const Json& s, const std::string& path) {
  if (types.empty()) {  // implied by the keywords present
    types = ImpliedTypes(s);
    if (types.empty()) return j_.AnyValue();
  }
  if (types.size() == 1) return OfType(*types.begin(), s, path);
  const std::uint32_t r = b_.NewRule();
  for (const std::string& t : types) {
    if (t == "integer" && types.count("number")) continue;  // number covers it
    b_.Alt(r, {GrammarBuilder::Ref(OfType(t, s, path))});
  }
  return r;
}

std::uint32_t SchemaCompiler::OfType(const std::string& type, const Json& s, const std::string& path) {
  if (type == "object" || type == "array") {
    // Its opening bracket is read before any member: a $ref cycle through
    // it is not left recursion.
    std::vector<std::string> saved;
    saved.swap(unguarded_);
    const std::uint32_t r = type == "object" ? Object(s, path) : ArraySchema(s, path);
    unguarded_.swap(saved);
    return r;
  }
  if (type == "string") return StringSchema(s, path);
  if (type == "number" || type == "integer") return NumberSchema(s, type == "integer", path);
  const std::uint32_t r = b_.NewRule();
  if (type == "boolean") {
    b_.Alt(r, b_.Lit("true"));
    b_.Alt(r, b_.Lit("false"));
  } else {
    b_.Alt(r, b_.Lit("null"));
  }
  return r;
}

std::uint32_t SchemaCompiler::StringSchema(const Json& s, const std::string& path) {
  const int min = Bound(s, "minLength", path, 0), max = Bound(s, "maxLength", path, -1);
  if (max >= 0 && min > max) Fail(path, "minLength " + std::to_string(min) + " > maxLength " + std::to_string(max));
  // pattern (a list of them where allOf merged several: json_schema_merge.cc)
  // and format: the strings of all of their languages.
  // (and {"not": pattern} entries, which `not` writes: json_schema_conditional.cc)
  std::vector<std::string> patterns;
  std::vector<bool> negated;
  if (auto p = s.find("pattern"); p != s.end()) {
    for (const Json& x : p->is_array() ? *p : Json::array({*p})) {
      const bool no = p->is_array() && x.is_object() && x.size() == 1 && x.contains("not") && x["not"].is_string();
      if (!x.is_string() && !no) Fail(path, "'pattern' must be a string");
      const std::string text = no ? x["not"].get<std::string>() : x.get<std::string>();
      if (!text.empty() || no) patterns.push_back(text), negated.push_back(no);
    }
  }
  const std::size_t n = patterns.size();
  if (auto f = s.find("format"); f != s.end() && f->is_string()) {
    if (const std::string* re = FormatPattern(f->get<std::string>())) patterns.push_back(*re), negated.push_back(false);
  }
  if (patterns.empty()) return j_.String(min, max);
  const char* key = "pattern";
  try {
    RegexEmitter e(j_);
    std::vector<RegexNode> nodes;
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      key = i < n ? "pattern" : "format";
      nodes.push_back(ParseRegex(patterns[i]));
    }
    if (nodes.size() == 1 && !negated[0]) return e.String(nodes[0], min, max);
    std::vector<const RegexNode*> all;
    for (const RegexNode& x : nodes) all.push_back(&x);
    return e.Automaton(all, min, max, negated);
  } catch (const RegexEmpty& err) {
    // Matches no string: left out where it is an alternative or optional.
    throw EmptySchema("unsupported JSON Schema keyword '" + std::string(key) + "' at " + path + "/" + key + ": " +
                      err.what());
  } catch (const RegexError& err) {
    Unsupported(path, key, err.what());
  }
}

}  // namespace kvshare::detail
