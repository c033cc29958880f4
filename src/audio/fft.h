// The magnitude spectrum of real frames through FFTW (double precision), for
// the log-mel extractors (audio_features.h). Internal to src/audio.
#pragma once

#include <vector>

namespace kvshare::detail {

class RealFft {
 public:
  // An n-point real FFT; the plan is made once (FFTW_ESTIMATE, under a
  // process-wide lock: FFTW's planner is not thread-safe).
  explicit RealFft(int n);
  ~RealFft();
  RealFft(const RealFft&) = delete;
  RealFft& operator=(const RealFft&) = delete;

  int size() const { return n_; }
  // |X[k]| for k = 0 .. n/2 of each of `count` frames: in [count, n] (the
  // caller zero-pads), out [count, n/2 + 1]. Thread-safe: each call uses its
  // own buffers.
  void Magnitude(const double* in, int count, double* out) const;

 private:
  int n_;
  void* plan_;  // fftw_plan
};

}  // namespace kvshare::detail
