// POST /tokenize, POST /detokenize and GET /tokenizer_info: llama-server's
// shapes ({"content", "add_special", "parse_special", "with_pieces"} ->
// {"tokens", "count", "max_model_len"}, a piece that is not UTF-8 as its
// bytes; {"tokens"} -> {"content"}, special tokens as their text) and
// vLLM's ({"prompt", "add_special_tokens" (default true), "model"};
// /detokenize also answers "prompt"; /tokenizer_info gives the special
// tokens' text), which lm-evaluation-harness's remote tokenizer uses
// (docs/serving.md).
#include "server_impl.h"

namespace kvshare::server {

using nlohmann::json;

namespace {

json Object(const httplib::Request& req) {
  json body = ParseBody(req);
  if (!body.is_object())
    throw BadRequest("Invalid request body: expected a JSON object.", std::nullopt, "invalid_type");
  return body;
}

void OnlyKeys(const json& body, std::initializer_list<const char*> keys) {
  for (const auto& [k, v] : body.items()) {
    bool ok = false;
    for (const char* key : keys) ok = ok || k == key;
    if (!ok) throw BadRequest("Unrecognized request argument supplied: " + k, k, "unknown_parameter");
  }
}

// A boolean field, `def` when absent or null.
bool Flag(const json& body, const char* name, bool def) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_boolean())
    throw BadRequest(std::string("Invalid type for '") + name + "': expected a boolean.", name, "invalid_type");
  return it->get<bool>();
}

json Piece(const Tokenizer& tok, std::int32_t id) {
  if (id < 0) return nullptr;
  return std::string(tok.TokenText(id));
}

}  // namespace

void Server::Impl::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  const json body = Object(req);
  OnlyKeys(body, {"content", "add_special", "parse_special", "with_pieces", "prompt", "add_special_tokens", "model"});
  const bool vllm = body.contains("prompt");
  const char* key = vllm ? "prompt" : "content";
  if (vllm && body.contains("content")) {
    throw BadRequest("Invalid request: send 'content' (llama-server) or 'prompt' (vLLM), not both.", "prompt",
                     "invalid_value");
  }
  auto text = body.find(key);
  if (text == body.end()) {
    throw BadRequest("Missing required parameter: 'content' (or vLLM's 'prompt').", "content",
                     "missing_required_parameter");
  }
  if (!text->is_string())
    throw BadRequest(std::string("Invalid type for '") + key + "': expected a string.", key, "invalid_type");
  // vLLM adds special tokens unless told not to; llama-server does not. Both
  // then add what the vocabulary adds (BOS, and EOS where add_eos_token is set,
  // as EmbeddingGemma's), as /v1/embeddings does.
  const bool add_special =
      body.contains("add_special_tokens") ? Flag(body, "add_special_tokens", true) : Flag(body, "add_special", vllm);
  const std::optional<bool> specials = add_special ? std::nullopt : std::optional<bool>(false);
  const std::vector<std::int32_t> ids =
      tok->Encode(text->get<std::string>(),
                  {.add_bos = specials, .add_eos = specials, .parse_special = Flag(body, "parse_special", true)});
  json tokens = json::array();
  const bool pieces = Flag(body, "with_pieces", false);
  for (std::int32_t id : ids) {
    if (pieces) {
      // As llama-server: a piece that is not well-formed UTF-8 (a byte-fallback
      // token holding part of a character) is its bytes, not U+FFFD.
      const std::string_view bytes = tok->TokenBytes(id, true);
      const std::int32_t one[] = {id};
      json piece = tok->Decode(one, {.render_special = true, .strip_leading_space = false});
      if (piece.get_ref<const std::string&>() != bytes) {
        piece = json::array();
        for (unsigned char c : bytes) piece.push_back(static_cast<int>(c));
      }
      tokens.push_back({{"id", id}, {"piece", std::move(piece)}});
    } else {
      tokens.push_back(id);
    }
  }
  res.set_content(Dump({{"tokens", tokens}, {"count", ids.size()}, {"max_model_len", ctx.max_context}}),
                  "application/json");
}

void Server::Impl::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  const json body = Object(req);
  OnlyKeys(body, {"tokens", "model"});
  auto tokens = body.find("tokens");
  if (tokens == body.end())
    throw BadRequest("Missing required parameter: 'tokens'.", "tokens", "missing_required_parameter");
  if (!tokens->is_array())
    throw BadRequest("Invalid type for 'tokens': expected an array of integers.", "tokens", "invalid_type");
  std::vector<std::int32_t> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer())
      throw BadRequest("Invalid type for 'tokens': expected an array of integers.", "tokens", "invalid_type");
    const std::int64_t v = t.get<std::int64_t>();
    if (v < 0 || v >= tok->vocab_size()) {
      throw BadRequest("Invalid 'tokens': token id " + std::to_string(v) + " is outside the vocabulary [0, " +
                           std::to_string(tok->vocab_size()) + ").",
                       "tokens", "invalid_value");
    }
    ids.push_back(static_cast<std::int32_t>(v));
  }
  // As llama-server (and vLLM, HF's decode): special tokens are written as their
  // text, so /detokenize undoes /tokenize, whose parse_special is on by default.
  const std::string text = tok->Decode(ids, {.render_special = true});
  res.set_content(Dump({{"content", text}, {"prompt", text}}), "application/json");
}

void Server::Impl::HandleTokenizerInfo(const httplib::Request&, httplib::Response& res) {
  CheckReady();
  res.set_content(Dump({{"bos_token", Piece(*tok, tok->bos_id())},
                        {"eos_token", Piece(*tok, tok->eos_id())},
                        {"pad_token", Piece(*tok, tok->pad_id())},
                        {"unk_token", Piece(*tok, tok->unk_id())},
                        {"model_max_length", ctx.max_context},
                        {"vocab_size", tok->vocab_size()}}),
                  "application/json");
}

}  // namespace kvshare::server
