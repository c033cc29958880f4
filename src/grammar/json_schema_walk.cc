// The JSON Schema compiler's walk: the recursion and its depth limit, the
// keyword checks and $ref resolution (json_schema_compiler.h).
#include <algorithm>
#include <set>
#include <string>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

// Nesting limit: the compiler recurses once per level, so without it a long
// $ref chain overflows the stack (the text's own limit: json_schema.cc).
constexpr int kMaxSchemaDepth = 128;  // schemas inside schemas, $ref hops included

const std::set<std::string>& Annotations() {
  static const std::set<std::string> s = {"title", "description", "default",  "examples",  "$comment", "$schema",
                                          "$id",   "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
  return s;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> s = {"type",      "properties", "required", "additionalProperties",
                                          "items",     "minItems",   "maxItems", "minLength",
                                          "maxLength", "enum",       "const",    "anyOf",
                                          "oneOf",     "allOf",      "$ref",     "uniqueItems"};
  return s;
}

// Refuses a keyword outside the subset, and siblings of a keyword that
// stands alone.
void CheckKeywords(const SchemaCompiler::Json& s, const std::string& path) {
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
}

}  // namespace

std::uint32_t SchemaCompiler::Schema(const Json& s, const std::string& path) {
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

std::uint32_t SchemaCompiler::SchemaAt(const Json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return j_.AnyValue();
    Fail(path, "the schema false matches nothing");
  }
  if (!s.is_object()) Fail(path, "expected a schema (an object or a boolean), got " + s.dump());
  CheckKeywords(s, path);
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) Fail(path, "'$ref' must be a string");
    return Ref(it->get<std::string>(), path);
  }
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (auto it = s.find(key); it != s.end()) return Combinator(key, *it, path);
  }
  std::set<std::string> types = DeclaredTypes(s, path);
  if (s.contains("enum") || s.contains("const")) return Values(s, types, path);
  return OfTypes(std::move(types), s, path);
}

std::uint32_t SchemaCompiler::Ref(const std::string& ref, const std::string& path) {
  if (std::find(unguarded_.begin(), unguarded_.end(), ref) != unguarded_.end()) {
    Fail(path, "'$ref' " + ref + " refers back to itself without an object or array in between (left recursion)");
  }
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#')
    Fail(path, "only local '$ref's (\"#\", \"#/$defs/NAME\") are supported, got " + ref);
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

}  // namespace kvshare::detail
