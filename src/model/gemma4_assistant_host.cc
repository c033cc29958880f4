// Gemma 4's assistant on the host, for every device (gemma4_assistant_host.h).
#include "model/gemma4_assistant_host.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

std::int64_t CheckAssistantStep(const AssistantConfig& cfg, const AssistantStepArgs& a) {
  if (a.target == nullptr || a.target_state == nullptr) throw Error("assistant step: no target model or state given");
  const std::int64_t p = a.target_state->length(a.row);
  if (p < 1) throw Error(Str("assistant step: row ", a.row, " has no cached token to draft from (length 0)"));
  if (static_cast<std::int64_t>(a.hidden.size()) != cfg.n_embd_backbone) {
    throw Error(
        Str("assistant step: the hidden state has ", a.hidden.size(), " values, expected ", cfg.n_embd_backbone));
  }
  return p;
}

void AssistantInputRow(const AssistantConfig& cfg, const AssistantStepArgs& a, std::vector<float>& in) {
  const std::int64_t Eb = cfg.n_embd_backbone;
  in.resize(static_cast<std::size_t>(2 * Eb));
  a.target->EmbedTokens(std::span<const std::int32_t>(&a.token, 1), in.data());
  std::copy(a.hidden.begin(), a.hidden.end(), in.begin() + Eb);
}

const std::vector<AssistantLayerSource>& AssistantSourcesCache::For(const AssistantModel& assistant,
                                                                    const Model& target, const LayerPlan& plan) {
  if (model != &target || first_shared != plan.first_shared) {
    sources = assistant.Sources(target, plan);
    model = &target;
    first_shared = plan.first_shared;
  }
  return sources;
}

std::int64_t AssistantRopeCapacity(std::int64_t have, std::int64_t need) {
  return std::max<std::int64_t>(need, have > 0 ? 2 * have : 4096);
}

void AssistantAttend(const AssistantConfig& cfg, const ModelState& target_state, const AssistantAttendArgs& a) {
  const std::size_t ls = static_cast<std::size_t>(a.layer);
  const std::int64_t qd = static_cast<std::int64_t>(cfg.n_head) * cfg.layer_head_dim[ls];
  const int B = a.row + 1;
  const auto r = static_cast<std::size_t>(a.row);
  std::vector<std::int64_t> write_at(static_cast<std::size_t>(B), 0);  // other rows: no query (padding)
  std::vector<std::int64_t> nonpad(static_cast<std::size_t>(B), 0);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(B), 0);
  write_at[r] = a.p - 1;
  nonpad[r] = a.p;
  pos[r] = a.p;
  // The op binds the cache as present_key / present_value but writes nothing
  // in the read-only form (kvshare/attention/gqa.h).
  KvCache& cache = const_cast<KvCache&>(target_state.kv_cache());
  const LayerKvView view = cache.Layer(a.src->target_layer, B);
  const bool sliding = a.src->type == AttentionType::kSliding;
  GqaAttributes attrs;
  attrs.num_heads = cfg.n_head;
  attrs.kv_num_heads = cfg.layer_n_head_kv[ls];
  attrs.scale = 1.0f;
  attrs.local_window_size = sliding ? cfg.sliding_window + 1 : -1;
  attrs.do_rotary = 1;
  attrs.scatter_mode = view.scatter_mode;
  GqaInputs in;
  in.query = ConstTensorView{a.query, DType::kFloat32, {B, 1, qd}};
  in.cos_cache = ConstTensorView{a.cos, DType::kFloat32, {a.rope_pos, a.rope_half}};
  in.sin_cache = ConstTensorView{a.sin, DType::kFloat32, {a.rope_pos, a.rope_half}};
  in.position_ids = ConstTensorView{pos.data(), DType::kInt64, {B, 1}};
  in.write_indices = ConstTensorView{write_at.data(), DType::kInt64, {B}};
  in.nonpad_kv_seqlen = ConstTensorView{nonpad.data(), DType::kInt64, {B}};
  GqaOutputs out;
  out.output = TensorView{a.output, DType::kFloat32, {B, 1, qd}};
  out.present_key = view.key;
  out.present_value = view.value;
  try {
    GroupQueryAttention(attrs, in, out, a.run);
  } catch (const Error& e) {
    throw Error(
        Str("assistant layer ", a.layer, " reading target layer ", a.src->target_layer, ": ", e.what(),
            sliding ? " (it reads the last sliding_window + 1 keys: give the target state max_step >= 2)" : ""));
  }
}

std::vector<std::int32_t> CentroidTokens(const AssistantConfig& cfg, std::span<const float> centroid_logits,
                                         std::span<const std::int32_t> ordering) {
  const int C = cfg.num_centroids, K = cfg.n_vocab / C;
  std::vector<int> order(static_cast<std::size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + cfg.centroid_top_k, order.end(), [&](int x, int y) {
    const float a = centroid_logits[static_cast<std::size_t>(x)], b = centroid_logits[static_cast<std::size_t>(y)];
    return a > b || (a == b && x < y);
  });
  std::vector<std::int32_t> chosen;
  chosen.reserve(static_cast<std::size_t>(cfg.centroid_top_k * K));
  for (int k = 0; k < cfg.centroid_top_k; ++k) {
    const int c = order[static_cast<std::size_t>(k)];
    for (int j = 0; j < K; ++j) chosen.push_back(ordering[static_cast<std::size_t>(c * K + j)]);
  }
  return chosen;
}

void MaskUnchosen(std::span<const std::int32_t> chosen, std::span<float> logits) {
  float lowest = INFINITY;
  std::vector<bool> keep(logits.size(), false);
  for (const std::int32_t id : chosen) {
    lowest = std::min(lowest, logits[static_cast<std::size_t>(id)]);
    keep[static_cast<std::size_t>(id)] = true;
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (!keep[i]) logits[i] = lowest - 1.0f;
  }
}

}  // namespace kvshare::detail
