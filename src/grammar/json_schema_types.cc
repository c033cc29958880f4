// The JSON Schema compiler's 'type' keyword: objects (properties, required,
// additionalProperties), arrays (items and their bounds), strings (length
// bounds), numbers, booleans and null (json_schema_compiler.h).
#include <set>
#include <string>
#include <utility>
#include <vector>

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
  const long long v = it->get<long long>();
  if (v < 0) Fail(path, std::string("'") + key + "' must be a non-negative integer, got " + it->dump());
  if (v > kMaxBound) Fail(path, std::string("'") + key + "' " + std::to_string(v) + " is above the supported 4096");
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

std::uint32_t SchemaCompiler::OfTypes(std::set<std::string> types, const Json& s, const std::string& path) {
  if (types.empty()) {  // implied by the keywords present
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
      types.insert("object");
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.insert("array");
    if (s.contains("minLength") || s.contains("maxLength")) types.insert("string");
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
  if (type == "string") {
    const int min = Bound(s, "minLength", path, 0), max = Bound(s, "maxLength", path, -1);
    if (max >= 0 && min > max) Fail(path, "minLength " + std::to_string(min) + " > maxLength " + std::to_string(max));
    return j_.String(min, max);
  }
  if (type == "number" || type == "integer") return j_.Number(type == "integer");
  const std::uint32_t r = b_.NewRule();
  if (type == "boolean") {
    b_.Alt(r, b_.Lit("true"));
    b_.Alt(r, b_.Lit("false"));
  } else {
    b_.Alt(r, b_.Lit("null"));
  }
  return r;
}

std::uint32_t SchemaCompiler::Object(const Json& s, const std::string& path) {
  const Json empty = Json::object();
  const Json* props = &empty;
  if (auto p = s.find("properties"); p != s.end()) {
    if (!p->is_object()) Fail(path, "'properties' must be an object");
    props = &*p;
  }
  std::set<std::string> required;
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) Fail(path, "'required' must be an array of strings");
    for (const Json& k : *r) {
      if (!k.is_string()) Fail(path, "'required' must be an array of strings");
      if (!props->contains(k.get<std::string>())) {
        Fail(path, "required property '" + k.get<std::string>() + "' is not declared in 'properties'");
      }
      required.insert(k.get<std::string>());
    }
  }
  const Json* extra = nullptr;
  if (auto a = s.find("additionalProperties"); a != s.end()) {
    if (!a->is_boolean() && !a->is_object()) Fail(path, "'additionalProperties' must be a boolean or a schema");
    extra = &*a;
  }
  if (props->empty()) {
    if (extra != nullptr && extra->is_boolean() && !extra->get<bool>()) {
      const std::uint32_t r = b_.NewRule();
      b_.Alt(r, Seq{b_.Byte('{')} + j_.Ws() + Seq{b_.Byte('}')});
      return r;
    }
    return j_.Map(extra == nullptr ? j_.AnyValue() : Schema(*extra, path + "/additionalProperties"));
  }
  // first[i] / rest[i]: properties i.. when none / some came before.
  const std::size_t n = props->size();
  std::vector<std::string> keys;
  std::vector<std::uint32_t> values;
  for (const auto& [k, v] : props->items()) {
    if (j_.notation() == Notation::kGemma) {
      // Gemma keys are bare: the runtime's ParseGemma4Call ends a key at ':' and refuses brackets and commas.
      if (k.empty() || k.find_first_of("{}[],:<\" \t\n\r") != std::string::npos) {
        Fail(path, "property name \"" + k + "\" cannot be written as a bare key in Gemma 4's call notation");
      }
    }
    keys.push_back(k);
    values.push_back(Schema(v, path + "/properties/" + k));
  }
  const std::uint32_t none = b_.NewRule();
  b_.Alt(none, {});
  std::uint32_t first = none, rest = none;
  for (std::size_t i = n; i-- > 0;) {
    const std::string key = j_.notation() == Notation::kGemma ? keys[i] : Json(keys[i]).dump();
    const Seq kv = b_.Lit(key) + j_.Sep(':') + Seq{GrammarBuilder::Ref(values[i])};
    const bool req = required.count(keys[i]) > 0;
    const std::uint32_t f = b_.NewRule(), r = b_.NewRule();
    b_.Alt(r, j_.Sep(',') + kv + Seq{GrammarBuilder::Ref(rest)});
    if (!req) b_.Alt(r, {GrammarBuilder::Ref(rest)});
    b_.Alt(f, kv + Seq{GrammarBuilder::Ref(rest)});
    if (!req) b_.Alt(f, {GrammarBuilder::Ref(first)});
    first = f, rest = r;
  }
  const std::uint32_t r = b_.NewRule();
  b_.Alt(r, Seq{b_.Byte('{')} + j_.Ws() + Seq{GrammarBuilder::Ref(first)} + j_.Ws() + Seq{b_.Byte('}')});
  return r;
}

std::uint32_t SchemaCompiler::ArraySchema(const Json& s, const std::string& path) {
  const int min = Bound(s, "minItems", path, 0), max = Bound(s, "maxItems", path, -1);
  if (max >= 0 && min > max) Fail(path, "minItems " + std::to_string(min) + " > maxItems " + std::to_string(max));
  std::uint32_t item = 0;
  auto it = s.find("items");
  if (it == s.end()) {
    item = j_.AnyValue();
  } else if (it->is_array()) {
    throw Error("unsupported JSON Schema keyword 'items' as an array (tuple validation) at " + path);
  } else if (it->is_boolean() && !it->get<bool>()) {
    if (min > 0) Fail(path, "'items': false with minItems > 0 matches nothing");
    return j_.Array(0, 0, 0);
  } else {
    item = Schema(*it, path + "/items");
  }
  return j_.Array(item, min, max);
}

}  // namespace kvshare::detail
