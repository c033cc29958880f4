// Images in chat requests (request_images.h).
#include "request_images.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "request_fields.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// The 6-bit value of a base64 character; -1 outside the alphabets.
int Sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != prefix[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<std::vector<std::uint8_t>> DecodeBase64(std::string_view text) {
  std::vector<std::uint8_t> out;
  out.reserve(text.size() / 4 * 3 + 3);
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0, sextets = 0;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = Sextet(c);
    if (v < 0 || pad > 0) return std::nullopt;  // outside the alphabet, or data after padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    ++sextets;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xFF));
    }
  }
  // A group of 4 characters holds 3 bytes; 1 left-over character is 6 bits,
  // not a byte. Padding completes the last group only.
  if (sextets % 4 == 1 || pad > 2 || (pad > 0 && (sextets + pad) % 4 != 0)) return std::nullopt;
  return out;
}

RequestImage ReadImageUrlPart(const json& part, const std::string& name, const RequestParsing& o) {
  auto iu = part.find("image_url");
  std::string where = name + ".image_url";
  if (iu == part.end() || iu->is_null()) {
    throw BadRequest("Missing required parameter: '" + where + "'.", where, "missing_required_parameter");
  }
  const json* url = &*iu;
  if (iu->is_object()) {
    where += ".url";
    auto u = iu->find("url");
    if (u == iu->end() || u->is_null()) {
      throw BadRequest("Missing required parameter: '" + where + "'.", where, "missing_required_parameter");
    }
    url = &*u;
  }
  if (!url->is_string()) WrongType(where, "a string", *url);
  const std::string& s = url->get_ref<const std::string&>();
  if (StartsWithNoCase(s, "http://") || StartsWithNoCase(s, "https://")) {
    throw BadRequest(o.allow_image_urls
                         ? "Invalid '" + where +
                               "': fetching images from http(s) URLs is not built into this server; send the image "
                               "as a data: URL (data:image/png;base64,...)."
                         : "Invalid '" + where +
                               "': this server does not fetch http(s) image URLs; send the image as a data: URL "
                               "(data:image/png;base64,...).",
                     where, "invalid_image_url");
  }
  const std::size_t comma = s.find(',');
  if (!StartsWithNoCase(s, "data:") || comma == std::string::npos || s.substr(0, comma).size() < 7 ||
      !StartsWithNoCase(std::string_view(s).substr(comma - 7, 7), ";base64")) {
    throw BadRequest("Invalid '" + where + "': expected a base64 data: URL (data:image/png;base64,...), got '" +
                         s.substr(0, 40) + (s.size() > 40 ? "...'" : "'") + ".",
                     where, "invalid_image_url");
  }
  std::optional<std::vector<std::uint8_t>> bytes = DecodeBase64(std::string_view(s).substr(comma + 1));
  if (!bytes) {
    throw BadRequest("Invalid '" + where + "': the data: URL's base64 is malformed.", where, "invalid_base64");
  }
  return {std::move(*bytes), where};
}

void AttachImages(const CompletionRequest& req, const ModelContext& ctx, const std::vector<std::size_t>& slots,
                  RequestOptions& r) {
  const ModelContext::Images& im = ctx.images;
  if (im.encoder == nullptr) {
    throw BadRequest("Invalid '" + req.images[0].param +
                         "': this server's model takes no images; start the server with --mmproj PATH (the "
                         "model's vision projector GGUF) to send image_url parts.",
                     req.images[0].param, "images_unsupported");
  }
  const PreprocessOptions po{.max_soft_tokens = req.max_soft_tokens.value_or(im.max_soft_tokens)};
  // Decode and preprocess every image, and count the spliced prompt's
  // tokens, before encoding any (the cheap checks first).
  auto images = std::make_shared<std::vector<PromptImage>>();
  std::vector<std::vector<PixelTensor>> pixels;
  std::int64_t image_tokens = 0;
  for (const RequestImage& ri : req.images) {
    std::vector<PixelTensor> p;
    try {
      p = im.encoder->Preprocess(DecodeImage(ri.bytes, im.limits), po);
    } catch (const Error& e) {
      throw BadRequest("Invalid '" + ri.param + "': " + e.what() + ".", ri.param, "invalid_image");
    }
    PromptImage& pi = images->emplace_back();
    pi.key = ImageKey(ri.bytes, po);
    for (const PixelTensor& px : p) {
      pi.tokens.push_back(im.encoder->TokensFor(px));
      image_tokens += pi.tokens.back();
      if (pi.tokens.back() > im.max_image_tokens) {
        throw BadRequest("Invalid '" + ri.param + "': the image takes " + std::to_string(pi.tokens.back()) +
                             " tokens, more than one step of this server holds (" +
                             std::to_string(im.max_image_tokens) +
                             "); lower max_soft_tokens or start the server with a larger --step-tokens.",
                         ri.param, "image_too_large");
      }
    }
    pixels.push_back(std::move(p));
  }
  const auto splice = [&] {
    try {
      return im.splicer->Splice(r.prompt, slots, *images);
    } catch (const Error& e) {
      throw BadRequest(std::string("Invalid 'messages': ") + e.what() + ".", "messages", "invalid_value");
    }
  };
  const std::int64_t n = static_cast<std::int64_t>(splice().tokens.size());  // rows not read yet
  if (n >= ctx.max_context) {
    throw BadRequest("This model's maximum context length is " + std::to_string(ctx.max_context) +
                         " tokens. However, your messages resulted in " + std::to_string(n) + " tokens (" +
                         std::to_string(image_tokens) + " of them the soft tokens of " +
                         std::to_string(req.images.size()) +
                         " images). Please send fewer or smaller images (max_soft_tokens) or shorten the messages.",
                     "messages", "context_length_exceeded");
  }
  // One request's images at a time on the encode pool (it is not reentrant).
  std::unique_lock<std::mutex> lock;
  if (im.pool_mu != nullptr) lock = std::unique_lock<std::mutex>(*im.pool_mu);
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    for (const PixelTensor& px : pixels[i]) {
      const std::vector<float> rows = im.encoder->Encode(px, im.pool);
      (*images)[i].rows.insert((*images)[i].rows.end(), rows.begin(), rows.end());
    }
  }
  ImagePrompt spliced = splice();
  r.prompt = std::move(spliced.tokens);
  r.embeddings = std::move(spliced.embeddings);
  r.embedding_keys = std::move(spliced.keys);
  r.embedding_rows = std::move(images);
}

}  // namespace kvshare::server
