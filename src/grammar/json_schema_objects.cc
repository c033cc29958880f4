// The JSON Schema compiler's objects (json_schema_compiler.h): properties,
// required, additionalProperties, patternProperties, propertyNames,
// minProperties / maxProperties, dependentRequired (and draft 4-7's array
// form of dependencies). An object with declared properties is written with
// those only, in declaration order; one without is a map whose keys are
// any string, the names patternProperties or propertyNames allow.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "grammar/json_regex.h"
#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {
namespace {

using Json = SchemaCompiler::Json;

constexpr int kMaxCounted = 64;  // declared properties under minProperties / maxProperties

Json AllOf(const Json& a, const Json& b) { return a == b ? a : Json{{"allOf", Json::array({a, b})}}; }

}  // namespace

std::uint32_t SchemaCompiler::Object(const Json& s, const std::string& path) {
  const Json empty = Json::object();
  auto member = [&](const char* key) -> const Json& {
    auto it = s.find(key);
    if (it == s.end()) return empty;
    if (!it->is_object()) Fail(path, std::string("'") + key + "' must be an object");
    return *it;
  };
  const Json& props = member("properties");
  const Json& patterns = member("patternProperties");
  const Json* extra = s.contains("additionalProperties") ? &s.at("additionalProperties") : nullptr;
  if (extra != nullptr && !extra->is_boolean() && !extra->is_object()) {
    Fail(path, "'additionalProperties' must be a boolean or a schema");
  }
  const Json* names = s.contains("propertyNames") ? &s.at("propertyNames") : nullptr;
  const int min = Bound(s, "minProperties", path, 0), max = Bound(s, "maxProperties", path, -1);
  if (max >= 0 && min > max) Fail(path, "minProperties > maxProperties");

  std::vector<std::string> required;
  auto require = [&required](const std::string& k) {
    if (std::find(required.begin(), required.end(), k) == required.end()) required.push_back(k);
  };
  if (auto r = s.find("required"); r != s.end()) {
    if (!r->is_array()) Fail(path, "'required' must be an array of strings");
    for (const Json& k : *r) {
      if (!k.is_string()) Fail(path, "'required' must be an array of strings");
      require(k.get<std::string>());
    }
  }
  // dependentRequired: the names any name needs are made required, whether
  // or not that name is written (narrower than the spec, never wider).
  for (const char* key : {"dependentRequired", "dependencies"}) {
    for (const auto& [k, deps] : member(key).items()) {
      if (!deps.is_array()) Fail(path, std::string("'") + key + "' must map names to arrays of names");
      for (const Json& d : deps) {
        if (!d.is_string()) Fail(path, std::string("'") + key + "' must map names to arrays of names");
        require(d.get<std::string>());
      }
    }
  }
  // The schema of a name's value: its declared one, and that of every
  // pattern it matches; additionalProperties when neither applies.
  auto value_of = [&](const std::string& k, bool& allowed) {
    Json v = props.contains(k) ? props.at(k) : Json(true);
    bool matched = props.contains(k);
    for (const auto& [pat, ps] : patterns.items()) {
      if (Matches(Json{{"type", "string"}, {"pattern", pat}}, Json(k))) v = AllOf(v, ps), matched = true;
    }
    if (!matched && extra != nullptr) v = *extra;
    allowed = !(v.is_boolean() && !v.get<bool>());
    if (names != nullptr && allowed && !Matches(AllOf(*names, Json{{"type", "string"}}), Json(k))) allowed = false;
    return v;
  };
  std::vector<std::string> keys;
  std::vector<std::uint32_t> values;
  std::vector<bool> req;
  auto add = [&](const std::string& k, bool must) {
    if (j_.notation() == Notation::kGemma) {
      // Gemma keys are bare: the runtime's ParseGemma4Call ends a key at ':' and refuses brackets and commas.
      if (k.empty() || k.find_first_of("{}[],:<\" \t\n\r") != std::string::npos) {
        Fail(path, "property name \"" + k + "\" cannot be written as a bare key in Gemma 4's call notation");
      }
    }
    bool allowed = true;
    const Json v = value_of(k, allowed);
    if (!allowed) {
      if (must) Empty(path, "required property '" + k + "' is not allowed by the schema");
      return;
    }
    const std::uint32_t mark = b_.NewRule();
    b_.Alt(mark, {b_.Set({})});
    const std::size_t guard = unguarded_.size();
    try {
      values.push_back(Schema(v, path + "/properties/" + k));
    } catch (const EmptySchema&) {
      if (must) throw;
      unguarded_.resize(guard);  // an optional property no value matches: never written
      b_.SealEmpty(mark);
      return;
    }
    keys.push_back(k);
    req.push_back(must);
  };
  for (const auto& [k, v] : props.items()) {
    add(k, std::find(required.begin(), required.end(), k) != required.end());
  }
  for (const std::string& k : required) {
    if (!props.contains(k)) add(k, true);  // required but not declared
  }
  if (!keys.empty()) return Properties(keys, values, req, min, max, path);
  if (!props.empty()) {
    // Every declared name is one no value may take (false, or a schema
    // that matches nothing): a map could write one of them, so only {} is
    // written (a narrower output).
    if (min > 0) Empty(path, "minProperties > 0 with every declared property forbidden");
    const std::uint32_t r = b_.NewRule();
    b_.Alt(r, Seq{b_.Byte('{')} + j_.Ws() + Seq{b_.Byte('}')});
    return r;
  }

  // A map.
  if (min > 1) Unsupported(path, "minProperties", "a map cannot be kept from repeating a key");
  const bool closed = extra != nullptr && extra->is_boolean() && !extra->get<bool>();
  if (closed && patterns.empty()) {
    if (min > 0) Fail(path, "minProperties > 0 with no property allowed");
    const std::uint32_t r = b_.NewRule();
    b_.Alt(r, Seq{b_.Byte('{')} + j_.Ws() + Seq{b_.Byte('}')});
    return r;
  }
  if (j_.notation() == Notation::kGemma && (!patterns.empty() || names != nullptr)) {
    Unsupported(path, patterns.empty() ? "propertyNames" : "patternProperties",
                "constrained keys cannot be written in Gemma 4's call notation");
  }
  std::uint32_t key = kAnyKey;
  Json value = extra == nullptr ? Json(true) : *extra;
  if (!patterns.empty()) {
    // propertyNames next to them: its length bounds apply to each
    // pattern's keys exactly (RegexEmitter::String); other keywords would
    // intersect two expressions.
    int name_min = 0, name_max = -1;
    if (names != nullptr && !(names->is_boolean() && names->get<bool>())) {
      if (!names->is_object()) Unsupported(path, "propertyNames", "false next to 'patternProperties'");
      for (const auto& [k, v] : names->items()) {
        if (k != "minLength" && k != "maxLength" && !(k == "type" && v == "string") && Constrains(Json{{k, v}}, "")) {
          Unsupported(path, "propertyNames",
                      "next to 'patternProperties' in a map, only its minLength / maxLength can be applied");
        }
      }
      name_min = Bound(*names, "minLength", path + "/propertyNames", 0);
      name_max = Bound(*names, "maxLength", path + "/propertyNames", -1);
    }
    // Keys of any pattern; a key may match several, so its value satisfies
    // all their schemas (narrower than the spec).
    key = b_.NewRule();
    value = Json(true);
    for (const auto& [pat, ps] : patterns.items()) {
      try {
        RegexEmitter e(j_);
        b_.Alt(key, {GrammarBuilder::Ref(e.String(ParseRegex(pat), name_min, name_max))});
      } catch (const RegexError& err) {
        Unsupported(path, "patternProperties", "/" + pat + "/: " + err.what());
      }
      value = AllOf(value, ps);
    }
  } else if (names != nullptr) {
    key = Schema(AllOf(*names, Json{{"type", "string"}}), path + "/propertyNames");
  }
  return MapOf(key, Schema(value, path + "/additionalProperties"), min, max);
}

