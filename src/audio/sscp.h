// The subsampling convolutions both audio towers start with (HF
// Gemma4AudioSubSampleConvProjection, Gemma3nAudioSubSampleConvProjection):
// 3x3 kernels, stride 2 in time and frequency. Internal to src/audio.
#pragma once

#include <string>
#include <vector>

#include "kvshare/gguf/gguf.h"
#include "quant/quant.h"

namespace kvshare::detail {

struct SscpConv {
  WeightMatrix w;  // [out, in * 9]: columns (in, ky, kx), the GGUF kernel {3, 3, in, out} as stored (F32)
  std::vector<float> taps;      // in == 1: w transposed, [9, out] (tap ky * 3 + kx, then channel)
  const float* norm = nullptr;  // [out]: `a.conv1d.<i>.norm.weight`, the norm after it
  int in = 0, out = 0;
  // `a.conv1d.<i>.weight` (F32, as the converters write it) and its norm.
  // Throws kvshare::Error naming the tensor for another type or shape.
  static SscpConv Load(const GgufFile& file, int i, int in, int out);
  // The convolution of kernel w [out, in * 9] (F32, not copied), without a norm.
  static SscpConv FromF32(const float* w, int in, int out);
};

// Both convolutions: in 1 -> channels[0] -> channels[1].
void LoadSscp(const GgufFile& file, const int (&channels)[2], SscpConv (&conv)[2]);

// y [t_out, f_out, out] (channel fastest) of x [frames, freq, in]: output
// frame t reads input frames 2t + time_offset + ky (Gemma 4: -1, one frame of
// zeros on each side; Gemma 3n: 0, two frames of zeros at the end only),
// frequency bin f reads 2f - 1 + kx (one bin of zeros on each side). t_out =
// (frames - 1) / 2 + 1, f_out = (freq - 1) / 2 + 1. One input channel (the
// first convolution): directly, each output's 9 taps summed in order from
// zero over a vector of channels; more: im2col rows through MatMul, a block
// of output frames at a time. Results do not depend on the thread count.
std::vector<float> SscpConvolve(const SscpConv& c, const std::vector<float>& x, int frames, int freq, int time_offset,
                                ThreadPool* pool);

}  // namespace kvshare::detail
