// kvshare/grammar/schema_refs.h — a JSON Schema written inside another one
// (grammar layer, src/grammar/schema_refs.cc). A tool's parameters become the
// `arguments` of a call schema, a response format one branch of an anyOf;
// their document-local `$ref`s (pydantic writes every nested model and enum as
// {"$ref": "#/$defs/Name"}) must then point into the place they were put.
#pragma once

#include <string>
#include <string_view>

namespace kvshare {

// `schema` (JSON text) with its local references ("#" and "#/...") moved
// under `pointer`, the fragment of the place it is written at
// ("#/anyOf/1": "#/$defs/Item" becomes "#/anyOf/1/$defs/Item"). The values
// of const, enum, default and examples are data and stay as they are; other
// references (anchors, other documents) too. Key order is kept. Throws Error
// when `schema` is not JSON.
std::string EmbedSchemaRefs(std::string_view schema, std::string_view pointer);

}  // namespace kvshare
