// The JSON Schema compiler's alternatives: anyOf / oneOf / allOf and enum /
// const (json_schema_compiler.h).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

using Json = SchemaCompiler::Json;

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
std::string ValueText(const Json& v, Notation n) {
  if (n == Notation::kJson) return v.dump();
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

}  // namespace

std::uint32_t SchemaCompiler::Combinator(const char* key, const Json& branches, const std::string& path) {
  if (!branches.is_array() || branches.empty()) {
    Fail(path, std::string("'") + key + "' must be a non-empty array of schemas");
  }
  const std::string p = path + "/" + key;
  Json narrowed = branches;
  if (std::string(key) == "oneOf") {
    // Exactly one branch must match: compiled as anyOf when no branch's
    // output can match another branch. Branches told apart by `required`
    // alone ("A or B": {"required": ["A"]}, {"required": ["B"]}) are made
    // so: each stops writing a property that the other requires and it
    // does not (a narrower output), when it keeps others declared.
    auto drop_one = [&](Json& a, const Json& b) {
      auto props = a.find("properties");
      if (!a.is_object() || props == a.end() || !props->is_object() || props->size() < 2) return;
      const auto req_b = b.find("required");
      if (!b.is_object() || req_b == b.end() || !req_b->is_array()) return;
      const Json req_a = a.value("required", Json::array());
      for (const Json& x : *req_b) {
        if (!x.is_string() || std::find(req_a.begin(), req_a.end(), x) != req_a.end()) continue;
        if (props->contains(x.get<std::string>())) DropProperty(a, x.get<std::string>());
        return;  // one is enough: b's outputs all hold it, a's none
      }
    };
    // Closed objects of optional properties ({"a": ...} or {"b": ...}, no
    // other names) overlap on {}: each writes one property the other
    // forbids (a narrower output).
    auto require_own = [&](Json& a, const Json& b) {
      const Json* t = &b;
      for (int hops = 0; t->is_object() && t->contains("$ref") && !Constrains(*t, "$ref") && hops < 64; ++hops) {
        if (!(*t)["$ref"].is_string()) return;
        t = &Resolve((*t)["$ref"].get<std::string>(), path);
      }
      if (!t->is_object() || t->value("additionalProperties", Json(true)) != false || t->contains("patternProperties")) {
        return;
      }
      for (int hops = 0; a.is_object() && a.contains("$ref") && !Constrains(a, "$ref") && hops < 64; ++hops) {
        if (!a["$ref"].is_string()) return;
        a = Resolve(a["$ref"].get<std::string>(), path);
      }
      auto props = a.find("properties");
      if (!a.is_object() || props == a.end() || !props->is_object() || a.contains("required")) return;
      const Json none = Json::object();
      const Json& tp = t->contains("properties") && (*t)["properties"].is_object() ? (*t)["properties"] : none;
      for (const auto& [x, v] : props->items()) {
        if (v != false && (!tp.contains(x) || tp[x] == false)) {
          a["required"] = Json::array({x});
          return;
        }
      }
    };
    // Each branch's output (narrowed) is checked against the other
    // branches as the schema states them (validity is the spec's).
    const Json& orig = branches;
    for (std::size_t i = 0; i < narrowed.size(); ++i) {
      for (std::size_t k = i + 1; k < narrowed.size(); ++k) {
        if (Excludes(narrowed[i], orig[k]) && Excludes(narrowed[k], orig[i])) continue;
        Json a = narrowed[i], b = narrowed[k];
        drop_one(a, orig[k]);
        drop_one(b, orig[i]);
        if (Excludes(a, orig[k]) && Excludes(b, orig[i])) {
          narrowed[i] = std::move(a), narrowed[k] = std::move(b);
          continue;
        }
        a = narrowed[i], b = narrowed[k];
        require_own(a, orig[k]);
        require_own(b, orig[i]);
        if (Excludes(a, orig[k]) && Excludes(b, orig[i])) narrowed[i] = std::move(a), narrowed[k] = std::move(b);
      }
    }
    for (std::size_t i = 0; i < narrowed.size(); ++i) {
      for (std::size_t k = i + 1; k < narrowed.size(); ++k) {
        if (!Excludes(narrowed[i], orig[k]) || !Excludes(narrowed[k], orig[i])) {
          throw Error("unsupported JSON Schema keyword 'oneOf' at " + path + "/oneOf: branches " + std::to_string(i) +
                      " and " + std::to_string(k) +
                      " may overlap (no distinct types, required properties or const / enum values tell them "
                      "apart); use anyOf");
        }
      }
    }
  }
  const std::uint32_t r = b_.NewRule();
  bool any = false;
  for (std::size_t i = 0; i < narrowed.size(); ++i) {
    if (narrowed[i] == false) continue;  // matches nothing
    const std::uint32_t mark = b_.NewRule();
    b_.Alt(mark, {b_.Set({})});
    const std::size_t guard = unguarded_.size();
    try {
      b_.Alt(r, {GrammarBuilder::Ref(Schema(narrowed[i], p + "/" + std::to_string(i)))});
      any = true;
    } catch (const EmptySchema&) {
      // A branch that matches nothing adds nothing (and, in oneOf, counts
      // for no value).
      unguarded_.resize(guard);
      b_.SealEmpty(mark);
    }
  }
  if (!any) Empty(p, "no branch matches any value");
  return r;
}

