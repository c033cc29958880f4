// JSON Schema → byte-level grammar (kvshare/grammar/grammar.h lists the subset and
// the output shape).
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "grammar/grammar_ir.h"
#include "grammar/json_grammar.h"

namespace kvshare {
namespace {

// ordered_json: properties keep the order the schema declares them in.
using Json = nlohmann::ordered_json;
using detail::GrammarBuilder;
using Seq = GrammarBuilder::Seq;
using detail::operator+;

constexpr int kMaxBound = 4096;  // minLength, maxLength, minItems, maxItems
// Nesting limits: the compiler (and nlohmann's dump) recurse once per level,
// so without them a deep text or a long $ref chain overflows the stack.
constexpr int kMaxJsonDepth = 256;   // arrays / objects of the schema text
constexpr int kMaxSchemaDepth = 128;  // schemas inside schemas, $ref hops included
// ordered_json finds a key by a linear scan, so parsing an object of n
// members costs n^2 / 2 comparisons (200000 members: minutes).
constexpr int kMaxMembers = 1024;  // per object

const std::set<std::string>& Annotations() {
  static const std::set<std::string> s = {"title",      "description", "default",  "examples",  "$comment",
                                          "$schema",    "$id",         "deprecated", "readOnly", "writeOnly",
                                          "$defs",      "definitions"};
  return s;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> s = {"type",      "properties", "required",  "additionalProperties",
                                          "items",     "minItems",   "maxItems",  "minLength",
                                          "maxLength", "enum",       "const",     "anyOf",
                                          "oneOf",     "allOf",      "$ref",      "uniqueItems"};
  return s;
}

const std::set<std::string>& TypeNames() {
  static const std::set<std::string> s = {"object", "array", "string", "number", "integer", "boolean", "null"};
  return s;
}

std::string JsonTypeOf(const Json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  return "number";
}

// A value as the grammar's notation writes it (enum / const).
std::string ValueText(const Json& v, detail::Notation n) {
  if (n == detail::Notation::kJson) return v.dump();
  if (v.is_string()) return "<|\"|>" + v.get<std::string>() + "<|\"|>";
  if (v.is_array() || v.is_object()) {
    std::string out = v.is_array() ? "[" : "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ",";
      first = false;
      if (v.is_object()) out += k + ":";
      out += ValueText(x, n);
    }
    return out + (v.is_array() ? "]" : "}");
  }
  return v.dump();
}

class Compiler {
 public:
  Compiler(const Json& root, detail::JsonGrammar& j) : root_(root), j_(j), b_(j_.builder()) {}

  std::uint32_t Schema(const Json& s, const std::string& path);
  std::uint32_t AnyObject() { return j_.Map(j_.AnyValue()); }

 private:
  [[noreturn]] static void Fail(const std::string& path, const std::string& what) {
    throw Error("JSON Schema at " + path + ": " + what);
  }

