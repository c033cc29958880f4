// The blocks the Gemma 4 and Gemma 3n GPU models share (the GPU twin of
// model/gemma_blocks.h): the attention block (Q / K / V projections, q / k
// norms, the scale-free V norm, k_eq_v, attention on the device cache, O, the
// post-attention norm), the per-layer inputs of a step and a layer's
// per-layer gate. Internal to src/cuda_model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda_model/cuda_decoder.h"
#include "model/gemma_blocks.h"

namespace kvshare::detail {

// One layer's attention weights on the device.
struct DevGemmaAttention {
  int hd = 0, n_kv = 0;
  DevMatrix q, o;
  std::optional<DevMatrix> k, v;  // k: absent on layers whose KV is shared; v: absent => V = raw K (k_eq_v)
  DevBuf q_norm, k_norm, post_norm;
};
// The CPU's weights of layer `prefix` ("blk.N.") uploaded (matrices in dtype).
DevGemmaAttention UploadGemmaAttention(const GemmaAttentionWeights& a, const std::string& prefix, DType dtype,
                                       std::int64_t n_embd);

struct DevPerLayerGate {
  DevMatrix inp_gate, proj;  // [width, E], [E, width]
  DevBuf post_norm;          // [E]
};
DevPerLayerGate UploadPerLayerGate(const PerLayerGateWeights& w, const std::string& prefix, DType dtype,
                                   std::int64_t n_embd);

// Throws kvshare::Error when `plan` makes a layer below plan.first_shared
// compute its own K/V but attention[l] has no K (the file shares that
// layer's KV), naming the smallest valid number of shared layers.
void RequireKvWeights(const ModelConfig& config, const LayerPlan& plan,
                      std::span<const DevGemmaAttention* const> attention);

class CudaGemmaState : public CudaDecoderState {
 public:
  using CudaDecoderState::CudaDecoderState;
  DevBuf ple, ple_tok;                // [T, n_layer * width]: per-layer inputs, their token part
  std::vector<std::int32_t> ple_ids;  // [T]: the step's per-layer ids (EmbedStep; Gemma 3n)
  std::vector<float> ple_tok_host;    // [T, n_layer * width]
};

class CudaGemmaDecoder : public CudaDecoder {
 protected:
  // ple: the CPU model's per-layer embeddings (width 0: none); their
  // projection goes to the device, the token table stays on the host.
  CudaGemmaDecoder(std::unique_ptr<Model> cpu, const CudaModelOptions& options, const PerLayerEmbeddings& ple);

  // out[S, E] = the attention block of layer l over the normed rows h
  // (GemmaAttentionBlock), q / k / v / attn in st's buffers (grown by the
  // caller to S rows of the widest layer). out may not alias h.
  void AttentionBlock(CudaDecoderState& st, const DevGemmaAttention& w, int l, bool owns, const float* h,
                      std::int64_t S, float* out) const;
  // st.ple = the step's per-layer inputs (PerLayerEmbeddings::Compute) from
  // st.x (the step's input rows, EmbedStep) and ids [T] (the family's: the
  // step's tokens, or Gemma 3n's ids with hard tokens at 0; a span's
  // tokens are 0).
  void PerLayerInputs(CudaGemmaState& st, std::span<const std::int32_t> ids) const;
  // out[S, E] = RMSNorm(proj(gelu_tanh(inp_gate in) * ple[src, l]), post_norm)
  // for S rows of in (src: st.src_dev); st.g, st.u hold S rows of the width.
  void PerLayerGate(CudaGemmaState& st, const DevPerLayerGate& w, int l, const float* in, std::int64_t S,
                    float* out) const;

  const PerLayerEmbeddings& ple_;
  DevMatrix ple_proj_;  // per_layer_model_proj [n_layer * width, E]
  DevBuf ple_proj_norm_;
};

}  // namespace kvshare::detail