void SchemaCompiler::DropProperty(Json& a, const std::string& x) {
  Json out = a;
  std::set<std::string> dropped = {x};
  out["properties"].erase(x);
  const Json req = a.value("required", Json::array());
  // dependentRequired makes the names it lists required (Object): the
  // names that need a dropped one are dropped too, with their entries.
  for (bool changed = true; changed;) {
    changed = false;
    for (const char* key : {"dependentRequired", "dependencies"}) {
      auto d = out.find(key);
      if (d == out.end() || !d->is_object()) continue;
      for (auto it = d->begin(); it != d->end();) {
        bool needs = dropped.count(it.key()) > 0;
        for (const Json& n : it->is_array() ? *it : Json::array()) needs = needs || (n.is_string() && dropped.count(n));
        if (!needs) {
          ++it;
          continue;
        }
        if (std::find(req.begin(), req.end(), Json(it.key())) != req.end()) return;  // a must write it: a unchanged
        if (dropped.insert(it.key()).second) out["properties"].erase(it.key()), changed = true;
        it = d->erase(it);
      }
    }
  }
  if (out["properties"].empty()) return;
  a = std::move(out);
}

std::set<std::string> SchemaCompiler::Types(const Json& s, int depth) {
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

std::vector<SchemaCompiler::Json> SchemaCompiler::AllowedValues(const Json& s, const std::set<std::string>& types,
                                                                const std::string& path) {
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
  // The other keywords (minLength, pattern, ...) keep the values they allow.
  Json rest = s;
  rest.erase("enum");
  rest.erase("const");
  const bool check = Constrains(rest, "type");
  std::vector<Json> out;
  for (const Json& v : values) {
    const std::string t = JsonTypeOf(v);
    const bool ok = types.empty() || types.count(t) || (t == "integer" && types.count("number")) ||
                    (t == "number" && types.count("integer") &&
                     v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>())));
    if (ok && (!check || Matches(rest, v))) out.push_back(v);
  }
  return out;
}

std::uint32_t SchemaCompiler::Values(const Json& s, const std::set<std::string>& types, const std::string& path) {
  const std::vector<Json> values = AllowedValues(s, types, path);
  if (values.empty()) Empty(path, "no value of 'enum' / 'const' matches 'type'");
  const std::uint32_t r = b_.NewRule();
  for (const Json& v : values) b_.Alt(r, {GrammarBuilder::Ref(j_.Literal(ValueText(v, j_.notation())))});
  return r;
}

}  // namespace kvshare::detail
