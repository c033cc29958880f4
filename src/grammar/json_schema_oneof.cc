// The JSON Schema compiler's test that oneOf's branches exclude each other
// (json_schema_compiler.h Excludes): oneOf asks for exactly one matching
// branch, which a grammar of alternatives (anyOf) enforces only when no
// output of one branch is valid against another. Shown by:
//   - types: the types a's grammar writes (declared, or implied by its
//     keywords: a narrower output than the spec's) are not b's;
//   - const / enum: a writes only values that b does not list;
//   - objects: b requires a property that a never writes (a writes only its
//     declared and required properties, grammar.h), or a property a always
//     writes has a value that b's schema of it excludes (the same test,
//     recursively: a discriminator such as {"kind": {"const": "circle"}}),
//     or b allows no property a always writes.
// Schemas reached through $refs that stand alone; anything else (allOf,
// nested anyOf, a $ref next to other keywords) is not looked into, and the
// oneOf is refused.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

using Json = SchemaCompiler::Json;

std::set<std::string> Keys(const Json& s, const char* key) {
  std::set<std::string> out;
  if (auto it = s.find(key); it != s.end() && it->is_object()) {
    for (const auto& [k, v] : it->items()) out.insert(k);
  } else if (it != s.end() && it->is_array()) {
    for (const Json& v : *it) {
      if (v.is_string()) out.insert(v.get<std::string>());
    }
  }
  return out;
}

}  // namespace

std::vector<Json> SchemaCompiler::FiniteScalars(const Json& s) {
  std::vector<Json> v;
  if (auto c = s.find("const"); c != s.end()) v.push_back(*c);
  if (auto e = s.find("enum"); v.empty() && e != s.end() && e->is_array()) v.assign(e->begin(), e->end());
  for (const Json& x : v) {
    if (x.is_object() || x.is_array()) return {};
  }
  return v;
}

bool SchemaCompiler::Excludes(const Json& a_in, const Json& b_in, int depth) {
  if (a_in == false || b_in == false) return true;  // no value on one side
  if (depth > 3) return false;
  int hops = 0;
  // s through standalone $refs and allOf merged (Normalized); null when s
  // is not a plain schema object, or anyOf / oneOf alone (`alts`).
  auto plain = [&](const Json* s, Json& keep, const Json*& alts) -> const Json* {
    alts = nullptr;
    while (s != nullptr && s->is_object() && ++hops < 64) {
      if (s->contains("if")) return nullptr;
      if (s->contains("$ref") && !Constrains(*s, "$ref")) {
        if (!(*s)["$ref"].is_string()) return nullptr;
        s = &Resolve((*s)["$ref"].get<std::string>(), "#");
        continue;
      }
      std::optional<Json> n;
      try {
        n = Normalized(*s, "#");
      } catch (const Error&) {
        return nullptr;
      }
      if (!n) break;
      keep = std::move(*n);
      s = &keep;
    }
    if (s == nullptr || !s->is_object() || hops >= 64) return nullptr;
    for (const char* k : {"anyOf", "oneOf"}) {
      if (s->contains(k) && (*s)[k].is_array() && !Constrains(*s, k)) alts = &(*s)[k];
    }
    if (alts != nullptr) return s;
    for (const char* k : {"allOf", "anyOf", "oneOf", "$ref", "if"}) {
      if (s->contains(k)) return nullptr;  // if / then / else may add properties
    }
    return s;
  };
  Json keep_a, keep_b;
  const Json *alts_a = nullptr, *alts_b = nullptr;
  const Json* a = plain(&a_in, keep_a, alts_a);
  const Json* b = plain(&b_in, keep_b, alts_b);
  if (a == nullptr || b == nullptr) return false;
  // Alternatives: a writes what one of its branches writes; a value valid
  // against b is valid against one of b's.
  if (alts_a != nullptr || alts_b != nullptr) {
    const Json* alts = alts_a != nullptr ? alts_a : alts_b;
    for (const Json& branch : *alts) {
      if (!(alts_a != nullptr ? Excludes(branch, *b, depth) : Excludes(*a, branch, depth))) return false;
    }
    return true;
  }
  // Values: a's all outside b's list, or all in the list b's `not` names.
  const std::vector<Json> va = FiniteScalars(*a), vb = FiniteScalars(*b);
  if (auto n = b->find("not"); n != b->end() && !va.empty()) {
    const std::vector<Json> vn = FiniteScalars(*n);
    bool all = true;
    for (const Json& x : va) all = all && std::find(vn.begin(), vn.end(), x) != vn.end();
    if (all) return true;
  }
  if (!va.empty() && !vb.empty()) {
    bool shared = false;
    for (const Json& x : va) shared = shared || std::find(vb.begin(), vb.end(), x) != vb.end();
    if (!shared) return true;
  }
  std::set<std::string> out = Types(*a, 0);
  if (!a->contains("type") && !a->contains("enum") && !a->contains("const")) {
    if (std::set<std::string> implied = ImpliedTypes(*a); !implied.empty()) out = implied;
  }
  std::set<std::string> in = Types(*b, 0);
  if (out.count("number")) out.insert("integer");  // 1 is a number and an integer
  if (in.count("number")) in.insert("integer");
  for (const std::string& t : out) {
    if (!in.count(t)) continue;
    if (t != "object") return false;
    if (ObjectsApart(*a, *b, depth)) continue;
    return false;
  }
  return true;
}

