// The towers of an mmproj (kvshare/runtime/mmproj_towers.h).
#include "kvshare/runtime/mmproj_towers.h"

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"

namespace kvshare {

MmprojTowers LoadMmprojTowers(const std::string& path, const Tokenizer& tokenizer, int text_n_embd, ThreadPool* pool) {
  MmprojTowers t;
  bool audio = false, vision = true;
  {
    const GgufFile f = GgufFile::Open(path);
    audio = f.GetStringOpt("clip.audio.projector_type") && f.GetBoolOr("clip.has_audio_encoder", true);
    // An audio-only file: no vision projector key (VisionEncoder::Load names
    // what is wrong with any other file).
    vision = !audio || f.GetStringOpt("clip.vision.projector_type") || f.GetStringOpt("clip.projector_type");
  }
  if (vision) {
    t.vision = VisionEncoder::Load(path);
    CheckMmprojFitsText(t.vision->config(), text_n_embd);
    t.image_splicer = std::make_unique<ImageSplicer>(tokenizer, *t.vision, pool);
  }
  if (!audio) return t;
  try {
    t.audio = AudioEncoder::Load(path);
    CheckAudioMmprojFitsText(t.audio->config(), text_n_embd);
    t.audio_splicer = std::make_unique<AudioSplicer>(tokenizer, t.audio->config().projector);
  } catch (const Error& e) {
    if (!t.vision) throw;
    // An unusable audio part beside a vision tower does not stop images.
    t.audio.reset();
    t.audio_error = std::string("the mmproj's audio part: ") + e.what();
  }
  return t;
}

}  // namespace kvshare
