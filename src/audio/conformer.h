// The conformer block Gemma 3n's and Gemma 4's audio towers share (HF
// Gemma3nAudioConformerBlock, Gemma4AudioLayer; docs/audio.md "Encoders"):
// half FFN, chunked local attention with relative positions, light
// convolution, half FFN, norm. The two differ in a few constants
// (ConformerOptions). Internal to src/audio.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/tensor_lookup.h"
#include "vision/vision_ops.h"

namespace kvshare::detail {

struct ConformerBlock {
  // Half FFNs: x + 0.5 * post(down(silu(up(pre(x))))); [1] after the convolution.
  const float* ffn_pre[2] = {nullptr, nullptr};
  const float* ffn_post[2] = {nullptr, nullptr};
  Linear ffn_up[2], ffn_down[2];
  // Attention: x + attn_post_norm(out(Attn(attn_pre_norm(x)))).
  const float* attn_pre_norm = nullptr;
  const float* attn_post_norm = nullptr;
  Linear q, k, v, out;
  std::vector<float> rel_keys;         // [13, d]: RelativeKeys of the relative-position projection
  std::vector<float> per_dim_scale;    // [head_dim], softplus applied
  // Light convolution: x + pw2(silu(norm_conv(dw(glu(pw1(conv_norm(x))))))).
  const float* conv_norm = nullptr;
  const float* norm_conv = nullptr;
  std::vector<float> conv_dw_t;        // [kernel, d]: tap j of channel c at j * d + c (DepthwiseTaps)
  Linear pw1, pw2;
  const float* final_norm = nullptr;
};

struct ConformerOptions {
  int n_embd = 0;
  int n_ff = 0;
  int n_head = 0;
  int head_dim = 0;
  int conv_kernel = 0;
  float eps = 1e-6f;
  // Keys visible to a query: 0 <= q - k <= max_distance (Gemma 3n 12, Gemma 4 11).
  int max_distance = 12;
  float k_scale = 1.0f;                // Gemma 4: ln(1 + e) / ln 2
  float hidden_logit = -1.0e9f;        // what a hidden slot's logit becomes
  bool zero_padded_before_conv = false;  // Gemma 3n zeroes padded frames before the light convolution
};

// The half FFNs of block `prefix` ("a.blk.N."): ffn_norm, ffn_up, ffn_down,
// ffn_post_norm, then the same with "_1" (both converters' names).
void LoadHalfFfns(const TensorLookup& t, const std::string& prefix, std::int64_t d, std::int64_t ff,
                  const LinearOptions& options, ConformerBlock& b);

// The depthwise kernel `conv_dw` as the file stores it, [d, kernel] (tap j
// of channel c at c * kernel + j), transposed to ConformerBlock::conv_dw_t.
std::vector<float> DepthwiseTaps(const float* conv_dw, int d, int kernel);

// The relative-position keys of a block, [13, d] (row c: distance 12 - c):
// `rel` (the block's relative-position projection, [d, d]) of the sinusoids
// of distances 12 .. 0 (d / 2 timescales from 1 to 1e4, sin then cos, float32
// as HF computes them). They depend on no input: computed once at load.
std::vector<float> RelativeKeys(const Linear& rel, int d);

// The blocks in order on h [T, n_embd] in place; valid[t] marks real frames.
void RunConformer(const std::vector<ConformerBlock>& blocks, const ConformerOptions& o, std::vector<float>& h,
                  const std::vector<std::uint8_t>& valid, ThreadPool* pool);

}  // namespace kvshare::detail
