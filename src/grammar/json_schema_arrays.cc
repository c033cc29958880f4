// The JSON Schema compiler's arrays (json_schema_compiler.h): items (a
// schema, or draft 4-2019's array of schemas with additionalItems),
// prefixItems with items for the rest (2020-12), minItems / maxItems,
// uniqueItems.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "grammar/json_schema_compiler.h"

namespace kvshare::detail {

std::uint32_t SchemaCompiler::ArraySchema(const Json& s, const std::string& path) {
  int min = Bound(s, "minItems", path, 0), max = Bound(s, "maxItems", path, -1);
  if (max >= 0 && min > max) Fail(path, "minItems " + std::to_string(min) + " > maxItems " + std::to_string(max));
  if (auto u = s.find("uniqueItems"); u != s.end() && u->is_boolean() && u->get<bool>()) {
    if (std::optional<std::uint32_t> r = DistinctItems(s, min, max, path)) return *r;
  }
  // The tuple part (one schema per place) and the schema of the rest.
  const Json* tuple = nullptr;
  const Json* rest = nullptr;
  std::string tuple_key, rest_key;
  auto items = s.find("items");
  if (auto p = s.find("prefixItems"); p != s.end()) {
    tuple = &*p, tuple_key = "prefixItems";
    if (items != s.end()) rest = &*items, rest_key = "items";
  } else if (items != s.end() && items->is_array()) {
    tuple = &*items, tuple_key = "items";
    if (auto a = s.find("additionalItems"); a != s.end()) rest = &*a, rest_key = "additionalItems";
  } else if (items != s.end()) {
    rest = &*items, rest_key = "items";
  }
  if (tuple != nullptr && !tuple->is_array()) Fail(path, "'" + tuple_key + "' must be an array of schemas");
  if (rest != nullptr && !rest->is_boolean() && !rest->is_object()) {
    Fail(path, "'" + rest_key + "' must be a schema");
  }
  const int k = tuple == nullptr ? 0 : static_cast<int>(tuple->size());
  if (rest != nullptr && rest->is_boolean() && !rest->get<bool>()) max = max < 0 ? k : std::min(max, k);
  if (max >= 0 && min > max) Fail(path, "'" + rest_key + "': false with minItems above the tuple's length");
  if (k == 0) {
    if (max == 0) return j_.Array(0, 0, 0);
    return j_.Array(rest == nullptr ? j_.AnyValue() : Schema(*rest, path + "/" + rest_key), min, max);
  }
  // place[i]: the rule of item i (< k: the tuple's; k: the rest's).
  std::vector<std::uint32_t> place;
  const int used = max < 0 ? k : std::min(k, max);
  for (int i = 0; i < used; ++i) {
    const Json& t = (*tuple)[static_cast<std::size_t>(i)];
    if (t.is_boolean() && !t.get<bool>()) {  // no item at place i: at most i items
      max = max < 0 ? i : std::min(max, i);
      break;
    }
    place.push_back(Schema(t, path + "/" + tuple_key + "/" + std::to_string(i)));
  }
  if (max >= 0 && min > max) Fail(path, "minItems is above the items the tuple allows");
  const bool more = max < 0 || max > static_cast<int>(place.size());
  const std::uint32_t rest_rule = !more ? 0 : (rest == nullptr ? j_.AnyValue() : Schema(*rest, path + "/" + rest_key));
  // after[i]: the items after the first i (i >= 1) and the closing bracket.
  const Seq close = j_.Ws() + Seq{b_.Byte(']')};
  const int np = static_cast<int>(place.size());
  std::uint32_t tail = 0;  // after np items
  {
    tail = b_.NewRule();
    const int extra_min = std::max(0, min - np);
    Seq s2;
    const Seq next = j_.Sep(',') + Seq{GrammarBuilder::Ref(rest_rule)};
    if (more) {
      for (int i = 0; i < extra_min; ++i) s2 = s2 + next;
      const int room = max < 0 ? -1 : max - np - extra_min;
      if (room != 0) s2.push_back(GrammarBuilder::Ref(j_.UpTo(next, room)));
    }
    b_.Alt(tail, s2 + close);
  }
  std::uint32_t after = tail;
  for (int i = np - 1; i >= 1; --i) {
    const std::uint32_t r = b_.NewRule();
    b_.Alt(r, j_.Sep(',') + Seq{GrammarBuilder::Ref(place[static_cast<std::size_t>(i)]), GrammarBuilder::Ref(after)});
    if (i >= min) b_.Alt(r, close);
    after = r;
  }
  const std::uint32_t r = b_.NewRule();
  const Seq open = Seq{b_.Byte('[')} + j_.Ws();
  if (min == 0) b_.Alt(r, open + Seq{b_.Byte(']')});
  if (np > 0 && max != 0) {
    b_.Alt(r, open + Seq{GrammarBuilder::Ref(place[0]), GrammarBuilder::Ref(after)});
  }
  if (np == 0 && max != 0) Fail(path, "internal: an empty tuple");
  return r;
}

std::optional<std::uint32_t> SchemaCompiler::DistinctItems(const Json& s, int min, int& max, const std::string& path) {
  constexpr std::size_t kMaxDistinct = 64;  // values whose subsets are written out (Members counts to 64)
  // The items' schema, through $refs that stand alone.
  const Json* t = nullptr;
  if (auto it = s.find("items"); it != s.end() && it->is_object() && !s.contains("prefixItems")) t = &*it;
  for (int hop = 0; t != nullptr && hop < 32 && t->size() == 1 && t->contains("$ref") && (*t)["$ref"].is_string();
       ++hop) {
    t = &Resolve((*t)["$ref"].get<std::string>(), path + "/items");
  }
  std::vector<Json> values;
  if (t != nullptr && (t->contains("enum") || t->contains("const"))) {
    bool plain = true;  // no keyword that Values does not see
    for (const char* k : {"$ref", "anyOf", "oneOf", "allOf"}) plain = plain && !t->contains(k);
    if (plain) values = AllowedValues(*t, DeclaredTypes(*t, path + "/items"), path + "/items");
  } else if (t != nullptr && t->value("type", Json()) == "boolean" && !Constrains(*t, "type")) {
    values = {Json(false), Json(true)};
  }
  // Scalars only: equal objects may differ in member order, and ==
  // compares them in order.
  bool scalars = !values.empty() && values.size() <= kMaxDistinct;
  std::vector<Json> distinct;
  for (const Json& v : values) {
    scalars = scalars && !v.is_object() && !v.is_array();
    if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
  }
  if (scalars) {
    // Each value at most once, in the schema's order: distinct by construction.
    std::vector<Seq> members;
    for (const Json& v : distinct) members.push_back(Seq{GrammarBuilder::Ref(Values(Json{{"const", v}}, {}, path))});
    const std::uint32_t inner =
        Members(members, std::vector<bool>(members.size(), false), min, max, "minItems", "maxItems", path);
    const std::uint32_t r = b_.NewRule();
    b_.Alt(r, Seq{b_.Byte('[')} + j_.Ws() + Seq{GrammarBuilder::Ref(inner)} + j_.Ws() + Seq{b_.Byte(']')});
    return r;
  }
  if (max >= 0 && max <= 1) return std::nullopt;  // one item or none: distinct already
  if (min > 1) {
    Unsupported(path, "uniqueItems",
                "distinct items can be enforced only for items of at most 64 enum / const values, or with "
                "minItems <= 1 (then at most one item is written)");
  }
  max = 1;  // narrower than the spec: an array of at most one item is distinct
  return std::nullopt;
}

}  // namespace kvshare::detail
