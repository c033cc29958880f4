// Grammar cache keys (grammar_key.h).
#include "grammar_key.h"

#include <cstdint>

#include <nlohmann/json.hpp>

namespace kvshare::server {
namespace {

// Arrays are built with json::array: a braced list of two whose first item
// is a string would be read as an object member.
using nlohmann::json;

constexpr int kKeyVersion = 1;  // bumped when a key's layout changes

json Tools(const ToolOffer& offer) {
  json tools = json::array();
  for (const OfferedTool& t : offer.tools) {
    tools.push_back(json::array({t.function.name, t.function.parameters, t.strict}));
  }
  return tools;
}

json Choice(const ToolOffer& offer) {
  switch (offer.choice) {
    case ToolOffer::Choice::kAuto: return "auto";
    case ToolOffer::Choice::kRequired: return "required";
    case ToolOffer::Choice::kFunction: return json::array({"function", offer.function});
  }
  return nullptr;
}

}  // namespace

std::string ToolGrammarIdentity(ChatFormat format, const Tokenizer& tokenizer) {
  // FNV-1a over each token's type and bytes (length-prefixed).
  std::uint64_t h = 14695981039346656037ull;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  };
  for (std::int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string_view b = tokenizer.TokenBytes(id, /*render_special=*/true);
    mix(std::to_string(static_cast<int>(tokenizer.Type(id))) + ":" + std::to_string(b.size()) + ":");
    mix(b);
  }
  return json::array({ChatFormatName(format), tokenizer.vocab_size(), std::to_string(h)}).dump();
}

std::string SchemaGrammarKey(std::string_view schema, const JsonGrammarOptions& options) {
  return json::array({kKeyVersion, "schema", options.max_whitespace, schema}).dump();
}

std::string ResponseFormatGrammarKey(std::string_view schema, const JsonGrammarOptions& options,
                                     const std::optional<ToolOffer>& free_tools) {
  json k = json::array({kKeyVersion, "response_format", options.max_whitespace, schema});
  if (free_tools) k.push_back(json::array({Choice(*free_tools), Tools(*free_tools)}));
  return k.dump();
}

std::string ToolCallGrammarKey(const ToolOffer& offer, const std::string& identity) {
  json k = json::array({kKeyVersion, "tool_call", Choice(offer), Tools(offer)});
  if (!offer.forced()) k.push_back(json::array({offer.parallel, identity}));
  return k.dump();
}

}  // namespace kvshare::server
