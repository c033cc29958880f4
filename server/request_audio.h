// Audio in chat requests: OpenAI's input_audio content parts read into bytes,
// and the clips decoded and prepared (features, token counts) with the
// served mmproj's audio encoder before AttachMedia (request_images.h) checks
// the context and encodes them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kvshare/common/error.h"
#include "kvshare/runtime/audio_prompt.h"
#include "openai_request.h"

namespace kvshare::server {

// The clip of an input_audio content part (`part` is the whole part; `name`
// its path, "messages[0].content[1]"): {"input_audio": {"data": "<base64>",
// "format": "wav" | "mp3" | "flac" | "ogg"}}. Throws ApiError 400 naming the
// field for a missing data or format, another format (invalid_audio_format)
// and bad base64.
RequestAudio ReadInputAudioPart(const nlohmann::json& part, const std::string& name);

// A request's clips, decoded and prepared; `encoded` gets their rows.
struct PreparedRequestAudio {
  std::vector<PreparedAudio> clips;
  std::shared_ptr<std::vector<PromptAudio>> encoded;  // tokens and keys now; rows after EncodeRequestAudio
  std::int64_t tokens = 0;                            // soft tokens of all clips
};

// The 400 for a clip the decoder or PrepareAudio refused (`e`), naming
// `param`: audio_too_long when it is over the length limit, invalid_audio
// otherwise (a corrupt file, a clip too short for a soft token, NaN samples).
ApiError BadAudio(const std::string& param, const Error& e);

// Decodes and prepares req.audio. Throws ApiError 400 naming the part for:
// no audio encoder (audio_unsupported), data that is not the declared
// format or no audio at all (invalid_audio: the decoder's reason), a clip
// over the encoder's limit or whose span exceeds a step (audio_too_long).
PreparedRequestAudio PrepareRequestAudio(const CompletionRequest& req, const ModelContext& ctx);

// Encodes the prepared clips into p.encoded on `pool` (null: inline).
void EncodeRequestAudio(PreparedRequestAudio& p, const ModelContext& ctx, ThreadPool* pool);

}  // namespace kvshare::server
