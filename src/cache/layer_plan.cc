// Layer plan: which layers own a KV cache and which layer a KV-shared layer
// reads (HF Gemma 3n / Gemma 4 rule: the last non-shared layer of the same type).
#include <sstream>
#include <string>

#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace {

using detail::Str;

[[noreturn]] void Fail(const std::string& msg) { throw Error("BuildLayerPlan: " + msg); }

void CheckLayer(const LayerSpec& l, int i) {
  if (l.kv_heads <= 0) Fail(Str("layer ", i, ": kv_heads must be > 0, got ", l.kv_heads));
  if (l.head_size <= 0) Fail(Str("layer ", i, ": head_size must be > 0, got ", l.head_size));
  if (l.type == AttentionType::kSliding && l.window <= 0) {
    Fail(Str("layer ", i, ": a sliding layer needs window > 0, got ", l.window,
             " (use AttentionType::kFull for global attention)"));
  }
}

}  // namespace

const char* AttentionTypeName(AttentionType type) { return type == AttentionType::kSliding ? "sliding" : "full"; }

std::string LayerPlan::ToString() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerPlanEntry& e = layers[i];
    os << "layer " << i << ": ";
    if (e.owns_cache) {
      os << "owns cache slot " << e.cache_slot;
    } else {
      os << "shared, reads layer " << e.source_layer << " (slot " << e.cache_slot << ")";
    }
    os << "\n";
  }
  return os.str();
}

LayerPlan BuildLayerPlan(const ModelKvSpec& spec) {
  const int L = static_cast<int>(spec.layers.size());
  const int n = spec.num_kv_shared_layers;
  if (L == 0) Fail("the model has no layers");
  if (n < 0) Fail(Str("num_kv_shared_layers must be >= 0 (0 means no sharing), got ", n));
  if (n >= L) {
    Fail(Str("num_kv_shared_layers = ", n, " must be < the number of layers ", L,
             ": at least one layer has to own a KV cache"));
  }
  for (int i = 0; i < L; ++i) CheckLayer(spec.layers[static_cast<std::size_t>(i)], i);

  LayerPlan plan;
  plan.first_shared = L - n;  // n == 0: no layer is shared (no `[:-0]` trap)
  plan.layers.resize(static_cast<std::size_t>(L));
  for (int i = 0; i < plan.first_shared; ++i) {
    LayerPlanEntry& e = plan.layers[static_cast<std::size_t>(i)];
    e.owns_cache = true;
    e.source_layer = i;
    e.cache_slot = plan.num_slots++;
  }
  for (int i = plan.first_shared; i < L; ++i) {
    const LayerSpec& l = spec.layers[static_cast<std::size_t>(i)];
    int src = -1;
    for (int j = plan.first_shared - 1; j >= 0; --j) {
      if (spec.layers[static_cast<std::size_t>(j)].type == l.type) {
        src = j;
        break;
      }
    }
    const char* type = AttentionTypeName(l.type);
    if (src < 0) {
      Fail(Str("layer ", i, " (", type, ") is KV-shared (num_kv_shared_layers = ", n, " of ", L, " layers: layers ",
               plan.first_shared, "..", L - 1, ") but no non-shared ", type, " layer precedes layer ",
               plan.first_shared, " to read K/V from; lower num_kv_shared_layers or fix the layer types"));
    }
    const LayerSpec& s = spec.layers[static_cast<std::size_t>(src)];
    auto mismatch = [&](const char* what, auto mine, auto theirs) {
      Fail(Str("layer ", i, " (", type, ", KV-shared) reads layer ", src, " but its ", what, " ", mine,
               " differs from layer ", src, "'s ", theirs, "; a shared layer must have its source's ", what));
    };
    if (l.kv_heads != s.kv_heads) mismatch("kv_heads", l.kv_heads, s.kv_heads);
    if (l.head_size != s.head_size) mismatch("head_size", l.head_size, s.head_size);
    if (l.type == AttentionType::kSliding && l.window != s.window) mismatch("window", l.window, s.window);
    if (l.rope_base != s.rope_base) mismatch("rope_base", l.rope_base, s.rope_base);
    LayerPlanEntry& e = plan.layers[static_cast<std::size_t>(i)];
    e.owns_cache = false;
    e.source_layer = src;
    e.cache_slot = plan.layers[static_cast<std::size_t>(src)].cache_slot;
  }
  return plan;
}

}  // namespace kvshare
