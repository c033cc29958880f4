// The JSON Schema compiler's intersections (json_schema_compiler.h): allOf
// merged into one schema, the siblings of $ref merged with its target
// (2019-09 on; ignored in drafts 4 to 7 as they say) and the siblings of
// anyOf / oneOf moved into each branch, so that the rest of the compiler
// sees one schema at a time. A pair of keywords whose intersection has no
// exact form here (two different patterns, two oneOfs) is refused with its
// pointer, never loosened. Also the value check (Matches) that enum and
// patternProperties use.
#include <algorithm>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar_automaton.h"
#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

using Json = SchemaCompiler::Json;

constexpr std::size_t kMaxProduct = 64;    // branches of anyOf x anyOf (oneOf x oneOf), kept
constexpr std::size_t kMaxPairs = 4096;    // pairs looked at

// Draft 4's boolean exclusiveMinimum / exclusiveMaximum as draft 6's numbers.
Json Draft6Bounds(Json s) {
  for (auto [flag, bound] : {std::pair<const char*, const char*>{"exclusiveMinimum", "minimum"},
                             std::pair<const char*, const char*>{"exclusiveMaximum", "maximum"}}) {
    auto f = s.find(flag);
    if (f == s.end() || !f->is_boolean()) continue;
    const bool on = f->get<bool>();
    s.erase(flag);
    if (on && s.contains(bound)) {
      s[flag] = s[bound];
      s.erase(bound);
    }
  }
  return s;
}

// The property schemas and required names of s, through allOf (no $ref).
void Gather(const Json& s, std::map<std::string, std::vector<const Json*>>& props, std::set<std::string>& req,
            std::vector<const Json*>& types, int depth = 0) {
  if (!s.is_object() || depth > 16) return;
  if (auto t = s.find("type"); t != s.end()) types.push_back(&*t);
  if (auto p = s.find("properties"); p != s.end() && p->is_object()) {
    for (const auto& [k, v] : p->items()) props[k].push_back(&v);
  }
  for (const Json& n : s.value("required", Json::array())) {
    if (n.is_string()) req.insert(n.get<std::string>());
  }
  if (auto all = s.find("allOf"); all != s.end() && all->is_array()) {
    for (const Json& x : *all) Gather(x, props, req, types, depth + 1);
  }
}

// Whether p ∧ q (with the names `req` required) matches nothing because a
// required name's schemas allow no common value (disjoint const / enum
// sets, or false): the discriminators of the anyOfs conditionals become.
bool Contradicts(const Json& p, const Json& q, std::set<std::string> req) {
  std::map<std::string, std::vector<const Json*>> props;
  std::vector<const Json*> types;
  Gather(p, props, req, types);
  Gather(q, props, req, types);
  // Types no value has all of (an integer is a number).
  std::set<std::string> common = {"object", "array", "string", "number", "integer", "boolean", "null"};
  for (const Json* t : types) {
    std::set<std::string> names;
    for (const Json& n : t->is_array() ? *t : Json::array({*t})) {
      if (n.is_string()) names.insert(n.get<std::string>());
    }
    if (names.count("number")) names.insert("integer");
    std::set<std::string> both;
    for (const std::string& n : common) {
      if (names.count(n)) both.insert(n);
    }
    common = std::move(both);
  }
  if (common.empty()) return true;
  for (const auto& [k, schemas] : props) {
    if (!req.count(k)) continue;
    std::optional<std::vector<Json>> common;
    for (const Json* s : schemas) {
      if (*s == false) return true;
      std::vector<Json> values = SchemaCompiler::FiniteScalars(*s);
      if (values.empty()) continue;
      if (common) {
        std::vector<Json> both;
        for (const Json& x : *common) {
          if (std::find(values.begin(), values.end(), x) != values.end()) both.push_back(x);
        }
        values = std::move(both);
      }
      if (values.empty()) return true;
      common = std::move(values);
    }
  }
  return false;
}

Json AllOf(const Json& a, const Json& b) {
  if (a == b) return a;
  return Json{{"allOf", Json::array({a, b})}};
}

}  // namespace

