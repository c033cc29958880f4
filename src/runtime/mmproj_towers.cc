// The towers of an mmproj (kvshare/runtime/mmproj_towers.h).
#include "kvshare/runtime/mmproj_towers.h"

#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"

namespace kvshare {

MmprojTowers LoadMmprojTowers(const std::string& path, const Tokenizer& tokenizer, Model& model, ThreadPool* pool) {
  const int text_n_embd = model.config().n_embd;
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
  if (audio) {
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
  }
  model.SetHardTokenRows(MmprojHardTokenRows(t.vision.get(), t.audio.get(), model.config().n_vocab, pool));
  return t;
}

std::vector<HardTokenRows> MmprojHardTokenRows(const VisionEncoder* vision, const AudioEncoder* audio,
                                               std::int64_t n_vocab, ThreadPool* pool) {
  const bool g3na = audio != nullptr && audio->config().projector == AudioProjectorType::kGemma3nA;
  std::vector<HardTokenRows> out;
  std::int64_t n_audio = g3na ? audio->config().n_vocab_hard : 0;
  if (vision != nullptr) {
    std::vector<float> rows = vision->HardTokenRows(pool);
    const std::int64_t W = vision->config().n_embd_text;
    if (!rows.empty() && W > 0) {
      const std::int64_t n = static_cast<std::int64_t>(rows.size()) / W;
      const GgufTensor* a = vision->gguf().FindTensor("mm.a.embedding.weight");
      const std::int64_t A = a != nullptr && a->n_dims == 2 ? a->ne[1] : (g3na ? n_audio : n);
      const std::int64_t first = n_vocab - A - n;
      if (first < 0) {
        throw Error(detail::Str("the mmproj's vision and audio vocabularies (", n, " + ", A, " rows) do not fit ",
                                "the model's ", n_vocab, " ids: the mmproj does not belong to this model"));
      }
      out.push_back({.first = static_cast<std::int32_t>(first), .rows = std::move(rows)});
    }
  }
  if (g3na && n_audio > 0) {
    HardTokenRows r{.first = static_cast<std::int32_t>(n_vocab - n_audio), .rows = {}};
    if (r.first < 0) {
      throw Error(detail::Str("the mmproj's audio vocabulary (", n_audio, " rows) does not fit the model's ", n_vocab,
                              " ids: the mmproj does not belong to this model"));
    }
    for (int i = 0; i < static_cast<int>(n_audio); ++i) {
      const std::vector<float> row = audio->HardToken(i);
      r.rows.insert(r.rows.end(), row.begin(), row.end());
    }
    out.push_back(std::move(r));
  }
  return out;
}

void InstallMmprojHardTokenRows(const std::string& path, const VisionEncoder* vision, const AudioEncoder* audio,
                                Model& model, ThreadPool* pool) {
  std::unique_ptr<VisionEncoder> own_vision;
  std::unique_ptr<AudioEncoder> own_audio;
  {
    const GgufFile f = GgufFile::Open(path);
    const std::string_view v = f.GetStringOpt("clip.vision.projector_type").value_or(
        f.GetStringOpt("clip.projector_type").value_or(""));
    const bool has_audio = f.GetStringOpt("clip.audio.projector_type").value_or("") == "gemma3na" &&
                           f.GetBoolOr("clip.has_audio_encoder", true);
    if (v != "gemma3nv" && !has_audio) return;
    if (vision == nullptr && v == "gemma3nv") vision = (own_vision = VisionEncoder::Load(path)).get();
    if (audio == nullptr && has_audio) audio = (own_audio = AudioEncoder::Load(path)).get();
  }
  if (vision != nullptr) CheckMmprojFitsText(vision->config(), model.config().n_embd);
  if (audio != nullptr) CheckAudioMmprojFitsText(audio->config(), model.config().n_embd);
  model.SetHardTokenRows(MmprojHardTokenRows(vision, audio, model.config().n_vocab, pool));
}

}  // namespace kvshare
