// Resampling to the model's rate (kvshare/audio/audio.h) through libsoxr, as
// transformers' load_audio (soxr "HQ", python-soxr's resample) does it.
#include <soxr.h>

#include <cmath>
#include <memory>

#include "common/str.h"
#include "kvshare/audio/audio.h"
#include "kvshare/common/error.h"

namespace kvshare {

Audio ResampleAudio(const Audio& audio, int rate) {
  if (audio.sample_rate <= 0 || rate <= 0) {
    throw Error(detail::Str("cannot resample audio from ", audio.sample_rate, " Hz to ", rate,
                            " Hz: sample rates must be positive (sample rate 0 is not audio)"));
  }
  if (audio.sample_rate == rate) return audio;
  const double in_rate = audio.sample_rate, out_rate = rate;
  soxr_error_t err = nullptr;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  std::unique_ptr<soxr, decltype(&soxr_delete)> resampler(
      soxr_create(in_rate, out_rate, 1, &err, &io, &quality, nullptr), &soxr_delete);
  if (err != nullptr || !resampler) throw Error(detail::Str("libsoxr: ", soxr_strerror(err)));

  const std::size_t n_in = audio.samples.size();
  // What load_audio keeps: ceil(n * rate / source rate) samples.
  const auto n_out = static_cast<std::size_t>(std::ceil(static_cast<double>(n_in) * out_rate / in_rate));
  // libsoxr writes at most n * ratio + 1 (rounding) before the flush; room for both.
  std::vector<float> out(n_out + 16);
  std::size_t in_pos = 0, out_pos = 0;
  while (in_pos < n_in && out_pos < out.size()) {
    std::size_t used = 0, made = 0;
    err = soxr_process(resampler.get(), audio.samples.data() + in_pos, n_in - in_pos, &used,
                       out.data() + out_pos, out.size() - out_pos, &made);
    if (err != nullptr) throw Error(detail::Str("libsoxr: ", soxr_strerror(err)));
    in_pos += used;
    out_pos += made;
    if (used == 0 && made == 0) break;
  }
  // End of input (in = null): the filter's tail.
  for (;;) {
    std::size_t made = 0;
    if (out_pos >= out.size()) break;
    err = soxr_process(resampler.get(), nullptr, 0, nullptr, out.data() + out_pos, out.size() - out_pos, &made);
    if (err != nullptr) throw Error(detail::Str("libsoxr: ", soxr_strerror(err)));
    if (made == 0) break;
    out_pos += made;
  }
  out.resize(n_out);  // zero padding past what soxr gave, as np.pad does
  for (std::size_t i = out_pos; i < n_out; ++i) out[i] = 0.0f;
  return Audio{rate, std::move(out)};
}

}  // namespace kvshare
