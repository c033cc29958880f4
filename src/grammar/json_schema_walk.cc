// The JSON Schema compiler's walk: the recursion and its depth limit, the
// keyword checks and $ref resolution (json_schema_compiler.h).
#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <string>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

// Nesting limit: the compiler recurses once per level, so without it a long
// $ref chain overflows the stack (the text's own limit: json_schema.cc).
constexpr int kMaxSchemaDepth = 128;  // schemas inside schemas, $ref hops included

// The keywords that constrain values and that the compiler enforces; every
// other keyword is an annotation or unknown, and the spec says to ignore
// those (title, $id, x-*, readOnly, ...), except the ones below that it
// cannot enforce exactly.
const std::set<std::string>& Enforced() {
  static const std::set<std::string> s = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "patternProperties",
                                          "propertyNames",
                                          "minProperties",
                                          "maxProperties",
                                          "dependentRequired",
                                          "dependencies",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref"};
  return s;
}

// Refuses the keywords that constrain values but cannot be enforced
// exactly, with their JSON pointer.
void CheckKeywords(const SchemaCompiler::Json& s, const std::string& path) {
  auto refuse = [&path](const std::string& k, const std::string& why) {
    throw Error("unsupported JSON Schema keyword '" + k + "' at " + path + "/" + k + ": " + why);
  };
  for (const char* k : {"contains", "unevaluatedItems", "dependentSchemas",
                        "$dynamicRef", "$recursiveRef"}) {
    if (s.contains(k)) refuse(k, "it cannot be enforced exactly by a grammar");
  }
  if (auto d = s.find("dependencies"); d != s.end() && d->is_object()) {
    for (const auto& [k, v] : d->items()) {
      if (!v.is_array()) refuse("dependencies", "only the array form (dependentRequired) can be enforced");
    }
  }
}

// Whether a schema below the root has an $id (or draft 4's id) that is not
// a bare fragment: $refs under it resolve against another base.
bool NestedIds(const SchemaCompiler::Json& s, bool root, int depth = 0) {
  if (depth > 300) return false;
  if (s.is_object()) {
    for (const char* id : {"$id", "id"}) {
      if (auto it = s.find(id); !root && it != s.end() && it->is_string() && !it->get<std::string>().empty() &&
                                it->get<std::string>()[0] != '#') {
        return true;
      }
    }
  }
  if (s.is_object() || s.is_array()) {
    for (const auto& v : s) {
      if (NestedIds(v, false, depth + 1)) return true;
    }
  }
  return false;
}

}  // namespace

bool SchemaCompiler::Constrains(const Json& s, const char* except) {
  for (const auto& [k, v] : s.items()) {
    if (k != except && Enforced().count(k)) return true;
  }
  return false;
}

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
    Empty(path, "the schema false matches nothing");
  }
  if (!s.is_object()) Fail(path, "expected a schema (an object or a boolean), got " + s.dump());
  CheckKeywords(s, path);
  if (s.contains("unevaluatedProperties")) return Schema(Unevaluated(s, path), path);
  if (s.contains("if")) return Schema(Conditional(s, path), path);
  if (auto n = s.find("not"); n != s.end()) {
    Json rest = s;
    rest.erase("not");
    return Schema(Json{{"allOf", Json::array({rest, Negation(*n, path + "/not")})}}, path);
  }
  if (std::optional<Json> n = Normalized(s, path)) return Schema(*n, path);
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
  const Json* target = &Resolve(ref, path);
  const std::uint32_t r = b_.NewRule();
  refs_[ref] = r;
  unguarded_.push_back(ref);
  b_.Alt(r, {GrammarBuilder::Ref(Schema(*target, ref))});
  unguarded_.pop_back();
  return r;
}

const SchemaCompiler::Json& SchemaCompiler::Resolve(const std::string& ref_in, const std::string& path) {
  std::string ref = ref_in;
  // The document's own $id (or draft 4's id) before the fragment names it.
  for (const char* id : {"$id", "id"}) {
    if (auto it = root_.find(id); it != root_.end() && it->is_string()) {
      std::string base = it->get<std::string>();
      if (!base.empty() && base.back() == '#') base.pop_back();
      if (!base.empty() && ref.rfind(base + "#", 0) == 0) ref = ref.substr(base.size());
      if (!base.empty() && ref == base) ref = "#";
    }
  }
  if (!nested_ids_) nested_ids_ = NestedIds(root_, true);
  if (*nested_ids_) {
    throw Error("unsupported JSON Schema keyword '$ref' at " + path +
                "/$ref: the document changes its base URI ($id inside a subschema)");
  }
  if (ref.empty() || ref[0] != '#') {
    throw Error("unsupported JSON Schema keyword '$ref' at " + path + "/$ref: only local references (\"#\", " +
                "\"#/$defs/NAME\") are supported, got " + ref_in);
  }
  if (ref.size() > 1 && ref[1] != '/') {
    throw Error("unsupported JSON Schema keyword '$ref' at " + path + "/$ref: anchors (" + ref_in +
                ") are not supported, only JSON pointers (\"#/$defs/NAME\")");
  }
  const Json* target = &root_;
  std::size_t at = 1;
  while (at < ref.size()) {
    if (ref[at] != '/') Fail(path, "'$ref' " + ref + " is not a JSON pointer (\"#/...\"), anchors are not supported");
    const std::size_t next = std::min(ref.find('/', at + 1), ref.size());
    std::string part;  // JSON pointer escapes: ~1 is '/', ~0 is '~'; URI escapes %XX
    for (std::size_t p = at + 1; p < next; ++p) {
      if (ref[p] == '~' && p + 1 < next && (ref[p + 1] == '0' || ref[p + 1] == '1')) {
        part += ref[++p] == '1' ? '/' : '~';
      } else if (ref[p] == '%' && p + 2 < next && std::isxdigit(static_cast<unsigned char>(ref[p + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(ref[p + 2]))) {
        part += static_cast<char>(std::stoi(ref.substr(p + 1, 2), nullptr, 16));
        p += 2;
      } else {
        part += ref[p];
      }
    }
    if (target->is_array() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos &&
        std::stoul(part) < target->size()) {
      target = &(*target)[std::stoul(part)];
    } else if (target->is_object() && target->contains(part)) {
      target = &(*target)[part];
    } else {
      Fail(path, "'$ref' " + ref_in + " does not resolve");
    }
    at = next;
  }
  return *target;
}

bool SchemaCompiler::LegacyRef() const {
  auto it = root_.find("$schema");
  if (it == root_.end() || !it->is_string()) return false;
  const std::string v = it->get<std::string>();
  for (const char* d : {"draft-03", "draft-04", "draft-06", "draft-07"}) {
    if (v.find(d) != std::string::npos) return true;
  }
  return false;
}

}  // namespace kvshare::detail