bool SchemaCompiler::ObjectsApart(const Json& a, const Json& b, int depth) {
  const Json empty = Json::object();
  auto member = [&](const Json& s, const char* key) -> const Json& {
    auto it = s.find(key);
    return it != s.end() && it->is_object() ? *it : empty;
  };
  const Json &pa = member(a, "properties"), &pb = member(b, "properties");
  const Json &pat_a = member(a, "patternProperties"), &pat_b = member(b, "patternProperties");
  const std::set<std::string> req_a = Keys(a, "required");
  // Names dependentRequired makes a write (Object requires them).
  std::set<std::string> deps;
  for (const char* key : {"dependentRequired", "dependencies"}) {
    for (const auto& [k, v] : member(a, key).items()) {
      for (const Json& d : v.is_array() ? v : Json::array()) {
        if (d.is_string()) deps.insert(d.get<std::string>());
      }
    }
  }
  bool keys_mode = !req_a.empty() || !deps.empty();
  for (const auto& [k, v] : pa.items()) keys_mode = keys_mode || v != false;
  // What a writes for the name x (json_schema_objects.cc Object): with
  // declared or required names those only, each of its declared schema;
  // otherwise a map whose keys match one of its patterns (each value
  // valid against all of them), or any key when it has none and allows
  // others. Null: never written; empty: any value.
  auto written = [&](const std::string& x, std::vector<const Json*>& values) {
    values.clear();
    if (keys_mode) {
      if (pa.contains(x)) return values.push_back(&pa[x]), true;
      return req_a.count(x) > 0 || deps.count(x) > 0;
    }
    if (!pat_a.empty()) {
      bool matched = false;
      for (const auto& [pat, ps] : pat_a.items()) {
        matched = matched || Matches(Json{{"type", "string"}, {"pattern", pat}}, Json(x));
        values.push_back(&ps);
      }
      return matched;
    }
    if (a.value("additionalProperties", Json(true)) == false) return false;
    if (auto ap = a.find("additionalProperties"); ap != a.end() && ap->is_object()) values.push_back(&*ap);
    return true;
  };
  // The schemas b applies to the name x (nullptr in `none`: b allows no
  // such name).
  auto applied = [&](const std::string& x, bool& none) {
    std::vector<const Json*> out;
    none = false;
    if (pb.contains(x)) return out.push_back(&pb[x]), out;
    for (const auto& [pat, ps] : pat_b.items()) {
      if (Matches(Json{{"type", "string"}, {"pattern", pat}}, Json(x))) out.push_back(&ps);
    }
    if (!out.empty()) return out;
    auto ap = b.find("additionalProperties");
    if (ap != b.end() && *ap == false) none = true;
    if (ap != b.end() && ap->is_object()) out.push_back(&*ap);
    return out;
  };
  std::vector<const Json*> values;
  // A name b requires that a never writes, or writes only with values b's
  // schema of it excludes.
  for (const std::string& x : Keys(b, "required")) {
    if (!written(x, values)) return true;
    bool none = false;
    for (const Json* vb : applied(x, none)) {
      for (const Json* v : values) {
        if (Excludes(*v, *vb, depth + 1)) return true;
      }
    }
  }
  // A name a always writes that b does not allow, or whose value b's
  // schema of it excludes.
  for (const std::string& x : req_a) {
    bool none = false;
    const std::vector<const Json*> vbs = applied(x, none);
    if (none) return true;
    if (!pa.contains(x)) continue;
    for (const Json* vb : vbs) {
      if (Excludes(pa[x], *vb, depth + 1)) return true;
    }
  }
  return false;
}

}  // namespace kvshare::detail
