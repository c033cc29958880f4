#include "model/hyperparameters.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

namespace {

// The layer index of a "blk.<i>.<name>" tensor, or -1 for any other name.
long long LayerOf(std::string_view name) {
  constexpr std::string_view kBlk = "blk.";
  if (!name.starts_with(kBlk)) return -1;
  name.remove_prefix(kBlk.size());
  long long i = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), i);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '.') return -1;
  return i;
}

}  // namespace

void CheckLayerCount(const GgufFile& f, int n_layer, const std::string& a) {
  if (n_layer < 1) throw Error(Str(a, "block_count must be >= 1, got ", n_layer));
  long long last = -1;
  std::string last_name;
  for (const GgufTensor& t : f.tensors()) {
    const long long i = LayerOf(t.name);
    if (i > last) {
      last = i;
      last_name = t.name;
    }
  }
  if (last + 1 != n_layer) {
    throw Error(Str(a, "block_count = ", n_layer, ", but the file's layer tensors ",
                    last < 0 ? std::string("are missing (no blk.<i>.* tensor)")
                             : Str("end at layer ", last, " ('", last_name, "'): ", last + 1, " layers"),
                    "; the metadata and the tensors disagree (a damaged or hand-edited file?)"));
  }
}

void CheckScalarHyperparameters(const ModelConfig& c, const std::string& a) {
  const auto at_least = [&](const char* key, long long v, long long min) {
    if (v < min) throw Error(Str(a, key, " must be >= ", min, ", got ", v));
  };
  at_least("embedding_length", c.n_embd, 1);
  at_least("attention.head_count", c.n_head, 1);
  at_least("attention.sliding_window", c.sliding_window, 0);
  at_least("context_length", c.context_length, 1);
  if (!std::isfinite(c.rms_eps) || c.rms_eps < 0) {
    throw Error(Str(a, "attention.layer_norm_rms_epsilon must be finite and >= 0, got ", c.rms_eps));
  }
  for (const auto& [key, base] :
       {std::pair{"rope.freq_base", c.rope_base_full}, std::pair{"rope.freq_base_swa", c.rope_base_sliding}}) {
    if (!std::isfinite(base) || base <= 0) throw Error(Str(a, key, " must be finite and > 0, got ", base));
  }
}

void CheckKvHeadCount(const std::string& a, const std::string& key, int n_head_kv, int n_head) {
  if (n_head_kv < 1 || n_head % n_head_kv != 0) {
    throw Error(Str(a, key, " = ", n_head_kv, " must be >= 1 and divide attention.head_count = ", n_head));
  }
}

void CheckValueLength(const GgufFile& f, const std::string& a, const char* k_key, const char* v_key, int key_length) {
  const auto v_len = f.GetU32Opt(a + v_key);
  if (v_len && static_cast<std::int64_t>(*v_len) != key_length) {
    throw Error(Str(a, v_key, " = ", *v_len, " differs from ", k_key, " = ", key_length,
                    ": different K and V head sizes are not supported"));
  }
}

float ReadFinalLogitSoftcap(const GgufFile& f, const std::string& a) {
  const float cap = f.GetF32Or(a + "final_logit_softcapping", 0.0f);
  if (!std::isfinite(cap) || cap < 0) {
    throw Error(Str(a, "final_logit_softcapping must be finite and >= 0 (0: off), got ", cap));
  }
  return cap;
}

}  // namespace kvshare::detail
