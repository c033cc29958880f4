// JSON Schema → byte-level grammar (kvshare/grammar/grammar.h lists the subset and
// the output shape): the schema text's limits and the entry points; the
// compiler itself is json_schema_compiler.h.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_grammar.h"
#include "grammar/json_schema_compiler.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"

namespace kvshare {
namespace {

using Json = detail::SchemaCompiler::Json;

// Nesting limit: the compiler (and nlohmann's dump) recurse once per level,
// so without it a deep text overflows the stack (the schemas' own limit:
// json_schema_walk.cc).
constexpr int kMaxJsonDepth = 256;  // arrays / objects of the schema text
// ordered_json finds a key by a linear scan, so parsing an object of n
// members costs n^2 / 2 comparisons (200000 members: minutes).
constexpr int kMaxMembers = 1024;  // per object

Json ParseSchema(std::string_view text) {
  try {
    std::vector<int> members;  // of each object being parsed
    return Json::parse(text, [&members](int depth, Json::parse_event_t event, Json&) {
      if (depth > kMaxJsonDepth) {
        throw Error("the JSON Schema is nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      if (event == Json::parse_event_t::object_start) members.push_back(0);
      if (event == Json::parse_event_t::object_end && !members.empty()) members.pop_back();
      if (event == Json::parse_event_t::key && !members.empty() && ++members.back() > kMaxMembers) {
        throw Error("the JSON Schema has an object of more than " + std::to_string(kMaxMembers) + " members");
      }
      return true;
    });
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for "1e400"
    throw Error(std::string("the JSON Schema is not valid JSON: ") + e.what());
  }
}

}  // namespace

std::uint32_t detail::CompileSchemaRule(JsonGrammar& j, std::string_view schema) {
  const Json root = ParseSchema(schema);
  SchemaCompiler c(root, j);
  return c.Schema(root, "#");
}

std::shared_ptr<const Grammar> CompileJsonSchema(std::string_view schema, const JsonGrammarOptions& options) {
  detail::JsonGrammar j(options);
  const std::uint32_t value = detail::CompileSchemaRule(j, schema);
  return j.Finish(value);
}

std::shared_ptr<const Grammar> AnyJsonObjectGrammar(const JsonGrammarOptions& options) {
  const Json root = Json::object();
  detail::JsonGrammar j(options);
  detail::SchemaCompiler c(root, j);
  const std::uint32_t value = c.AnyObject();
  return j.Finish(value);
}

}  // namespace kvshare
