// POST /v1/embeddings in OpenAI's shape: `input` a string, a list of strings,
// a token array or a list of token arrays; `model`; `encoding_format` float |
// base64; `dimensions`; `user` (ignored). Answers {"object": "list", "data":
// [{"object": "embedding", "index", "embedding"}], "model", "usage"}. The
// inputs run through Model::Embed on the server's embedding pool, one request
// at a time, on states of their own: neither the scheduler's KV cache nor its
// prompt cache is touched. docs/serving.md, "Embeddings".
#include <cstring>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/runtime/device_support.h"
#include "server_impl.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxInputs = 2048;  // OpenAI's limit on inputs per request

// Little-endian float32 bytes as base64 (OpenAI's encoding_format "base64",
// what the Python SDK asks for by default and decodes with numpy).
std::string Base64Floats(const std::vector<float>& v, std::size_t begin, std::size_t n) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes(n * 4);
  std::memcpy(bytes.data(), v.data() + begin, bytes.size());  // x86 / ARM: little-endian
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::uint32_t b0 = bytes[i], b1 = i + 1 < bytes.size() ? bytes[i + 1] : 0,
                        b2 = i + 2 < bytes.size() ? bytes[i + 2] : 0;
    const std::uint32_t w = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(w >> 18) & 63];
    out += kAlphabet[(w >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(w >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[w & 63] : '=';
  }
  return out;
}

ApiError InvalidInput(const std::string& why) {
  return BadRequest("Invalid 'input': " + why +
                        " Expected a non-empty string, a list of non-empty strings, a non-empty array of token "
                        "ids, or a list of such arrays.",
                    "input", "invalid_value");
}

// One token array from JSON; ids must lie in [0, vocab).
std::vector<std::int32_t> TokenArray(const json& a, std::int64_t vocab, std::size_t index) {
  if (a.empty()) throw InvalidInput("input " + std::to_string(index) + " is an empty token array.");
  std::vector<std::int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer()) throw InvalidInput("a token array may hold integers only.");
    const std::int64_t id = t.get<std::int64_t>();
    if (id < 0 || id >= vocab) {
      throw BadRequest("Invalid 'input': token id " + std::to_string(id) + " in input " + std::to_string(index) +
                           " is outside the vocabulary [0, " + std::to_string(vocab) + ").",
                       "input", "invalid_value");
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

}  // namespace

void Server::Impl::HandleEmbeddings(const httplib::Request& req, httplib::Response& res) {
  CheckReady();
  const json body = ParseBody(req);
  if (!body.is_object())
    throw BadRequest("Invalid request body: expected a JSON object.", std::nullopt, "invalid_type");
  std::string ignored;
  for (const auto& [k, v] : body.items()) {
    if (k == "input" || k == "model" || k == "encoding_format" || k == "dimensions" || k == "user") continue;
    if (opt.strict_openai) throw BadRequest("Unrecognized request argument supplied: " + k, k, "unknown_parameter");
    ignored += (ignored.empty() ? "" : ", ") + k;
  }
  if (!ignored.empty()) {
    res.set_header("X-Kvshare-Ignored-Fields", ignored);
    Log("embeddings request: ignored unknown fields " + ignored + " (--strict-openai refuses them)");
  }
  const auto str_field = [&](const char* name) -> std::optional<std::string> {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) {
      throw BadRequest(std::string("Invalid type for '") + name + "': expected a string.", name, "invalid_type");
    }
    return it->get<std::string>();
  };
  const std::optional<std::string> model_name = str_field("model");
  if (model_name && *model_name != ctx.model_id) {
    if (opt.strict_openai) {
      throw ApiError(404, "The model `" + *model_name + "` does not exist. This server serves `" + ctx.model_id + "`.",
                     "invalid_request_error", "model", "model_not_found");
    }
    res.set_header("X-Kvshare-Served-Model", ctx.model_id);
  }
  str_field("user");
  const std::string format = str_field("encoding_format").value_or("float");
  if (format != "float" && format != "base64") {
    throw BadRequest(
        "Invalid value for 'encoding_format': '" + format + "'. Supported values are: 'float' and 'base64'.",
        "encoding_format", "invalid_value");
  }
  if (const DeviceSupport support = SupportOn(opt.placement.device); !support.embeddings) {
    throw BadRequest(DeviceRefusal(support.device, "/v1/embeddings", "serve embeddings from a server on the CPU") + ".",
                     "model", "model_not_supported");
  }
  const ModelConfig& mc = model->config();
  const std::optional<Pooling> pooling = opt.pooling ? opt.pooling : std::optional<Pooling>(mc.pooling);
  if (*pooling == Pooling::kNone) {
    throw BadRequest("The served model `" + ctx.model_id + "` (" + mc.architecture +
                         ") is a text generation model and this server was started without --pooling: restart it "
                         "with --pooling mean or --pooling last to serve embeddings from it.",
                     "model", "model_not_supported");
  }
  const int width = mc.embedding_dim > 0 ? mc.embedding_dim : mc.n_embd;
  int dimensions = 0;
  if (auto it = body.find("dimensions"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) {
      throw BadRequest("Invalid type for 'dimensions': expected an integer.", "dimensions", "invalid_type");
    }
    const std::int64_t d = it->get<std::int64_t>();
    if (d < 1 || d > width) {
      throw BadRequest("Invalid 'dimensions': " + std::to_string(d) + " is out of range [1, " + std::to_string(width) +
                           "] for this model.",
                       "dimensions", "invalid_value");
    }
    dimensions = static_cast<int>(d);
  }

  auto in = body.find("input");
  if (in == body.end() || in->is_null()) {
    throw BadRequest("Missing required parameter: 'input'.", "input", "missing_required_parameter");
  }
  std::vector<std::vector<std::int32_t>> inputs;
  const auto text = [&](const json& s, std::size_t index) {
    if (s.get_ref<const std::string&>().empty()) throw InvalidInput("input " + std::to_string(index) + " is empty.");
    inputs.push_back(tok->Encode(s.get<std::string>()));  // the vocabulary's BOS / EOS rule
  };
  if (in->is_string()) {
    text(*in, 0);
  } else if (!in->is_array() || in->empty()) {
    throw InvalidInput(in->is_array() ? "the list is empty." : "wrong type.");
  } else if (in->size() > kMaxInputs) {
    throw InvalidInput("at most " + std::to_string(kMaxInputs) + " inputs per request, got " +
                       std::to_string(in->size()) + ".");
  } else if ((*in)[0].is_number_integer()) {
    inputs.push_back(TokenArray(*in, mc.n_vocab, 0));
  } else {
    for (std::size_t i = 0; i < in->size(); ++i) {
      const json& e = (*in)[i];
      if (e.is_string()) {
        text(e, i);
      } else if (e.is_array()) {
        inputs.push_back(TokenArray(e, mc.n_vocab, i));
      } else {
        throw InvalidInput("input " + std::to_string(i) + " is neither a string nor a token array.");
      }
    }
  }
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<std::int64_t>(inputs[i].size()) > mc.context_length) {
      throw BadRequest("This model's maximum context length is " + std::to_string(mc.context_length) +
                           " tokens, however input " + std::to_string(i) + " has " + std::to_string(inputs[i].size()) +
                           " tokens. Please reduce the length of the input.",
                       "input", "context_length_exceeded");
    }
    tokens += inputs[i].size();
  }

  std::vector<float> vectors;
  {
    std::lock_guard<std::mutex> lock(embed_mu);
    try {
      vectors = model->Embed(inputs, {.pooling = pooling, .dimensions = dimensions}, embed_pool.get());
    } catch (const Error& e) {
      throw BadRequest(e.what());
    }
  }
  const std::size_t d = vectors.size() / inputs.size();
  json data = json::array();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") {
      item["embedding"] = Base64Floats(vectors, i * d, d);
    } else {
      item["embedding"] = std::vector<float>(vectors.begin() + static_cast<std::ptrdiff_t>(i * d),
                                             vectors.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
    }
    data.push_back(std::move(item));
  }
  res.set_content(Dump({{"object", "list"},
                        {"data", std::move(data)},
                        {"model", ctx.model_id},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}),
                  "application/json");
}

}  // namespace kvshare::server