std::optional<Json> SchemaCompiler::Normalized(const Json& s, const std::string& path) {
  if (auto all = s.find("allOf"); all != s.end()) {
    if (!all->is_array() || all->empty()) Fail(path, "'allOf' must be a non-empty array of schemas");
    Json out = s;
    out.erase("allOf");
    for (std::size_t i = 0; i < all->size(); ++i) {
      const std::string at = path + "/allOf/" + std::to_string(i);
      const Json& item = (*all)[i];
      // Each conditional on its own (two would meet in one schema's `if`).
      out = Merge(out, item.is_object() && item.contains("if") ? Conditional(item, at) : item, at);
    }
    return out;
  }
  if (auto ref = s.find("$ref"); ref != s.end() && Constrains(s, "$ref")) {
    if (!ref->is_string()) Fail(path, "'$ref' must be a string");
    if (LegacyRef()) return Json{{"$ref", *ref}};
    Json rest = s;
    rest.erase("$ref");
    return Merge(rest, Json{{"$ref", *ref}}, path);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto c = s.find(key);
    if (c == s.end() || !Constrains(s, key)) continue;
    if (!c->is_array() || c->empty()) Fail(path, std::string("'") + key + "' must be a non-empty array of schemas");
    Json rest = s;
    rest.erase(key);
    // Branches of values only: one enum of them (for oneOf, of the values
    // only one branch lists), merged with the siblings once.
    Json values = Json::array();
    std::map<std::string, int> seen;  // by compact text: how many branches list it
    bool only_values = true;
    for (const Json& b : *c) {
      if (!b.is_object() || !(b.contains("enum") || b.contains("const")) || Constrains(b, b.contains("enum") ? "enum" : "const") ||
          (b.contains("enum") && !b["enum"].is_array())) {
        only_values = false;
        break;
      }
      std::set<std::string> here;
      for (const Json& v : b.contains("enum") ? b["enum"] : Json::array({b["const"]})) {
        if (v.is_number_float() || v.is_object() || v.is_array()) only_values = false;  // 1.0 == 1: not by text
        const std::string text = v.dump();
        if (!here.insert(text).second) continue;
        if (seen[text]++ == 0) values.push_back(v);
      }
    }
    if (only_values && !values.empty()) {
      Json listed = Json::array();
      for (const Json& v : values) {
        if (std::string(key) == "anyOf" || seen[v.dump()] == 1) listed.push_back(v);
      }
      if (listed.empty()) Empty(path + "/" + key, "no value is listed by exactly one branch");
      return Merge(rest, Json{{"enum", listed}}, path + "/" + key);
    }
    Json branches = Json::array();
    for (std::size_t i = 0; i < c->size(); ++i) {
      const std::string at = path + "/" + key + "/" + std::to_string(i);
      try {
        Json b = Merge(rest, (*c)[i], at);
        // An enum none of whose values the siblings allow (Azure's 480 task
        // kinds x 259 names): found here, without compiling it.
        const bool values = b.is_object() && (b.contains("enum") || b.contains("const")) && !b.contains("anyOf") &&
                            !b.contains("oneOf") && !b.contains("allOf") && !b.contains("$ref");
        if (values && AllowedValues(b, DeclaredTypes(b, at), at).empty()) b = false;
        branches.push_back(std::move(b));
      } catch (const EmptySchema&) {
        branches.push_back(false);  // matches nothing: Combinator leaves it out
      }
    }
    return Json{{key, branches}};
  }
  return std::nullopt;
}

Json SchemaCompiler::Unevaluated(const Json& s, const std::string& path) {
  auto refuse = [&](const std::string& why) { Unsupported(path, "unevaluatedProperties", why); };
  Json rest = s;
  const Json u = rest["unevaluatedProperties"];
  rest.erase("unevaluatedProperties");
  // allOf and $ref evaluate their properties unconditionally: merged, the
  // names they declare are those of the one schema left.
  for (int hops = 0; rest.contains("allOf") || rest.contains("$ref"); ++hops) {
    if (hops > 64) refuse("allOf / $ref nested deeper than 64 levels");
    if (std::optional<Json> n = Normalized(rest, path)) {
      rest = std::move(*n);
    } else {
      rest = Merge(Json::object(), rest, path);  // a standalone $ref: its target
    }
    if (rest.contains("unevaluatedProperties")) refuse("inside a schema that allOf or $ref merges here");
  }
  if (rest.contains("if")) refuse("next to if / then / else, whose branches evaluate properties");
  for (const char* key : {"anyOf", "oneOf"}) {
    for (const Json& branch : rest.value(key, Json::array())) {
      for (const char* k : {"properties", "patternProperties", "additionalProperties", "allOf", "anyOf", "oneOf",
                            "$ref", "if", "dependentSchemas", "unevaluatedProperties"}) {
        if (branch.is_object() && branch.contains(k)) {
          refuse(std::string("next to '") + key + "' whose branches evaluate properties ('" + k + "')");
        }
      }
    }
  }
  // additionalProperties evaluates every name the others leave: nothing is
  // left unevaluated.
  if (!rest.contains("additionalProperties")) rest["additionalProperties"] = u;
  return rest;
}

