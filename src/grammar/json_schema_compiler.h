// The JSON Schema compiler (kvshare/grammar/grammar.h lists the subset and the
// output shape): a walk over the schema that makes rules of a JsonGrammar,
// one schema (an object or a boolean) at a time. Its parts, one concept a
// file: json_schema_walk.cc (the recursion and its depth limit, the keyword
// checks, $ref resolution), json_schema_types.cc ('type': objects, arrays,
// strings and the other scalars), json_schema_combinators.cc (anyOf /
// oneOf / allOf, enum / const). json_schema.cc parses the text and holds the
// entry points. Internal to src/grammar.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar_ir.h"
#include "grammar/json_grammar.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

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

 private:
  using Seq = GrammarBuilder::Seq;

  [[noreturn]] static void Fail(const std::string& path, const std::string& what) {
    throw Error("JSON Schema at " + path + ": " + what);
  }
  // object, array, string, number, integer, boolean, null.
  static const std::set<std::string>& TypeNames();

  // json_schema_walk.cc: one schema's keywords, checked, then dispatched.
  std::uint32_t SchemaAt(const Json& s, const std::string& path);
  std::uint32_t Ref(const std::string& ref, const std::string& path);

  // json_schema_types.cc.
  // The names 'type' lists (empty when absent).
  std::set<std::string> DeclaredTypes(const Json& s, const std::string& path);
  // Values of any of `types` (when empty, those the keywords present imply;
  // none: any value).
  std::uint32_t OfTypes(std::set<std::string> types, const Json& s, const std::string& path);
  std::uint32_t OfType(const std::string& type, const Json& s, const std::string& path);
  std::uint32_t Object(const Json& s, const std::string& path);
  std::uint32_t ArraySchema(const Json& s, const std::string& path);
  // s[key] as a bound in [0, 4096], `absent` when s has no such key.
  int Bound(const Json& s, const char* key, const std::string& path, int absent);

  // json_schema_combinators.cc.
  // anyOf, oneOf or allOf (`key`) with their schemas `branches`.
  std::uint32_t Combinator(const char* key, const Json& branches, const std::string& path);
  // The JSON types a schema's instances may have (for oneOf), all seven when
  // it does not say.
  std::set<std::string> Types(const Json& s, int depth);
  // enum / const: those values of them that are of one of `types` (any when
  // empty).
  std::uint32_t Values(const Json& s, const std::set<std::string>& types, const std::string& path);

  const Json& root_;
  int depth_ = 0;  // Schema calls in progress
  JsonGrammar& j_;
  GrammarBuilder& b_;
  std::map<std::string, std::uint32_t> refs_;
  // $refs entered since the last object or array: a cycle among them would
  // be left recursion (it reads nothing before coming back).
  std::vector<std::string> unguarded_;
};

}  // namespace kvshare::detail
