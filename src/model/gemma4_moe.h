// Gemma 4 mixture-of-experts block (26B-A4B; docs/architecture.md §5,
// HF Gemma4TextRouter / Gemma4TextExperts). Internal to src/model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "quant/quant.h"

namespace kvshare::detail {

struct Gemma4Moe {
  int n_expert = 0;
  int n_used = 0;                          // top-k
  int n_ff = 0;                            // per expert
  WeightMatrix router;                     // ffn_gate_inp [n_expert, E] (F32 in converted files)
  const float* router_scale = nullptr;     // ffn_gate_inp.scale [E]
  const float* expert_scale = nullptr;     // ffn_down_exps.scale [n_expert]; null: 1
  std::vector<WeightMatrix> gate_up;       // per expert [2 n_ff, E], gate rows first (or empty)
  std::vector<WeightMatrix> gate, up;      // per expert [n_ff, E] when stored apart
  std::vector<WeightMatrix> down;          // per expert [E, n_ff]
  const float* pre_ffw_norm_2 = nullptr;   // [E] expert input norm
  const float* post_ffw_norm_1 = nullptr;  // [E] dense MLP output norm
  const float* post_ffw_norm_2 = nullptr;  // [E] expert sum norm
};

// The MoE tensors of layer `prefix` ("blk.N."); `arch` is "gemma4.". Throws
// kvshare::Error naming the missing or ill-shaped key or tensor.
Gemma4Moe LoadGemma4Moe(const TensorLookup& t, const std::string& prefix, const std::string& arch, std::int64_t E);

// Every expert's rows of a step, expert after expert: expert e's rows are
// token / weight [begin[e], begin[e + 1]), ascending; begin has n_expert + 1
// entries (BatchExpertRows).
struct ExpertBatches {
  std::vector<std::int64_t> token, begin;
  std::vector<float> weight;
};

struct MoeScratch {
  std::vector<float> router_in, logits, in, rows, gu, act, y;
  ExpertBatches batches;        // the rows routed to each expert
  std::vector<int> chosen;      // [S, n_used] expert ids
  std::vector<float> chosen_w;  // [S, n_used] their weights
};

// out[S, E] = RMSNorm(sum_k w_k expert_{e_k}(RMSNorm(h, pre_ffw_norm_2)), post_ffw_norm_2),
// h: [S, E] the pre-FFN residual. Routing: logits = router (rms_norm(h) / sqrt(E) *
// router_scale); softmax over all experts; the top n_used, renormalized to sum 1,
// each times expert_scale[e]. expert(x) = down(gelu_tanh(gate x) * up x).
// Experts are summed in expert-id order.
void RunGemma4Moe(const Gemma4Moe& m, const float* h, std::int64_t S, int E, float eps, float* out, MoeScratch& s,
                  ThreadPool* pool);

// RunGemma4Moe's routing, for any device that computes the router logits:
// logits [S, n_expert] (the router's output; overwritten by the softmax)
// become s.chosen / s.chosen_w [S, n_used] (expert ids by falling
// probability, lower id first on ties; weights renormalized over the top
// n_used, times expert_scale).
void RouteGemma4Moe(const Gemma4Moe& m, float* logits, std::int64_t S, MoeScratch& s);

// Every expert's rows at once (RunGemma4Moe's walk over the experts, and a
// device's one upload of a layer's routing), from s.chosen / s.chosen_w of S
// rows (RouteGemma4Moe); throws kvshare::Error naming an expert id outside
// [0, n_expert).
void BatchExpertRows(const Gemma4Moe& m, std::int64_t S, const MoeScratch& s, ExpertBatches& out);

}  // namespace kvshare::detail