  int Bound(const Json& s, const char* key, const std::string& path, int absent) {
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

  std::uint32_t Object(const Json& s, const std::string& path);
  std::uint32_t ArraySchema(const Json& s, const std::string& path);
  std::uint32_t OfType(const std::string& type, const Json& s, const std::string& path);
  std::uint32_t Ref(const std::string& ref, const std::string& path);
  std::set<std::string> Types(const Json& s, int depth);
  std::uint32_t SchemaAt(const Json& s, const std::string& path);

  const Json& root_;
  int depth_ = 0;  // Schema calls in progress
  detail::JsonGrammar& j_;
  GrammarBuilder& b_;
  std::map<std::string, std::uint32_t> refs_;
  // $refs entered since the last object or array: a cycle among them would
  // be left recursion (it reads nothing before coming back).
  std::vector<std::string> unguarded_;
};

std::uint32_t Compiler::Schema(const Json& s, const std::string& path) {
  if (depth_ >= kMaxSchemaDepth) {
    Fail(path, "schemas nested deeper than " + std::to_string(kMaxSchemaDepth) +
                   " levels (properties, items, anyOf / oneOf / allOf and $ref hops) are not supported");
  }
  ++depth_;
  struct Leave {
    int& d;
    ~Leave() { --d; }
  } leave{depth_};
  return SchemaAt(s, path);
}

std::uint32_t Compiler::SchemaAt(const Json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return j_.AnyValue();
    Fail(path, "the schema false matches nothing");
  }
  if (!s.is_object()) Fail(path, "expected a schema (an object or a boolean), got " + s.dump());
  for (const auto& [k, v] : s.items()) {
    if (!Annotations().count(k) && !Supported().count(k)) {
      throw Error("unsupported JSON Schema keyword '" + k + "' at " + path);
    }
  }
  if (auto u = s.find("uniqueItems"); u != s.end() && !(u->is_boolean() && !u->get<bool>())) {
    throw Error("unsupported JSON Schema keyword 'uniqueItems' (other than false) at " + path);
  }
  // Keywords that stand alone: their siblings (besides annotations) are refused
  // rather than intersected.
  for (const char* alone : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (!s.contains(alone)) continue;
    for (const auto& [k, v] : s.items()) {
      if (k != alone && !Annotations().count(k)) {
        throw Error(std::string("unsupported JSON Schema keyword '") + k + "' next to '" + alone + "' at " + path +
                    " (put it inside the " + alone + ")");
      }
    }
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) Fail(path, "'$ref' must be a string");
    return Ref(it->get<std::string>(), path);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_array() || it->empty()) Fail(path, std::string("'") + key + "' must be a non-empty array of schemas");
    const std::string p = path + "/" + key;
    if (std::string(key) == "allOf") {
      if (it->size() != 1) throw Error("unsupported JSON Schema keyword 'allOf' with more than one schema at " + path);
      return Schema(it->front(), p + "/0");
    }
    if (std::string(key) == "oneOf") {
      std::set<std::string> seen;
      for (const Json& branch : *it) {
        std::set<std::string> t = Types(branch, 0);
        if (t.count("number")) t.insert("integer");
        for (const std::string& name : t) {
          if (!seen.insert(name).second) {
            throw Error("unsupported JSON Schema keyword 'oneOf' at " + path +
                        ": its branches may overlap (both allow " + name +
                        "); only oneOf with branches of disjoint types is supported, use anyOf");
          }
        }
      }
    }
    const std::uint32_t r = b_.NewRule();
    for (std::size_t i = 0; i < it->size(); ++i) {
      b_.Alt(r, {GrammarBuilder::Ref(Schema((*it)[i], p + "/" + std::to_string(i)))});
    }
    return r;
  }
  std::set<std::string> types;
  if (auto t = s.find("type"); t != s.end()) {
    std::vector<Json> names = t->is_array() ? std::vector<Json>(t->begin(), t->end()) : std::vector<Json>{*t};
    if (names.empty()) Fail(path, "'type' must not be an empty array");
    for (const Json& n : names) {
      if (!n.is_string() || !TypeNames().count(n.get<std::string>())) {
        Fail(path, "'type' must be one of object, array, string, number, integer, boolean, null (or an array of "
                   "them), got " + n.dump());
      }
      types.insert(n.get<std::string>());
    }
  }
  if (s.contains("enum") || s.contains("const")) {
    std::vector<Json> values;
    if (auto c = s.find("const"); c != s.end()) values.push_back(*c);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) Fail(path, "'enum' must be a non-empty array");
      if (!values.empty()) {  // const and enum: the const, if listed
        if (std::find(e->begin(), e->end(), values[0]) == e->end()) values.clear();
      } else {
        values.assign(e->begin(), e->end());
      }
    }
    const std::uint32_t r = b_.NewRule();
    int n = 0;
    for (const Json& v : values) {
      const std::string t = JsonTypeOf(v);
      const bool ok = types.empty() || types.count(t) || (t == "integer" && types.count("number")) ||
                      (t == "number" && types.count("integer") && v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())));
      if (!ok) continue;
      b_.Alt(r, {GrammarBuilder::Ref(j_.Literal(ValueText(v, j_.notation())))});
      ++n;
    }
    if (n == 0) Fail(path, "no value of 'enum' / 'const' matches 'type'");
    return r;
  }
  if (types.empty()) {  // implied by the keywords present
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types.insert("object");
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

std::uint32_t Compiler::OfType(const std::string& type, const Json& s, const std::string& path) {
  if (type == "object") {
    std::vector<std::string> saved;
    saved.swap(unguarded_);
    const std::uint32_t r = Object(s, path);
    unguarded_.swap(saved);
    return r;
  }
  if (type == "array") {
    std::vector<std::string> saved;
    saved.swap(unguarded_);
    const std::uint32_t r = ArraySchema(s, path);
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

std::uint32_t Compiler::Object(const Json& s, const std::string& path) {
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
    if (j_.notation() == detail::Notation::kGemma) {
      // Gemma keys are bare: ParseGemma4Call ends a key at ':' and refuses brackets and commas.
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
    const std::string key = j_.notation() == detail::Notation::kGemma ? keys[i] : Json(keys[i]).dump();
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

std::uint32_t Compiler::ArraySchema(const Json& s, const std::string& path) {
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

std::uint32_t Compiler::Ref(const std::string& ref, const std::string& path) {
  if (std::find(unguarded_.begin(), unguarded_.end(), ref) != unguarded_.end()) {
    Fail(path, "'$ref' " + ref + " refers back to itself without an object or array in between (left recursion)");
  }
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#') Fail(path, "only local '$ref's (\"#\", \"#/$defs/NAME\") are supported, got " + ref);
  const Json* target = &root_;
  std::size_t at = 1;
  while (at < ref.size()) {
    if (ref[at] != '/') Fail(path, "'$ref' " + ref + " is not a JSON pointer (\"#/...\")");
    const std::size_t next = std::min(ref.find('/', at + 1), ref.size());
    std::string part;  // JSON pointer escapes: ~1 is '/', ~0 is '~'
    for (std::size_t p = at + 1; p < next; ++p) {
      if (ref[p] == '~' && p + 1 < next && (ref[p + 1] == '0' || ref[p + 1] == '1')) {
        part += ref[++p] == '1' ? '/' : '~';
      } else {
        part += ref[p];
      }
    }
    if (!target->is_object() || !target->contains(part)) Fail(path, "'$ref' " + ref + " does not resolve");
    target = &(*target)[part];
    at = next;
  }
  const std::uint32_t r = b_.NewRule();
  refs_[ref] = r;
  unguarded_.push_back(ref);
  b_.Alt(r, {GrammarBuilder::Ref(Schema(*target, ref))});
  unguarded_.pop_back();
  return r;
}

// The JSON types a schema's instances may have (for oneOf), all seven when
// it does not say.
std::set<std::string> Compiler::Types(const Json& s, int depth) {
  std::set<std::string> all = TypeNames();
  if (depth > 32 || !s.is_object()) return all;
  if (auto r = s.find("$ref"); r != s.end() && r->is_string() && r->get<std::string>().rfind("#/", 0) == 0) {
    const Json* t = &root_;
    std::string rest = r->get<std::string>().substr(2);
    while (!rest.empty()) {
      const std::size_t slash = std::min(rest.find('/'), rest.size());
      const std::string part = rest.substr(0, slash);
      if (!t->is_object() || !t->contains(part)) return all;
      t = &(*t)[part];
      rest = slash < rest.size() ? rest.substr(slash + 1) : "";
    }
    return Types(*t, depth + 1);
  }
  std::set<std::string> out;
  if (auto c = s.find("const"); c != s.end()) return {JsonTypeOf(*c)};
  if (auto e = s.find("enum"); e != s.end() && e->is_array()) {
    for (const Json& v : *e) out.insert(JsonTypeOf(v));
    return out;
  }
  if (auto t = s.find("type"); t != s.end()) {
    if (t->is_string()) return {t->get<std::string>()};
    if (t->is_array()) {
      for (const Json& n : *t) {
        if (n.is_string()) out.insert(n.get<std::string>());
      }
      return out;
    }
  }
  return all;
}

Json ParseSchema(std::string_view text) {
  try {
    std::vector<int> members;  // of each object being parsed
    return Json::parse(text, [&members](int depth, Json::parse_event_t event, Json&) {
      if (depth > kMaxJsonDepth) {
        throw Error("the JSON Schema is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      if (event == Json::parse_event_t::object_start) members.push_back(0);
      if (event == Json::parse_event_t::object_end && !members.empty()) members.pop_back();
      if (event == Json::parse_event_t::key && !members.empty() && ++members.back() > kMaxMembers) {
        throw Error("the JSON Schema has an object of more than " + std::to_string(kMaxMembers) + " members");
      }
      return true;
    });
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for "1e400"
    throw Error(std::string("the JSON Schema is not valid JSON: ") + e.what());
  }
}

}  // namespace

std::uint32_t detail::CompileSchemaRule(JsonGrammar& j, std::string_view schema) {
  const Json root = ParseSchema(schema);
  Compiler c(root, j);
  return c.Schema(root, "#");
}

std::shared_ptr<const Grammar> CompileJsonSchema(std::string_view schema, const JsonGrammarOptions& options) {
  detail::JsonGrammar j(options);
  const std::uint32_t value = detail::CompileSchemaRule(j, schema);
  return j.Finish(value);
}

std::shared_ptr<const Grammar> AnyJsonObjectGrammar(const JsonGrammarOptions& options) {
  const Json root = Json::object();
  detail::JsonGrammar j(options);
  Compiler c(root, j);
  const std::uint32_t value = c.AnyObject();
  return j.Finish(value);
}

}  // namespace kvshare
