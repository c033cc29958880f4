// Audio clips in a prompt (kvshare/runtime/audio_prompt.h).
#include "kvshare/runtime/audio_prompt.h"


#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare {

namespace {
constexpr int kAudioRate = 16000;          // every Gemma audio front end
constexpr int kGemma3nAudioSlots = 188;    // Gemma3nProcessor's audio_seq_length
}  // namespace

double MaxAudioSeconds(AudioProjectorType projector) {
  return projector == AudioProjectorType::kGemma4UA ? AudioLimits{}.max_seconds : 30.0;
}

std::uint64_t AudioKey(const Audio& audio) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  };
  mix(audio.samples.data(), audio.samples.size() * sizeof(float));
  const std::uint64_t n = audio.samples.size();
  mix(&n, sizeof n);
  mix(&audio.sample_rate, sizeof audio.sample_rate);
  return h;
}

PreparedAudio PrepareAudio(const AudioEncoder& encoder, const Audio& audio, std::uint64_t key) {
  const AudioConfig& c = encoder.config();
  if (audio.sample_rate <= 0) throw Error(detail::Str("audio: sample rate ", audio.sample_rate, " (must be > 0 Hz)"));
  if (audio.samples.empty()) throw Error("audio: the clip has no samples");
  const double limit = MaxAudioSeconds(c.projector);
  if (audio.seconds() > limit) {
    throw Error(detail::Str("audio: the clip is ", audio.seconds(), " s long; the ",
                            AudioProjectorTypeName(c.projector), " encoder takes at most ", limit,
                            " s per clip (split it into several clips)"));
  }
  const Audio a = ResampleAudio(audio, kAudioRate);
  PreparedAudio out;
  out.key = key;
  out.features = c.projector == AudioProjectorType::kGemma4UA ? RawAudioFrames(a.samples, c.samples_per_token)
                                                              : LogMelExtractor(AudioFrontEndFor(c)).Extract(a.samples);
  // Gemma 3n's prompt always holds its 188 slots (AudioEncoder::PromptTokens).
  out.tokens = c.projector == AudioProjectorType::kGemma3nA ? kGemma3nAudioSlots : AudioSoftTokens(c, out.features);
  return out;
}

PromptAudio EncodePromptAudio(const AudioEncoder& encoder, const PreparedAudio& prepared, ThreadPool* pool) {
  const AudioConfig& c = encoder.config();
  PromptAudio out;
  out.key = prepared.key;
  out.rows = encoder.PromptTokens(prepared.features, pool);
  out.tokens = static_cast<int>(out.rows.size() / static_cast<std::size_t>(c.n_embd_text));
  if (c.projector == AudioProjectorType::kGemma3nA) {
    // HF embeds <end_of_audio> (row 0 of the audio vocabulary) through the
    // hard path, not the text table.
    const std::vector<float> end = encoder.HardToken(0);
    out.rows.insert(out.rows.end(), end.begin(), end.end());
  }
  return out;
}

PromptAudio EncodePromptAudio(const AudioEncoder& encoder, const Audio& audio, std::uint64_t key, ThreadPool* pool) {
  return EncodePromptAudio(encoder, PrepareAudio(encoder, audio, key), pool);
}

namespace {
std::int32_t Need(const Tokenizer& tok, AudioProjectorType projector, const char* text) {
  if (auto id = tok.TokenId(text)) return *id;
  throw Error(detail::Str("the mmproj's audio encoder (", AudioProjectorTypeName(projector),
                          ") writes audio between \"", text,
                          "\" markers, but the model's vocabulary has no such token: the mmproj does not belong to "
                          "this model"));
}
}  // namespace

AudioSplicer::AudioSplicer(const Tokenizer& tokenizer, AudioProjectorType projector) : projector_(projector) {
  const bool gemma4 = projector != AudioProjectorType::kGemma3nA;
  begin_ = Need(tokenizer, projector, gemma4 ? "<|audio>" : "<start_of_audio>");
  end_ = Need(tokenizer, projector, gemma4 ? "<audio|>" : "<end_of_audio>");
  soft_ = Need(tokenizer, projector, gemma4 ? "<|audio|>" : "<audio_soft_token>");
  if (!gemma4) padding_ = "\n\n";
}

std::vector<MediaInsert> AudioSplicer::Inserts(std::span<const std::size_t> slots,
                                               std::span<const PromptAudio> clips) const {
  if (slots.size() != clips.size()) {
    throw Error(detail::Str("the prompt has ", slots.size(), " audio place(s) but ", clips.size(),
                            " audio clip(s) were given"));
  }
  const bool end_in_span = projector_ == AudioProjectorType::kGemma3nA;
  std::vector<MediaInsert> out;
  std::size_t from = 0;
  for (std::size_t i = 0; i < clips.size(); ++i) {
    if (slots[i] < from) throw Error(detail::Str("audio slot ", slots[i], " is out of order"));
    from = slots[i];
    const PromptAudio& a = clips[i];
    if (a.tokens < 1) throw Error(detail::Str("audio clip ", i, " has no soft tokens"));
    MediaInsert m{.slot = slots[i]};
    m.tokens.push_back(begin_);
    m.tokens.insert(m.tokens.end(), static_cast<std::size_t>(a.tokens), soft_);
    m.tokens.push_back(end_);
    m.spans.push_back(EmbeddingSpan{
        .begin = 1, .count = a.tokens + (end_in_span ? 1 : 0), .rows = a.rows.data(), .bidirectional = false});
    m.keys.push_back(a.key);
    out.push_back(std::move(m));
  }
  return out;
}

MediaPrompt AudioSplicer::Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                                 std::span<const PromptAudio> clips) const {
  return SpliceMedia(ids, Inserts(slots, clips));
}

}  // namespace kvshare
