// The JSON convention of tool calls (include/kvshare/runtime/tool_calls.h): the
// instructions and call text written into prompts, a reply read back as
// calls, the schema that forces a call and the lazy grammar of calls under
// tool_choice "auto".
#include "runtime/chat/json_calls.h"

#include "kvshare/common/error.h"
#include "kvshare/grammar/grammar.h"
#include "kvshare/grammar/schema_refs.h"
#include "kvshare/runtime/tool_calls.h"

namespace kvshare {
namespace chat {

bool IsCallSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view TrimCallSpace(std::string_view s) {
  while (!s.empty() && IsCallSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsCallSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string DumpArguments(const OrderedJson& args) {
  return args.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

namespace {

// Arguments text as JSON: "" is {}; text that is not JSON becomes a string.
OrderedJson ArgumentsJson(const std::string& text) {
  if (TrimCallSpace(text).empty()) return OrderedJson::object();
  try {
    return OrderedJson::parse(text);
  } catch (const OrderedJson::exception&) {
    return OrderedJson(text);
  }
}

// One {"name", "arguments"} entry as a call; false when it is not one.
bool JsonCallEntry(const OrderedJson& e, ToolCall& out) {
  if (!e.is_object()) return false;
  auto name = e.find("name");
  if (name == e.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  for (const auto& [k, v] : e.items()) {
    if (k != "name" && k != "arguments") return false;
  }
  OrderedJson args = OrderedJson::object();
  if (auto a = e.find("arguments"); a != e.end()) {
    args = *a;
    // Arguments written as a JSON string of an object are taken as that object.
    if (args.is_string()) {
      try {
        args = OrderedJson::parse(args.get<std::string>());
      } catch (const OrderedJson::exception&) {
        return false;
      }
    }
    if (!args.is_object()) return false;
  }
  out.id.clear();
  out.name = name->get<std::string>();
  out.arguments = DumpArguments(args);
  return true;
}

OrderedJson Closed(OrderedJson properties) {
  OrderedJson required = OrderedJson::array();
  for (const auto& [k, v] : properties.items()) required.push_back(k);
  return OrderedJson{{"type", "object"},
                     {"properties", std::move(properties)},
                     {"required", required},
                     {"additionalProperties", false}};
}

}  // namespace

bool ReadJsonToolCalls(std::string_view text, std::vector<ToolCall>& calls) {
  try {
    const OrderedJson j = OrderedJson::parse(TrimCallSpace(text));
    if (!j.is_object() || j.size() != 1) return false;
    if (auto one = j.find("tool_call"); one != j.end()) {
      ToolCall c;
      if (!JsonCallEntry(*one, c)) return false;
      calls.push_back(std::move(c));
      return true;
    }
    auto many = j.find("tool_calls");
    if (many == j.end() || !many->is_array() || many->empty()) return false;
    for (const OrderedJson& e : *many) {
      ToolCall c;
      if (!JsonCallEntry(e, c)) return false;
      calls.push_back(std::move(c));
    }
    return true;
  } catch (const OrderedJson::exception&) {
    return false;
  }
}

// {"tool_call": CALL}, or when parallel also {"tool_calls": [CALL, ...]}.
std::shared_ptr<const Grammar> JsonCallGrammar(std::span<const CallableFunction> functions, bool parallel) {
  // Where the arguments are written (for their $refs): top, or its first
  // branch when parallel; the call, or one of its branches.
  const std::string call_at = std::string(parallel ? "#/anyOf/0" : "#") + "/properties/tool_call";
  OrderedJson branches = OrderedJson::array();
  for (const CallableFunction& f : functions) {
    const std::string at = functions.size() == 1 ? "" : "/anyOf/" + std::to_string(branches.size());
    const OrderedJson args =
        OrderedJson::parse(EmbedSchemaRefs(CallArgumentsSchema(f), call_at + at + "/properties/arguments"));
    branches.push_back(Closed(OrderedJson{{"name", {{"const", f.name}}}, {"arguments", args}}));
  }
  const OrderedJson call = branches.size() == 1 ? branches[0] : OrderedJson{{"anyOf", branches}};
  OrderedJson top = Closed(OrderedJson{{"tool_call", call}});
  if (parallel) {
    top = OrderedJson{
        {"anyOf", {top, Closed(OrderedJson{{"tool_calls", {{"type", "array"}, {"items", call}, {"minItems", 1}}}})}}};
  }
  // '"tool_call' opens both forms.
  return JsonObjectCallGrammar(top.dump(), "\"tool_call");
}

}  // namespace chat

using chat::ArgumentsJson;
using chat::OrderedJson;

std::string ToolCallInstructions(std::span<const ToolFunction> tools, bool parallel) {
  std::string text =
      "You can call these tools (functions). Each line is one tool: its name, what it does, and the JSON Schema of "
      "its arguments.\n";
  for (const ToolFunction& t : tools) {
    OrderedJson j = {{"name", t.name}};
    if (!t.description.empty()) j["description"] = t.description;
    if (!t.parameters.empty()) {
      try {
        j["parameters"] = OrderedJson::parse(t.parameters);
      } catch (const OrderedJson::exception& e) {
        throw Error("tool \"" + t.name + "\": parameters are not valid JSON: " + e.what());
      }
    }
    text += j.dump() + "\n";
  }
  text +=
      "\nTo call a tool, reply with only this JSON object and nothing else:\n"
      "{\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}}\n";
  if (parallel) {
    text +=
        "To call several tools at once, reply with only:\n"
        "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}, ...]}\n";
  }
  text +=
      "The results come back as {\"tool_response\": {\"name\": ..., \"content\": ...}}. When no tool is needed, "
      "reply normally.";
  return text;
}

std::string JsonToolCallText(std::span<const ToolCall> calls) {
  auto entry = [](const ToolCall& c) {
    return OrderedJson{{"name", c.name}, {"arguments", ArgumentsJson(c.arguments)}};
  };
  if (calls.size() == 1) return OrderedJson{{"tool_call", entry(calls[0])}}.dump();
  OrderedJson list = OrderedJson::array();
  for (const ToolCall& c : calls) list.push_back(entry(c));
  return OrderedJson{{"tool_calls", list}}.dump();
}

std::string ForcedToolCallSchema(const ToolOffer& offer) {
  // Key order is the order written: "arguments" before "name" (as when
  // this was sorted), and the parameters' properties as declared (sorted,
  // a model was made to write "answer" before its "reasoning").
  std::vector<const OfferedTool*> offered;
  for (const OfferedTool& t : offer.tools) {
    if (offer.choice != ToolOffer::Choice::kFunction || t.function.name == offer.function) offered.push_back(&t);
  }
  OrderedJson branches = OrderedJson::array();
  for (const OfferedTool* tp : offered) {
    const OfferedTool& t = *tp;
    // No parameters: no arguments, {} only.
    OrderedJson args = {{"type", "object"}, {"additionalProperties", false}};
    if (!t.function.parameters.empty()) {
      args = {{"type", "object"}};
      bool usable = t.strict;
      if (!usable) {
        // Parameters beyond the grammar's subset are only rendered: the call
        // is still forced, its arguments are any object.
        try {
          CompileJsonSchema(t.function.parameters);
          usable = true;
        } catch (const Error&) {
        }
      }
      if (usable) {
        const std::string at = offered.size() == 1 ? "" : "/anyOf/" + std::to_string(branches.size());
        args = OrderedJson::parse(
            EmbedSchemaRefs(t.function.parameters, "#/properties/tool_call" + at + "/properties/arguments"));
      }
    }
    branches.push_back({{"type", "object"},
                        {"properties", {{"arguments", args}, {"name", {{"const", t.function.name}}}}},
                        {"required", {"name", "arguments"}},
                        {"additionalProperties", false}});
  }
  OrderedJson call = branches.size() == 1 ? branches[0] : OrderedJson{{"anyOf", branches}};
  return OrderedJson{{"type", "object"},
                     {"properties", {{"tool_call", call}}},
                     {"required", {"tool_call"}},
                     {"additionalProperties", false}}
      .dump();
}

}  // namespace kvshare