Json SchemaCompiler::Merge(const Json& a_in, const Json& b_in, const std::string& path, int hops) {
  if (hops > 32) Fail(path, "'$ref's merged with sibling keywords (or inside allOf) refer back to themselves");
  if (a_in.is_boolean()) {
    if (!a_in.get<bool>()) Empty(path, "the schema false matches nothing");
    return b_in;
  }
  if (b_in.is_boolean()) {
    if (!b_in.get<bool>()) Empty(path, "the schema false matches nothing");
    return a_in;
  }
  if (!a_in.is_object() || !b_in.is_object()) Fail(path, "expected a schema (an object or a boolean)");
  // A $ref in b is its target, merged with b's other keywords.
  if (auto r = b_in.find("$ref"); r != b_in.end() && r->is_string()) {
    Json rest = b_in;
    rest.erase("$ref");
    const Json& target = Resolve(r->get<std::string>(), path);
    return Merge(LegacyRef() ? a_in : Merge(a_in, rest, path, hops + 1), target, path, hops + 1);
  }
  if (a_in.contains("$ref")) return Merge(b_in, a_in, path, hops + 1);
  for (const char* k : {"if", "then", "else"}) {
    if (a_in.contains(k) && b_in.contains(k) && a_in[k] != b_in[k]) {
      Unsupported(path, "if", "two if / then / else would meet in one schema (next to $ref / anyOf / oneOf)");
    }
  }
  // Merged into a schema with other keywords it would count their
  // properties as evaluated too (SchemaAt takes it where it stands).
  for (const Json* x : {&a_in, &b_in}) {
    if (x->contains("unevaluatedProperties") && !(a_in.empty() || b_in.empty())) {
      Unsupported(path, "unevaluatedProperties", "inside allOf, or next to $ref / anyOf / oneOf");
    }
  }
  Json a = Draft6Bounds(a_in);
  const Json b = Draft6Bounds(b_in);
  auto refuse = [&](const std::string& key) {
    Unsupported(path, key, "two different values inside allOf (or next to $ref / anyOf / oneOf) cannot be merged");
  };
  // A tuple on one side only: the other side's items would apply to the
  // tuple's places too, which the merged schema could not say.
  const auto tuple = [](const Json& x) {
    return x.contains("prefixItems") || (x.contains("items") && x["items"].is_array());
  };
  if (tuple(a) != tuple(b) && (tuple(a) ? b : a).contains("items")) refuse("items");
  // Properties first: each side's additionalProperties / patternProperties
  // apply to the other side's names.
  auto apply_rest = [&](const Json& props_other, const Json& side, Json& merged) {
    for (const auto& [k, v] : props_other.items()) {
      if (side.contains("properties") && side["properties"].contains(k)) continue;
      Json extra = v;
      bool matched = false;
      if (auto pp = side.find("patternProperties"); pp != side.end() && pp->is_object()) {
        for (const auto& [pat, ps] : pp->items()) {
          if (Matches(Json{{"type", "string"}, {"pattern", pat}}, Json(k))) extra = AllOf(extra, ps), matched = true;
        }
      }
      if (!matched) {
        if (auto ap = side.find("additionalProperties"); ap != side.end()) extra = AllOf(extra, *ap);
      }
      merged[k] = extra;
    }
  };
  if (a.contains("properties") || b.contains("properties")) {
    const Json empty = Json::object();
    const Json& pa = a.contains("properties") ? a["properties"] : empty;
    const Json& pb = b.contains("properties") ? b["properties"] : empty;
    if (!pa.is_object() || !pb.is_object()) Fail(path, "'properties' must be an object");
    // In a's order, then b's names (the order the grammar writes them in).
    Json merged = Json::object(), from_a = Json::object(), from_b = Json::object();
    apply_rest(pa, b, from_a);
    apply_rest(pb, a, from_b);
    for (const auto& [k, v] : pa.items()) merged[k] = pb.contains(k) ? AllOf(v, pb[k]) : from_a[k];
    for (const auto& [k, v] : from_b.items()) merged[k] = v;
    a["properties"] = merged;
  }
  for (const auto& [k, v] : b.items()) {
    if (k == "properties" || k == "$defs" || k == "definitions") continue;
    auto it = a.find(k);
    if (it == a.end()) {
      a[k] = v;
      continue;
    }
    Json& x = *it;
    if (x == v) continue;
    if (k == "type") {
      auto names = [](const Json& t) {
        std::vector<std::string> out;
        if (t.is_string()) out.push_back(t.get<std::string>());
        if (t.is_array()) {
          for (const Json& n : t) {
            if (n.is_string()) out.push_back(n.get<std::string>());
          }
        }
        return out;
      };
      const auto ta = names(x), tb = names(v);
      Json both = Json::array();
      for (const std::string& t : ta) {
        const bool in_b = std::find(tb.begin(), tb.end(), t) != tb.end();
        const bool num_b = t == "integer" && std::find(tb.begin(), tb.end(), "number") != tb.end();
        const bool int_b = t == "number" && std::find(tb.begin(), tb.end(), "integer") != tb.end();
        if (in_b || num_b) both.push_back(t);
        if (int_b) both.push_back("integer");
      }
      if (both.empty()) Empty(path, "the types of allOf's schemas (" + x.dump() + ", " + v.dump() + ") share no value");
      x = both.size() == 1 ? both[0] : both;
    } else if (k == "required") {
      for (const Json& n : v) {
        if (std::find(x.begin(), x.end(), n) == x.end()) x.push_back(n);
      }
    } else if (k == "minLength" || k == "minItems" || k == "minProperties" || k == "minimum" ||
               k == "exclusiveMinimum") {
      if (v.is_number() && x.is_number() && v.get<double>() > x.get<double>()) x = v;
    } else if (k == "maxLength" || k == "maxItems" || k == "maxProperties" || k == "maximum" ||
               k == "exclusiveMaximum") {
      if (v.is_number() && x.is_number() && v.get<double>() < x.get<double>()) x = v;
    } else if (k == "enum") {
      if (!x.is_array() || !v.is_array()) Fail(path, "'enum' must be an array");
      Json both = Json::array();
      for (const Json& e : x) {
        if (std::find(v.begin(), v.end(), e) != v.end()) both.push_back(e);
      }
      if (both.empty()) Empty(path, "the enums of allOf's schemas share no value");
      x = both;
    } else if (k == "const") {
      Empty(path, "allOf's schemas have different 'const' values");
    } else if (k == "items" && x.is_object() == v.is_object() && !x.is_array() && !v.is_array()) {
      x = AllOf(x, v);
    } else if (k == "additionalProperties" || k == "propertyNames" || k == "additionalItems") {
      x = AllOf(x, v);
    } else if (k == "not") {
      x = Json{{"anyOf", Json::array({x, v})}};  // neither
    } else if (k == "pattern") {
      // Strings that match both: the patterns as a list (not a schema's
      // form: only merges write it), whose languages StringSchema intersects.
      Json both = x.is_array() ? x : Json::array({x});
      for (const Json& p : v.is_array() ? v : Json::array({v})) {
        if (std::find(both.begin(), both.end(), p) == both.end()) both.push_back(p);
      }
      x = both;
    } else if (k == "uniqueItems") {
      x = x.is_boolean() && x.get<bool>() ? x : v;
    } else if (k == "dependentRequired" || k == "patternProperties") {
      if (!x.is_object() || !v.is_object()) refuse(k);
      for (const auto& [name, d] : v.items()) {
        if (!x.contains(name)) {
          x[name] = d;
        } else if (k == "patternProperties") {
          x[name] = AllOf(x[name], d);
        } else {
          for (const Json& n : d) x[name].push_back(n);
        }
      }
    } else if ((k == "anyOf" || k == "oneOf") && x.is_array() && v.is_array() && x.size() * v.size() <= kMaxPairs) {
      // anyOf: the pairs, one of which matches. oneOf: also the pairs,
      // exactly one of which matches when exactly one branch of each does
      // (the count of matching pairs is the product of the counts).
      Json product = Json::array();
      std::set<std::string> req;
      for (const Json* side : {static_cast<const Json*>(&a), &b}) {
        for (const Json& n : side->value("required", Json::array())) {
          if (n.is_string()) req.insert(n.get<std::string>());
        }
      }
      for (const Json& p : x) {
        for (const Json& q : v) {
          if (!Contradicts(p, q, req)) product.push_back(AllOf(p, q));
        }
      }
      if (product.empty()) Empty(path, "no two branches of the " + k + "s merged here match one value");
      if (product.size() > kMaxProduct) refuse(k);
      x = product;
    } else if (k == "allOf" && x.is_array() && v.is_array()) {
      for (const Json& e : v) x.push_back(e);
    } else if (Constrains(Json{{k, v}}, "")) {
      refuse(k);
    }
  }
  return a;
}

bool SchemaCompiler::Matches(const Json& schema, const Json& value) {
  // One grammar per schema asked about (an enum of hundreds of values, each
  // checked against the same pattern).
  std::shared_ptr<Matcher>& m = matchers_[schema.dump()];
  if (!m) {
    JsonGrammar j(JsonGrammarOptions{.max_whitespace = 0});  // value.dump() is compact JSON
    SchemaCompiler c(root_, j);
    c.depth_ = depth_;  // one limit for the whole compile
    m = std::make_shared<Matcher>();
    try {
      m->grammar = j.Finish(c.Schema(schema, "#"));
    } catch (...) {
      matchers_.erase(schema.dump());
      throw;
    }
    m->automaton = std::make_unique<GrammarAutomaton>(m->grammar->ir);
  }
  GrammarAutomaton& a = *m->automaton;
  std::uint32_t state = a.initial();
  for (char ch : value.dump()) {
    state = a.Next(state, static_cast<unsigned char>(ch));
    if (state == GrammarAutomaton::kDead) return false;
  }
  return a.Accepting(state);
}

}  // namespace kvshare::detail
