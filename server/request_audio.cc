// Audio in chat requests (request_audio.h).
#include "request_audio.h"

#include <string>
#include <utility>

#include "api_error.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"
#include "request_images.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

// "wav" and the others as AudioFormatName writes them.
std::string Upper(std::string s) {
  for (char& c : s) c = c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
  return s;
}

}  // namespace

ApiError BadAudio(const std::string& param, const Error& e) {
  const bool too_long = dynamic_cast<const AudioTooLong*>(&e) != nullptr;
  return BadRequest("Invalid '" + param + "': " + e.what() + ".", param, too_long ? "audio_too_long" : "invalid_audio");
}

PreparedRequestAudio PrepareRequestAudio(const CompletionRequest& req, const ModelContext& ctx) {
  const ModelContext::AudioInput& ai = ctx.audio;
  PreparedRequestAudio out;
  if (req.audio.empty()) return out;
  if (ai.encoder == nullptr) {
    throw BadRequest("Invalid '" + req.audio[0].param +
                         "': this server's model takes no audio; start the server with --mmproj PATH, an mmproj "
                         "with an audio encoder (Gemma 3n, Gemma 4 E2B / E4B), to send input_audio parts.",
                     req.audio[0].param, "audio_unsupported");
  }
  const double limit = MaxAudioSeconds(ai.encoder->config().projector);
  out.encoded = std::make_shared<std::vector<PromptAudio>>();
  for (const RequestAudio& ra : req.audio) {
    Audio clip;
    try {
      const AudioFormat sent = SniffAudioFormat(ra.bytes);
      if (AudioFormatName(sent) != Upper(ra.format)) {
        throw Error(std::string("the data is ") + AudioFormatName(sent) + ", not the declared format \"" + ra.format +
                    "\"");
      }
      clip = DecodeAudio(ra.bytes, {.max_seconds = limit});
    } catch (const Error& e) {
      throw BadAudio(ra.param, e);
    }
    try {
      out.clips.push_back(PrepareAudio(*ai.encoder, clip, AudioKey(clip)));
    } catch (const Error& e) {
      throw BadAudio(ra.param, e);  // too long, too short, or NaN samples
    }
    const PreparedAudio& prepared = out.clips.back();
    // Each 30 s chunk is one span (gemma3na's last also holds its end
    // marker's row: audio_prompt.h).
    const int span = prepared.LargestSpan(ai.encoder->config().projector);
    if (span > ai.max_clip_tokens) {
      throw BadRequest("Invalid '" + ra.param + "': the clip takes " + std::to_string(span) +
                           " tokens in one span, more than one step of this server holds (" +
                           std::to_string(ai.max_clip_tokens) +
                           "); send a shorter clip or start the server with a larger --step-tokens.",
                       ra.param, "audio_too_long");
    }
    out.tokens += prepared.tokens;
    out.encoded->push_back(prepared.Pending());
  }
  return out;
}

void EncodeRequestAudio(PreparedRequestAudio& p, const ModelContext& ctx, ThreadPool* pool) {
  for (std::size_t i = 0; i < p.clips.size(); ++i) {
    (*p.encoded)[i] = EncodePromptAudio(*ctx.audio.encoder, p.clips[i], pool);
  }
}

}  // namespace kvshare::server
