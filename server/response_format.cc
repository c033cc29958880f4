// response_format (response_format.h) and KeepSchemaKeyOrder (openai_request.h).
#include "response_format.h"

#include "api_error.h"
#include "request_fields.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// The schema node of a response_format, or null (json_object without one).
template <typename Json>
const Json* SchemaNode(const Json& rf) {
  if (!rf.is_object()) return nullptr;
  auto t = rf.find("type");
  if (t == rf.end() || !t->is_string()) return nullptr;
  if (t->template get<std::string>() == "json_object") {
    auto s = rf.find("schema");
    return s != rf.end() && !s->is_null() ? &*s : nullptr;
  }
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) return nullptr;
  auto s = js->find("schema");
  return s != js->end() && !s->is_null() ? &*s : nullptr;
}

}  // namespace

CompletionRequest::ResponseFormat ParseResponseFormat(const json& body, const RequestParsing& o,
                                                      std::vector<std::string>& ignored) {
  using Type = CompletionRequest::ResponseFormat::Type;
  CompletionRequest::ResponseFormat f;
  auto rf = body.find("response_format");
  if (rf == body.end() || rf->is_null()) return f;
  if (!rf->is_object()) WrongType("response_format", "an object", *rf);
  auto t = rf->find("type");
  if (t == rf->end() || t->is_null()) {
    throw BadRequest("Missing required parameter: 'response_format.type'.", "response_format.type",
                     "missing_required_parameter");
  }
  if (!t->is_string()) WrongType("response_format.type", "a string", *t);
  const std::string type = t->get<std::string>();
  auto schema_type = [](const json& s, const std::string& name) {
    if (!s.is_object() && !s.is_boolean()) WrongType(name, "an object", s);
  };
  if (type == "text") {
    for (const auto& [k, v] : rf->items()) {
      if (k != "type") Unknown("response_format." + k, o, ignored);
    }
  } else if (type == "json_object") {
    f.type = Type::kJsonObject;
    for (const auto& [k, v] : rf->items()) {
      if (k != "type" && k != "schema") Unknown("response_format." + k, o, ignored);
    }
    if (const json* s = SchemaNode(*rf)) {
      schema_type(*s, "response_format.schema");
      f.schema = s->dump();
    }
  } else if (type == "json_schema") {
    f.type = Type::kJsonSchema;
    auto js = rf->find("json_schema");
    if (js == rf->end() || js->is_null()) {
      throw BadRequest("Missing required parameter: 'response_format.json_schema'.", "response_format.json_schema",
                       "missing_required_parameter");
    }
    if (!js->is_object()) WrongType("response_format.json_schema", "an object", *js);
    for (const auto& [k, v] : rf->items()) {
      if (k != "type" && k != "json_schema") Unknown("response_format." + k, o, ignored);
    }
    for (const auto& [k, v] : js->items()) {
      if (k != "name" && k != "description" && k != "schema" && k != "strict") {
        Unknown("response_format.json_schema." + k, o, ignored);
      }
    }
    if (auto n = js->find("name"); n != js->end() && !n->is_null()) {
      if (!n->is_string()) WrongType("response_format.json_schema.name", "a string", *n);
      f.name = n->get<std::string>();
    }
    if (auto d = js->find("description"); d != js->end() && !d->is_null() && !d->is_string()) {
      WrongType("response_format.json_schema.description", "a string", *d);
    }
    if (auto st = js->find("strict"); st != js->end() && !st->is_null()) {
      if (!st->is_boolean()) WrongType("response_format.json_schema.strict", "a boolean", *st);
      f.strict = st->get<bool>();
    }
    if (const json* s = SchemaNode(*rf)) {
      schema_type(*s, "response_format.json_schema.schema");
      f.schema = s->dump();
    } else {
      f.schema = "{}";  // no schema: any JSON value
    }
  } else {
    throw BadRequest("Invalid value: '" + type + "'. Supported values are: 'text', 'json_object' and 'json_schema'.",
                     "response_format.type", "invalid_value");
  }
  return f;
}

void KeepSchemaKeyOrder(CompletionRequest& req, std::string_view body) {
  if (req.response_format.schema.empty() && req.tools.empty()) return;
  using Ordered = nlohmann::ordered_json;
  struct TooWide {};
  try {
    // ordered_json looks keys up by a linear scan: an object of n members
    // costs n^2 / 2 comparisons, so top-level fields other than
    // response_format and tools are dropped and an object of more than 1024
    // members (beyond what CompileJsonSchema takes) stops the reordering.
    std::vector<int> members;
    const auto ordered = Ordered::parse(body, [&members](int depth, Ordered::parse_event_t event, Ordered& parsed) {
      if (event == Ordered::parse_event_t::object_start) members.push_back(0);
      if (event == Ordered::parse_event_t::object_end && !members.empty()) members.pop_back();
      if (event == Ordered::parse_event_t::key) {
        if (!members.empty() && ++members.back() > 1024) throw TooWide{};
        if (depth == 1 && parsed != "response_format" && parsed != "tools") return false;
      }
      return true;
    });
    if (auto rf = ordered.find("response_format"); rf != ordered.end() && !req.response_format.schema.empty()) {
      if (const nlohmann::ordered_json* s = SchemaNode(*rf)) req.response_format.schema = s->dump();
    }
    // A tool's parameters are a schema too: the grammar of a call writes its
    // arguments in this order, and the prompt declares them so.
    auto tools = ordered.find("tools");
    if (tools == ordered.end() || !tools->is_array() || tools->size() != req.tools.size()) return;
    for (std::size_t i = 0; i < req.tools.size(); ++i) {
      const Ordered& t = (*tools)[i];
      const auto f = t.find("function");
      if (f == t.end() || !f->is_object()) continue;
      const auto p = f->find("parameters");
      if (p != f->end() && p->is_object() && !req.tools[i].function.parameters.empty()) {
        req.tools[i].function.parameters = p->dump();
      }
    }
  } catch (const nlohmann::json::exception&) {
    // The body parsed once already; keep the sorted schemas.
  } catch (const TooWide&) {
  }
}

}  // namespace kvshare::server
