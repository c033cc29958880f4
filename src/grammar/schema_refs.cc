// Local $refs of a schema written inside another (kvshare/grammar/schema_refs.h).
#include "kvshare/grammar/schema_refs.h"

#include <nlohmann/json.hpp>

#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using Json = nlohmann::ordered_json;

void EmbedAny(Json& j, std::string_view pointer);

// `s` is a schema (or a value in schema position).
void EmbedSchema(Json& s, std::string_view pointer) {
  if (!s.is_object()) return EmbedAny(s, pointer);
  for (auto& [key, value] : s.items()) {
    if (key == "$ref" && value.is_string()) {
      const std::string ref = value.get<std::string>();
      if (ref == "#" || ref.starts_with("#/")) value = std::string(pointer) + ref.substr(1);
    } else if (key == "const" || key == "enum" || key == "default" || key == "examples") {
      // Data: a "$ref" key there is no reference.
    } else if ((key == "properties" || key == "patternProperties" || key == "$defs" || key == "definitions" ||
                key == "dependentSchemas") &&
               value.is_object()) {
      // Names mapped to schemas: a property called "const" is still a schema.
      for (auto& [name, sub] : value.items()) EmbedSchema(sub, pointer);
    } else {
      EmbedAny(value, pointer);
    }
  }
}

void EmbedAny(Json& j, std::string_view pointer) {
  if (j.is_object()) {
    EmbedSchema(j, pointer);
  } else if (j.is_array()) {
    for (Json& e : j) EmbedAny(e, pointer);
  }
}

}  // namespace

std::string EmbedSchemaRefs(std::string_view schema, std::string_view pointer) {
  Json j;
  try {
    j = Json::parse(schema);
  } catch (const Json::exception& e) {
    throw Error(std::string("schema is not valid JSON: ") + e.what());
  }
  EmbedSchema(j, pointer);
  return j.dump();
}

}  // namespace kvshare
