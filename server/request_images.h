// Images in chat requests: OpenAI's image_url content parts read into bytes
// (data: URLs only; no fetching), and what BuildRequest makes of them with
// the served mmproj: decoded, checked against the context, encoded and
// spliced into the prompt as the scheduler's embedding spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvshare/runtime/scheduler.h"
#include "openai_request.h"

namespace kvshare::server {

// RFC 4648 base64 (standard alphabet; '-' and '_' of the URL-safe one too;
// padding optional; ASCII whitespace ignored). nullopt when malformed: a
// character outside the alphabet, data after padding, a dangling 6 bits.
std::optional<std::vector<std::uint8_t>> DecodeBase64(std::string_view text);

// The image of an image_url content part (`part` is the whole part; `name`
// its path, "messages[0].content[1]"): {"image_url": {"url": "data:<mime>;
// base64,<data>"}} (or "image_url": "<url>"). Throws ApiError 400 naming
// the field for a missing url, a URL that is not a base64 data: URL, bad
// base64, and http(s) URLs: refused (the server fetches nothing; with
// allow_image_urls the message says fetching is not built).
RequestImage ReadImageUrlPart(const nlohmann::json& part, const std::string& name, const RequestParsing& o);

// Encodes req.images with ctx.images' encoder and req.audio with ctx.audio's
// (request_audio.h) and splices them into r.prompt at `image_slots` /
// `audio_slots` (ChatTemplate::Encode's), setting r's embeddings, keys and
// rows. Throws ApiError 400, before encoding any, naming the item for: no
// mmproj or no encoder of its kind (start the server with --mmproj), an
// image DecodeImage refuses (its message), a clip PrepareRequestAudio
// refuses, an item larger than a step holds, or a prompt whose items
// overflow the context (context_length_exceeded).
void AttachMedia(const CompletionRequest& req, const ModelContext& ctx, const std::vector<std::size_t>& image_slots,
                 const std::vector<std::size_t>& audio_slots, RequestOptions& r);

}  // namespace kvshare::server
