// Images in chat requests (request_images.h): decoding, encoding and splicing
// them into the prompt.
#include "request_images.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "request_audio.h"

namespace kvshare::server {

void AttachMedia(const CompletionRequest& req, const ModelContext& ctx, const std::vector<std::size_t>& image_slots,
                 const std::vector<std::size_t>& audio_slots, RequestOptions& r) {
  const ModelContext::Images& im = ctx.images;
  if (!ctx.media_unavailable.empty()) {
    const bool image = !req.images.empty();
    const std::string& param = image ? req.images[0].param : req.audio[0].param;
    throw BadRequest("Invalid '" + param + "': " + ctx.media_unavailable + ".", param,
                     image ? "images_unsupported" : "audio_unsupported");
  }
  if (im.encoder == nullptr && !req.images.empty()) {
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
  PreparedRequestAudio audio = PrepareRequestAudio(req, ctx);
  const auto splice = [&] {
    try {
      std::vector<MediaInsert> clips;
      if (!req.audio.empty()) clips = ctx.audio.splicer->Inserts(audio_slots, *audio.encoded);
      return im.splicer != nullptr ? im.splicer->SpliceWith(r.prompt, image_slots, *images, std::move(clips))
                                   : SpliceMedia(r.prompt, clips);
    } catch (const Error& e) {
      throw BadRequest(std::string("Invalid 'messages': ") + e.what() + ".", "messages", "invalid_value");
    }
  };
  const std::int64_t n = static_cast<std::int64_t>(splice().tokens.size());  // rows not read yet
  if (n >= ctx.max_context) {
    throw BadRequest("This model's maximum context length is " + std::to_string(ctx.max_context) +
                         " tokens. However, your messages resulted in " + std::to_string(n) + " tokens (" +
                         std::to_string(image_tokens + audio.tokens) + " of them the soft tokens of " +
                         std::to_string(req.images.size()) + " images and " + std::to_string(req.audio.size()) +
                         " audio clips). Please send fewer or smaller images (max_soft_tokens) or shorter clips, or "
                         "shorten the messages.",
                     "messages", "context_length_exceeded");
  }
  // One request's images at a time on the encode pool (it is not reentrant).
  std::unique_lock<std::mutex> lock;
  if (im.pool_mu != nullptr) lock = std::unique_lock<std::mutex>(*im.pool_mu);
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    try {
      for (const PixelTensor& px : pixels[i]) {
        const std::vector<float> rows = im.encoder->Encode(px, im.pool);
        (*images)[i].rows.insert((*images)[i].rows.end(), rows.begin(), rows.end());
      }
    } catch (const Error& e) {  // the encoder's own refusals (a grid past its position table)
      const std::string& param = req.images[i].param;
      throw BadRequest("Invalid '" + param + "': " + e.what() + ".", param, "invalid_image");
    }
  }
  if (!req.audio.empty()) EncodeRequestAudio(audio, ctx, im.pool);
  MediaPrompt spliced = splice();
  r.prompt = std::move(spliced.tokens);
  r.embeddings = std::move(spliced.embeddings);
  r.embedding_keys = std::move(spliced.keys);
  r.embedding_rows = std::make_shared<std::pair<decltype(images), decltype(audio.encoded)>>(std::move(images),
                                                                                            std::move(audio.encoded));
}

}  // namespace kvshare::server
