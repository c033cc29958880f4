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

// const / enum scalars of s (empty: not a finite set of scalars).
std::vector<Json> FiniteScalars(const Json& s) {
  std::vector<Json> v;
  if (auto c = s.find("const"); c != s.end()) v.push_back(*c);
  if (auto e = s.find("enum"); v.empty() && e != s.end() && e->is_array()) v.assign(e->begin(), e->end());
  for (const Json& x : v) {
    if (x.is_object() || x.is_array()) return {};
  }
  return v;
}

}  // namespace

bool SchemaCompiler::Excludes(const Json& a_in, const Json& b_in, int depth) {
  if (depth > 3) return false;
  int hops = 0;
  // s through standalone $refs; null when s is not a plain schema object.
  auto plain = [&](const Json* s) -> const Json* {
    while (s != nullptr && s->is_object() && s->contains("$ref") && ++hops < 64) {
      if (!(*s)["$ref"].is_string() || Constrains(*s, "$ref")) return nullptr;
      s = &Resolve((*s)["$ref"].get<std::string>(), "#");
    }
    if (s == nullptr || !s->is_object() || hops >= 64) return nullptr;
    for (const char* k : {"allOf", "anyOf", "oneOf", "$ref"}) {
      if (s->contains(k)) return nullptr;
    }
    return s;
  };
  const Json* a = plain(&a_in);
  const Json* b = plain(&b_in);
  if (a == nullptr || b == nullptr) return false;
  // Values: a's all outside b's list.
  const std::vector<Json> va = FiniteScalars(*a), vb = FiniteScalars(*b);
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
    // Objects a writes: keys among its declared and required ones when it
    // declares any (or allows no others).
    const std::set<std::string> declared = Keys(*a, "properties"), req_a = Keys(*a, "required");
    const bool closed = !declared.empty() || a->value("additionalProperties", Json(true)) == false;
    bool apart = false;
    for (const std::string& x : Keys(*b, "required")) {
      apart = apart || (closed && !declared.count(x) && !req_a.count(x));
    }
    const auto pa = a->find("properties"), pb = b->find("properties");
    const bool b_closed = b->value("additionalProperties", Json(true)) == false && !b->contains("patternProperties");
    for (const std::string& p : req_a) {
      if (apart) break;
      const bool in_b = pb != b->end() && pb->is_object() && pb->contains(p);
      if (!in_b) {
        apart = b_closed;
      } else if (pa != a->end() && pa->is_object() && pa->contains(p)) {
        apart = Excludes((*pa)[p], (*pb)[p], depth + 1);
      }
    }
    if (!apart) return false;
  }
  return true;
}

}  // namespace kvshare::detail
