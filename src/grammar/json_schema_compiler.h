// The JSON Schema compiler (kvshare/grammar/grammar.h lists the subset and the
// output shape): a walk over the schema that makes rules of a JsonGrammar,
// one schema (an object or a boolean) at a time. Its parts, one concept a
// file: json_schema_walk.cc (the recursion and its depth limit, the keyword
// checks, $ref resolution), json_schema_types.cc ('type': objects, arrays,
// strings and the other scalars), json_schema_combinators.cc (anyOf /
// oneOf, enum / const), json_schema_merge.cc (allOf and the siblings of
// $ref / anyOf / oneOf merged into one schema), json_schema_numbers.cc
// (numeric bounds, multipleOf), json_schema_objects.cc (properties and their
// counts, patternProperties, propertyNames, dependentRequired),
// json_schema_arrays.cc (items, prefixItems), json_schema_formats.cc
// (`format` as regular expressions, json_regex.h). json_schema.cc parses the
// text and holds the entry points. Internal to src/grammar.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar_automaton.h"
#include "grammar/grammar_ir.h"
#include "grammar/json_grammar.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

// A `format`'s expression (json_schema_formats.cc); null for a format that
// is not enforced (an annotation).
const std::string* FormatPattern(const std::string& name);

// A schema that no value matches (false, types or values that allOf's
// schemas do not share): an alternative of anyOf / oneOf or an optional
// property of that schema is left out, exactly; elsewhere it is an error.
struct EmptySchema : Error {
  using Error::Error;
};

class SchemaCompiler {
 public:
  // ordered_json: properties keep the order the schema declares them in.
  using Json = nlohmann::ordered_json;

  // `root` is the document ($refs resolve in it); it and j must outlive the
  // compiler.
  SchemaCompiler(const Json& root, JsonGrammar& j) : root_(root), j_(j), b_(j_.builder()) {}

  // The rule of the values of schema s, found at `path` (a JSON pointer, for
  // error messages). Throws kvshare::Error as CompileJsonSchema does.
  std::uint32_t Schema(const Json& s, const std::string& path);
  std::uint32_t AnyObject() { return j_.Map(j_.AnyValue()); }
  // const / enum scalars of s (empty: not a finite set of scalars).
  static std::vector<Json> FiniteScalars(const Json& s);

 private:
  using Seq = GrammarBuilder::Seq;

  [[noreturn]] static void Fail(const std::string& path, const std::string& what) {
    throw Error("JSON Schema at " + path + ": " + what);
  }
  [[noreturn]] static void Empty(const std::string& path, const std::string& what) {
    throw EmptySchema("JSON Schema at " + path + ": " + what);
  }
  // A keyword that cannot be enforced exactly, named with its JSON pointer.
  [[noreturn]] static void Unsupported(const std::string& path, const std::string& key, const std::string& why) {
    throw Error("unsupported JSON Schema keyword '" + key + "' at " + path + "/" + key + ": " + why);
  }
  // Whether s has a keyword that constrains values other than `except`.
  static bool Constrains(const Json& s, const char* except);
  // object, array, string, number, integer, boolean, null.
  static const std::set<std::string>& TypeNames();

  // json_schema_walk.cc: one schema's keywords, checked, then dispatched.
  std::uint32_t SchemaAt(const Json& s, const std::string& path);
  std::uint32_t Ref(const std::string& ref, const std::string& path);
  // The schema a local $ref points to (throws when it does not resolve).
  const Json& Resolve(const std::string& ref, const std::string& path);
  // Whether the document's $schema names draft 4, 6 or 7, where the
  // siblings of $ref are ignored.
  bool LegacyRef() const;

  // json_schema_merge.cc: s rewritten without allOf, without siblings next
  // to $ref (2019-09 on) and with the siblings of anyOf / oneOf moved into
  // each branch; nullopt when s has none of these.
  std::optional<Json> Normalized(const Json& s, const std::string& path);
  // s with unevaluatedProperties as additionalProperties over the
  // properties s, its allOf and its $refs declare (json_schema_merge.cc);
  // refused where a conditional applicator (anyOf / oneOf branches that
  // declare properties) would decide which of them count.
  Json Unevaluated(const Json& s, const std::string& path);
  // s without if / then / else, as allOf of its other keywords and anyOf of
  // (if ∧ then) and the ways ¬if holds, each with else
  // (json_schema_conditional.cc); refused unless `if` can be negated.
  Json Conditional(const Json& s, const std::string& path);
  // The values outside the set `values` (strings, booleans, null), as anyOf
  // of types and a pattern; `key` names the keyword refused otherwise.
  Json Outside(const Json& values, const std::string& path, const char* key);
  // The values x does not match (`not`, json_schema_conditional.cc): for x
  // of const / enum, type, required, and anyOf / allOf of those; refused
  // otherwise.
  Json Negation(const Json& x, const std::string& path, int depth = 0);
  // The schema of the values both a and b accept (objects, or booleans).
  Json Merge(const Json& a, const Json& b, const std::string& path, int hops = 0);
  // Whether `value`, written as compact JSON, is a document of `schema`'s
  // grammar (a separate one, built for the question).
  bool Matches(const Json& schema, const Json& value);

