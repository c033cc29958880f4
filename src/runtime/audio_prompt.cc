// Audio clips in a prompt (kvshare/runtime/audio_prompt.h).
#include "kvshare/runtime/audio_prompt.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare {

namespace {
constexpr int kAudioRate = 16000;        // every Gemma audio front end
constexpr int kGemma3nAudioSlots = 188;  // Gemma3nProcessor's audio_seq_length
}  // namespace

double MaxAudioSeconds(AudioProjectorType) { return AudioLimits{}.max_seconds; }

std::size_t AudioChunkSamples(AudioProjectorType projector) {
  return projector == AudioProjectorType::kGemma4UA ? 0 : std::size_t{30} * kAudioRate;
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

std::uint64_t AudioChunkKey(std::uint64_t key, std::size_t chunk) {
  if (chunk == 0) return key;
  std::uint64_t h = key;
  for (int i = 0; i < 8; ++i) {
    h ^= (chunk >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

int PreparedAudio::LargestSpan(AudioProjectorType projector) const {
  int largest = 0;
  for (int t : chunk_tokens) largest = std::max(largest, t);
  return largest + (projector == AudioProjectorType::kGemma3nA ? 1 : 0);
}

namespace {
// The fewest 16 kHz samples that give `c`'s encoder a soft token (found on
// silence, for the error message only).
std::size_t MinAudioSamples(const AudioConfig& c, const std::optional<LogMelExtractor>& mel) {
  const auto tokens = [&](std::size_t n) {
    const std::vector<float> zeros(n, 0.0f);
    return AudioSoftTokens(c, mel ? mel->Extract(zeros) : RawAudioFrames(zeros, c.samples_per_token));
  };
  std::size_t lo = 1, hi = 1;
  while (tokens(hi) == 0) {
    if (hi > std::size_t{kAudioRate}) return hi;  // more than 1 s: say so rather than search on
    lo = hi + 1;
    hi *= 2;
  }
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (tokens(mid) == 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return hi;
}
}  // namespace

PreparedAudio PrepareAudio(const AudioEncoder& encoder, const Audio& audio, std::uint64_t key) {
  const AudioConfig& c = encoder.config();
  if (audio.sample_rate <= 0) throw Error(detail::Str("audio: sample rate ", audio.sample_rate, " (must be > 0 Hz)"));
  if (audio.samples.empty()) throw Error("audio: the clip has no samples");
  const double limit = MaxAudioSeconds(c.projector);
  if (audio.seconds() > limit) {
    throw AudioTooLong(detail::Str("audio: the clip is ", audio.seconds(), " s long; the ",
                                   AudioProjectorTypeName(c.projector), " encoder takes at most ", limit,
                                   " s per clip (split it into several clips)"));
  }
  // A NaN or infinity (a float WAV can hold them) turns every feature and
  // soft token it touches into NaN, and the model's logits with them.
  for (std::size_t i = 0; i < audio.samples.size(); ++i) {
    if (!std::isfinite(audio.samples[i])) {
      throw Error(detail::Str("audio: sample ", i, " of ", audio.samples.size(), " (at ",
                              static_cast<double>(i) / audio.sample_rate, " s) is ",
                              std::isnan(audio.samples[i]) ? "NaN" : "infinite",
                              "; a clip must hold finite samples (PCM, or floats around [-1, 1])"));
    }
  }
  const Audio a = ResampleAudio(audio, kAudioRate);
  const std::size_t n = a.samples.size();
  const std::size_t step = AudioChunkSamples(c.projector) == 0 ? n : AudioChunkSamples(c.projector);
  std::optional<LogMelExtractor> mel;
  if (c.projector != AudioProjectorType::kGemma4UA) mel.emplace(AudioFrontEndFor(c));
  PreparedAudio out;
  out.key = key;
  for (std::size_t from = 0; from < n; from += step) {
    const std::span<const float> piece = std::span<const float>(a.samples).subspan(from, std::min(step, n - from));
    AudioFeatures f = mel ? mel->Extract(piece) : RawAudioFrames(piece, c.samples_per_token);
    const int soft = AudioSoftTokens(c, f);
    // A tail of a few ms gives no soft token: dropped, as it would add only
    // padding. A whole clip that short has nothing to encode.
    if (soft == 0 && from > 0) break;
    if (soft == 0) {
      throw Error(detail::Str("audio: the clip is ", audio.samples.size(), " sample(s) at ", audio.sample_rate, " Hz (",
                              audio.seconds() * 1000.0, " ms), too short for one soft token of the ",
                              AudioProjectorTypeName(c.projector), " encoder: send at least ",
                              MinAudioSamples(c, mel) * 1000.0 / kAudioRate, " ms of audio"));
    }
    // Gemma 3n's prompt always holds its 188 slots (AudioEncoder::PromptTokens).
    const int tokens = c.projector == AudioProjectorType::kGemma3nA ? kGemma3nAudioSlots : soft;
    out.chunks.push_back(std::move(f));
    out.chunk_tokens.push_back(tokens);
    out.tokens += tokens;
  }
  return out;
}

PromptAudio EncodePromptAudio(const AudioEncoder& encoder, const PreparedAudio& prepared, ThreadPool* pool) {
  const AudioConfig& c = encoder.config();
  PromptAudio out = prepared.Pending();
  out.tokens = 0;
  for (std::size_t i = 0; i < prepared.chunks.size(); ++i) {
    std::vector<float> rows = encoder.PromptTokens(prepared.chunks[i], pool);
    const int tokens = static_cast<int>(rows.size() / static_cast<std::size_t>(c.n_embd_text));
    if (i < out.chunk_tokens.size()) out.chunk_tokens[i] = tokens;
    out.tokens += tokens;
    out.rows.insert(out.rows.end(), rows.begin(), rows.end());
  }
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
    const std::vector<int> chunks = a.chunk_tokens.empty() ? std::vector<int>{a.tokens} : a.chunk_tokens;
    int sum = 0;
    for (int t : chunks) sum += t;
    if (sum != a.tokens) {
      throw Error(detail::Str("audio clip ", i, ": its chunks hold ", sum, " soft tokens, not its ", a.tokens));
    }
    MediaInsert m{.slot = slots[i]};
    m.tokens.push_back(begin_);
    m.tokens.insert(m.tokens.end(), static_cast<std::size_t>(a.tokens), soft_);
    m.tokens.push_back(end_);
    // One span per chunk so that a step never has to hold more than 30 s.
    const std::size_t width = a.rows.empty() ? 0 : a.rows.size() / (a.tokens + (end_in_span ? 1 : 0));
    int at = 0;
    for (std::size_t j = 0; j < chunks.size(); ++j) {
      const bool last = j + 1 == chunks.size();
      m.spans.push_back(EmbeddingSpan{.begin = 1 + at,
                                      .count = chunks[j] + (end_in_span && last ? 1 : 0),
                                      .rows = a.rows.empty() ? nullptr : a.rows.data() + width * at,
                                      .bidirectional = false});
      m.keys.push_back(AudioChunkKey(a.key, j));
      at += chunks[j];
    }
    out.push_back(std::move(m));
  }
  return out;
}

MediaPrompt AudioSplicer::Splice(std::span<const std::int32_t> ids, std::span<const std::size_t> slots,
                                 std::span<const PromptAudio> clips) const {
  return SpliceMedia(ids, Inserts(slots, clips));
}

}  // namespace kvshare