std::uint32_t SchemaCompiler::Properties(const std::vector<std::string>& keys, const std::vector<std::uint32_t>& values,
                                         const std::vector<bool>& required, int min, int max, const std::string& path) {
  std::vector<Seq> members;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::string key = j_.notation() == Notation::kGemma ? keys[i] : Json(keys[i]).dump();
    members.push_back(b_.Lit(key) + j_.Sep(':') + Seq{GrammarBuilder::Ref(values[i])});
  }
  const std::uint32_t inner = Members(members, required, min, max, "minProperties", "maxProperties", path);
  const std::uint32_t r = b_.NewRule();
  b_.Alt(r, Seq{b_.Byte('{')} + j_.Ws() + Seq{GrammarBuilder::Ref(inner)} + j_.Ws() + Seq{b_.Byte('}')});
  return r;
}

std::uint32_t SchemaCompiler::Members(const std::vector<Seq>& members, const std::vector<bool>& required, int min,
                                      int max, const char* min_key, const char* max_key, const std::string& path) {
  const int n = static_cast<int>(members.size());
  if (min > n) Fail(path, std::string(min_key) + " is above the members the value may hold");
  const bool counted = min > 0 || (max >= 0 && max < n);
  if (counted && n > kMaxCounted) {
    Unsupported(path, min > 0 ? min_key : max_key, "more than 64 members to count");
  }
  const int cap = counted ? n : 0;  // counts tracked: 0..cap
  // first[c] / rest[c]: members i.. after c written (none / some came
  // before); 0 where no document completes from there.
  std::vector<std::uint32_t> first(static_cast<std::size_t>(cap) + 1), rest(static_cast<std::size_t>(cap) + 1);
  for (int c = 0; c <= cap; ++c) {
    if (counted && (c < min || (max >= 0 && c > max))) continue;
    const std::uint32_t none = b_.NewRule();
    b_.Alt(none, {});
    first[static_cast<std::size_t>(c)] = rest[static_cast<std::size_t>(c)] = none + 1;  // +1: 0 means dead
  }
  for (int i = n - 1; i >= 0; --i) {
    const Seq& kv = members[static_cast<std::size_t>(i)];
    const bool req = required[static_cast<std::size_t>(i)];
    std::vector<std::uint32_t> nf(first.size()), nr(rest.size());
    for (int c = 0; c <= (counted ? std::min(i, cap) : 0); ++c) {
      const std::size_t at = static_cast<std::size_t>(c), next = counted ? at + 1 : at;
      const std::uint32_t take_r = rest[next], skip_r = rest[at], skip_f = first[at];
      if (take_r == 0 && (req || skip_r == 0)) continue;
      const std::uint32_t f = b_.NewRule(), r = b_.NewRule();
      if (take_r != 0) b_.Alt(r, j_.Sep(',') + kv + Seq{GrammarBuilder::Ref(take_r - 1)});
      if (!req && skip_r != 0) b_.Alt(r, {GrammarBuilder::Ref(skip_r - 1)});
      if (take_r != 0) b_.Alt(f, kv + Seq{GrammarBuilder::Ref(take_r - 1)});
      if (!req && skip_f != 0) b_.Alt(f, {GrammarBuilder::Ref(skip_f - 1)});
      const bool f_live = take_r != 0 || (!req && skip_f != 0), r_live = take_r != 0 || (!req && skip_r != 0);
      if (!f_live) b_.Alt(f, {b_.Set({})});  // never taken (an empty set), kept non-empty for the builder
      if (!r_live) b_.Alt(r, {b_.Set({})});
      nf[at] = f_live ? f + 1 : 0;
      nr[at] = r_live ? r + 1 : 0;
    }
    first.swap(nf);
    rest.swap(nr);
  }
  if (first[0] == 0) Fail(path, std::string(min_key) + " / " + max_key + " leave no value the members can form");
  return first[0] - 1;
}

std::uint32_t SchemaCompiler::MapOf(std::uint32_t key, std::uint32_t value, int min, int max) {
  if (key == kAnyKey && min == 0 && max < 0) return j_.Map(value);
  if (key == kAnyKey) key = j_.String(0, -1);
  const Seq member = Seq{GrammarBuilder::Ref(key)} + j_.Sep(':') + Seq{GrammarBuilder::Ref(value)};
  const std::uint32_t r = b_.NewRule();
  if (min == 0) b_.Alt(r, Seq{b_.Byte('{')} + j_.Ws() + Seq{b_.Byte('}')});
  if (max != 0) {
    Seq s = Seq{b_.Byte('{')} + j_.Ws() + member;
    if (max < 0 || max > 1) s.push_back(GrammarBuilder::Ref(j_.UpTo(j_.Sep(',') + member, max < 0 ? -1 : max - 1)));
    b_.Alt(r, s + j_.Ws() + Seq{b_.Byte('}')});
  }
  return r;
}

}  // namespace kvshare::detail