  // json_schema_types.cc.
  // The names 'type' lists (empty when absent).
  std::set<std::string> DeclaredTypes(const Json& s, const std::string& path);
  // Values of any of `types` (when empty, those the keywords present imply;
  // none: any value).
  std::uint32_t OfTypes(std::set<std::string> types, const Json& s, const std::string& path);
  // The types s's keywords imply when it names none (empty: any).
  static std::set<std::string> ImpliedTypes(const Json& s);
  std::uint32_t OfType(const std::string& type, const Json& s, const std::string& path);
  std::uint32_t Object(const Json& s, const std::string& path);
  // Declared properties in order (names, value rules, required flags), with
  // [min, max] of them present (max < 0: any number).
  std::uint32_t Properties(const std::vector<std::string>& keys, const std::vector<std::uint32_t>& values,
                           const std::vector<bool>& required, int min, int max, const std::string& path);
  // The content (between the braces / brackets) of members in the given
  // order, each optional unless required, with [min, max] of them present
  // (max < 0: any number); min_key / max_key name the bounds in errors.
  std::uint32_t Members(const std::vector<Seq>& members, const std::vector<bool>& required, int min, int max,
                        const char* min_key, const char* max_key, const std::string& path);
  std::uint32_t ArraySchema(const Json& s, const std::string& path);
  // uniqueItems: true on array schema s with [min, max] items
  // (json_schema_arrays.cc): the rule of the arrays when its items have a few
  // values (each at most once); otherwise nullopt with max lowered to 1, or
  // refused when minItems > 1.
  std::optional<std::uint32_t> DistinctItems(const Json& s, int min, int& max, const std::string& path);
  // Strings: lengths, pattern, format.
  std::uint32_t StringSchema(const Json& s, const std::string& path);
  static constexpr std::uint32_t kAnyKey = 0xFFFFFFFF;
  // A map (an object of any keys): keys of `key` (a string rule; kAnyKey: any),
  // values of `value`, [min, max] members (max < 0: any number).
  std::uint32_t MapOf(std::uint32_t key, std::uint32_t value, int min, int max);

  // json_schema_numbers.cc.
  struct NumBound {
    bool set = false;
    long long v = 0;
    bool excl = false;
  };
  std::uint32_t NumberSchema(const Json& s, bool integer, const std::string& path);
  std::uint32_t Digits(long long a, long long b);  // decimal forms of [a, b], 0 <= a <= b
  void Magnitude(std::uint32_t r, const Seq& sign, NumBound lo, NumBound hi, int fd);
  // s[key] as a bound in [0, 4096], `absent` when s has no such key.
  int Bound(const Json& s, const char* key, const std::string& path, int absent);

  // json_schema_combinators.cc.
  // anyOf, oneOf or allOf (`key`) with their schemas `branches`.
  std::uint32_t Combinator(const char* key, const Json& branches, const std::string& path);
  // The JSON types a schema's instances may have (for oneOf), all seven when
  // it does not say.
  std::set<std::string> Types(const Json& s, int depth);
  // Whether no value the grammar of oneOf branch a writes is valid against
  // branch b (json_schema_oneof.cc), as far as types, required properties and
  // const / enum / type discriminators show.
  // depth: properties looked into so far (at most 4: each level may try
  // every required property).
  bool Excludes(const Json& a, const Json& b, int depth = 0);
  // Excludes for two object schemas (json_schema_oneof.cc): b requires a
  // name a never writes or writes with values b excludes, or a always
  // writes a name b forbids or whose value b excludes.
  bool ObjectsApart(const Json& a, const Json& b, int depth);
  // a's property x dropped (oneOf: a branch stops writing what another
  // requires), with the properties whose dependentRequired entries need
  // it; a is left unchanged when a required one would go.
  void DropProperty(Json& a, const std::string& x);
  // enum / const: those values of them that are of one of `types` (any when
  // empty).
  std::uint32_t Values(const Json& s, const std::set<std::string>& types, const std::string& path);
  // The values of enum / const that are of one of `types` and match s's
  // other keywords (empty: none).
  std::vector<Json> AllowedValues(const Json& s, const std::set<std::string>& types, const std::string& path);

  const Json& root_;
  int depth_ = 0;  // Schema calls in progress
  JsonGrammar& j_;
  GrammarBuilder& b_;
  std::map<std::string, std::uint32_t> refs_;
  std::optional<bool> nested_ids_;  // json_schema_walk.cc NestedIds, found once
  // $refs entered since the last object or array: a cycle among them would
  // be left recursion (it reads nothing before coming back).
  std::vector<std::string> unguarded_;
  // Matches' grammars by schema text, built once per compile.
  struct Matcher {
    std::shared_ptr<const Grammar> grammar;
    std::unique_ptr<GrammarAutomaton> automaton;
  };
  std::map<std::string, std::shared_ptr<Matcher>> matchers_;
};

}  // namespace kvshare::detail
