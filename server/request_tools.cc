// The chat endpoint's tools and tool_choice (request_tools.h), and what a
// request offers the runtime (openai_request.h OffersTools, OfferedTools).
#include "request_tools.h"

#include <cctype>

#include "api_error.h"
#include "grammar_key.h"
#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/grammar/grammar_cache.h"
#include "request_fields.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

bool ValidToolName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

std::vector<OfferedTool> ParseTools(const json& body, const RequestParsing& o, std::vector<std::string>& ignored) {
  std::vector<OfferedTool> out;
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) WrongType("tools", "an array", *it);
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string name = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) WrongType(name, "an object", t);
    if (auto ty = t.find("type");
        ty != t.end() && !ty->is_null() && (!ty->is_string() || ty->get<std::string>() != "function")) {
      throw BadRequest("Invalid '" + name + ".type': only \"function\" tools are supported.", name + ".type",
                       "invalid_value");
    }
    for (const auto& [k, v] : t.items()) {
      if (k != "type" && k != "function") Unknown(name + "." + k, o, ignored);
    }
    auto f = t.find("function");
    if (f == t.end() || f->is_null()) {
      throw BadRequest("Missing required parameter: '" + name + ".function'.", name + ".function",
                       "missing_required_parameter");
    }
    if (!f->is_object()) WrongType(name + ".function", "an object", *f);
    for (const auto& [k, v] : f->items()) {
      if (k != "name" && k != "description" && k != "parameters" && k != "strict") {
        Unknown(name + ".function." + k, o, ignored);
      }
    }
    OfferedTool tool;
    auto n = f->find("name");
    if (n == f->end() || n->is_null()) {
      throw BadRequest("Missing required parameter: '" + name + ".function.name'.", name + ".function.name",
                       "missing_required_parameter");
    }
    if (!n->is_string()) WrongType(name + ".function.name", "a string", *n);
    tool.function.name = n->get<std::string>();
    if (!ValidToolName(tool.function.name)) {
      throw BadRequest("Invalid '" + name + ".function.name': '" + tool.function.name +
                           "' must be 1 to 64 characters of a-z, A-Z, 0-9, underscores and dashes.",
                       name + ".function.name", "invalid_value");
    }
    for (const OfferedTool& other : out) {
      if (other.function.name == tool.function.name) {
        throw BadRequest("Invalid '" + name + ".function.name': the name '" + tool.function.name +
                             "' is used by another tool; tool names must be unique.",
                         name + ".function.name", "invalid_value");
      }
    }
    if (auto d = f->find("description"); d != f->end() && !d->is_null()) {
      if (!d->is_string()) WrongType(name + ".function.description", "a string", *d);
      tool.function.description = d->get<std::string>();
    }
    if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
      if (!p->is_object()) WrongType(name + ".function.parameters", "an object (a JSON Schema)", *p);
      tool.function.parameters = p->dump();
    }
    if (auto st = f->find("strict"); st != f->end() && !st->is_null()) {
      if (!st->is_boolean()) WrongType(name + ".function.strict", "a boolean", *st);
      tool.strict = st->get<bool>();
    }
    if (tool.strict) {
      try {
        const std::string schema =
            tool.function.parameters.empty() ? "{\"type\": \"object\"}" : tool.function.parameters;
        const JsonGrammarOptions json_options;
        auto compile = [&] { return CompileJsonSchema(schema, json_options); };
        if (o.grammars != nullptr) {
          o.grammars->GetOrCompile(SchemaGrammarKey(schema, json_options), compile);
        } else {
          compile();
        }
      } catch (const Error& e) {
        throw BadRequest("Invalid '" + name + ".function.parameters': " + e.what() +
                             " (with strict: true the parameters must be a schema this server can enforce; drop "
                             "the keyword or set strict to false).",
                         name + ".function.parameters", "invalid_schema");
      }
    }
    out.push_back(std::move(tool));
  }
  return out;
}

CompletionRequest::ToolChoice ParseToolChoice(const json& body, const std::vector<OfferedTool>& tools) {
  using Mode = CompletionRequest::ToolChoice::Mode;
  CompletionRequest::ToolChoice c;
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null()) return c;
  if (tc->is_string()) {
    const std::string v = tc->get<std::string>();
    if (v == "auto") {
      c.mode = Mode::kAuto;
    } else if (v == "none") {
      c.mode = Mode::kNone;
    } else if (v == "required") {
      c.mode = Mode::kRequired;
    } else {
      throw BadRequest("Invalid value: '" + v +
                           "'. Supported values are: 'none', 'auto', 'required' and an object "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}.",
                       "tool_choice", "invalid_value");
    }
  } else if (tc->is_object()) {
    auto f = tc->find("function");
    if (auto t = tc->find("type"); t != tc->end() && (!t->is_string() || t->get<std::string>() != "function")) {
      throw BadRequest("Invalid 'tool_choice.type': only \"function\" is supported.", "tool_choice.type",
                       "invalid_value");
    }
    if (f == tc->end() || !f->is_object()) {
      throw BadRequest(
          "Missing required parameter: 'tool_choice.function' (an object with the name of the tool to "
          "call).",
          "tool_choice.function", "missing_required_parameter");
    }
    auto n = f->find("name");
    if (n == f->end() || !n->is_string()) {
      throw BadRequest("Missing required parameter: 'tool_choice.function.name'.", "tool_choice.function.name",
                       "missing_required_parameter");
    }
    c.mode = Mode::kFunction;
    c.name = n->get<std::string>();
    std::string names;
    bool found = false;
    for (const OfferedTool& t : tools) {
      found = found || t.function.name == c.name;
      names += (names.empty() ? "" : ", ") + t.function.name;
    }
    if (!found) {
      throw BadRequest("Invalid 'tool_choice.function.name': no tool named '" + c.name + "' in 'tools' (" +
                           (names.empty() ? std::string("none given") : "tools: " + names) + ").",
                       "tool_choice.function.name", "invalid_value");
    }
  } else {
    WrongType("tool_choice", "a string or an object", *tc);
  }
  if (c.mode == Mode::kRequired && tools.empty()) {
    throw BadRequest("Invalid 'tool_choice': \"required\" needs at least one tool in 'tools'.", "tool_choice",
                     "invalid_value");
  }
  return c;
}

bool OffersTools(const CompletionRequest& req) {
  return !req.tools.empty() && req.tool_choice.mode != CompletionRequest::ToolChoice::Mode::kNone;
}

std::optional<ToolOffer> OfferedTools(const CompletionRequest& req) {
  using Mode = CompletionRequest::ToolChoice::Mode;
  if (!OffersTools(req)) return std::nullopt;
  ToolOffer offer{.tools = req.tools, .function = req.tool_choice.name, .parallel = req.parallel_tool_calls};
  if (req.tool_choice.mode == Mode::kRequired) offer.choice = ToolOffer::Choice::kRequired;
  if (req.tool_choice.mode == Mode::kFunction) offer.choice = ToolOffer::Choice::kFunction;
  return offer;
}

}  // namespace kvshare::server
