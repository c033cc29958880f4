// AttendLayer: one attention layer run through the cache with the GQA op's
// static scatter mode (owning layers write, shared layers only read).
#include <string>
#include <vector>

#include "cache/kv_cache_impl.h"
#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare {

using detail::Str;

void AttendLayer(KvCache& cache, int layer, const LayerAttendArgs& a) {
  const int L = static_cast<int>(cache.Spec().layers.size());
  if (layer < 0 || layer >= L) throw Error(Str("AttendLayer: layer ", layer, " is out of range [0, ", L, ")"));
  const LayerSpec& spec = cache.Spec().layers[static_cast<std::size_t>(layer)];
  const KvCacheOptions& opt = cache.Options();
  auto fail = [&](const std::string& msg) { throw Error(Str("AttendLayer: layer ", layer, ": ", msg)); };

  const Shape& qs = a.query.shape;
  if (qs.rank != 3) fail(Str("query must be (B, S, num_heads * head_size), got ", qs.ToString()));
  const std::int64_t B = qs[0], S = qs[1];
  if (B < 1 || B > opt.max_batch) fail(Str("query batch ", B, " is out of range [1, max_batch = ", opt.max_batch, "]"));
  if (S > opt.max_step) {
    fail(Str("query length S = ", S, " exceeds max_step ", opt.max_step,
             " (rings hold window + max_step - 1 positions); split the step or increase max_step"));
  }
  const std::int64_t want_d = static_cast<std::int64_t>(a.attrs.num_heads) * spec.head_size;
  if (a.attrs.num_heads <= 0 || qs[2] != want_d) {
    fail(Str("query last dim ", qs[2], " must be num_heads (", a.attrs.num_heads, ") * head_size (", spec.head_size,
             ") = ", want_d));
  }
  const std::span<const std::int64_t> offs = a.query_offsets;
  if (!offs.empty()) {
    if (cache.Plan().layers[static_cast<std::size_t>(layer)].owns_cache) {
      fail("query_offsets are for KV-shared layers only (an owning layer writes every reserved row)");
    }
    if (static_cast<std::int64_t>(offs.size()) != B)
      fail(Str("query_offsets has ", offs.size(), " values, expected B = ", B));
    for (int b = 0; b < B; ++b) {
      if (offs[b] < 0 || offs[b] > cache.Reserved(b)) {
        fail(Str("query_offsets[", b, "] = ", offs[b], " is out of range [0, ", cache.Reserved(b),
                 "] (the row's reserved tokens)"));
      }
    }
  }
  for (int b = 0; b < opt.max_batch; ++b) {
    const std::int64_t r = cache.Reserved(b) - (offs.empty() || b >= B ? 0 : offs[b]);
    if (b >= B && r > 0) {
      fail(Str("row ", b, " has ", r, " reserved tokens but the query batch is ", B,
               "; pass every reserved row (padding rows reserve 0)"));
    }
    if (b < B && r > S) fail(Str("row ", b, " reserved ", r, " tokens but the query length S is ", S));
  }

  const LayerKvView view = cache.Layer(layer, static_cast<int>(B));
  GqaAttributes attrs = a.attrs;
  if (attrs.kv_num_heads == 0) attrs.kv_num_heads = spec.kv_heads;
  if (attrs.kv_num_heads != spec.kv_heads) {
    fail(Str("attrs.kv_num_heads ", attrs.kv_num_heads, " differs from the layer's kv_heads ", spec.kv_heads,
             " (leave it 0 to take the layer's)"));
  }
  if (attrs.local_window_size != -1 && attrs.local_window_size != view.window) {
    fail(Str("attrs.local_window_size ", attrs.local_window_size, " differs from the layer's ", view.window,
             " (leave it -1 to take the layer's)"));
  }
  attrs.local_window_size = view.window;
  attrs.scatter_mode = view.scatter_mode;

  GqaInputs in;
  in.query = a.query;
  KvCache::Impl& impl = *cache.impl_;
  detail::KvSlot& slot =
      impl.slots[static_cast<std::size_t>(cache.Plan().layers[static_cast<std::size_t>(layer)].cache_slot)];
  if (view.shared) {
    if (a.key || a.value) {
      fail(Str("is KV-shared (reads layer ", view.source_layer, "'s cache) and never writes: pass no key/value"));
    }
    if (impl.AnyReserved() && slot.written_epoch != impl.reserve_epoch) {
      fail(Str("is KV-shared and reads layer ", view.source_layer, "'s cache, but layer ", view.source_layer,
               " has not written the tokens reserved in this step yet; run layer ", view.source_layer, " first"));
    }
  } else {
    if (!a.key || !a.value) fail("owns its cache: key and value (B, S, kv_heads * head_size) are required");
    in.key = a.key;
    in.value = a.value;
  }
  in.cos_cache = a.cos_cache;
  in.sin_cache = a.sin_cache;
  in.head_sink = a.head_sink;
  in.bidirectional_spans = a.bidirectional_spans;
  std::vector<std::int64_t> shifted;  // write indices + query_offsets
  in.write_indices = view.write_indices;
  if (!offs.empty()) {
    const auto* w = static_cast<const std::int64_t*>(view.write_indices.data);
    for (int b = 0; b < B; ++b) shifted.push_back(w[b] + offs[b]);
    in.write_indices = ConstTensorView{shifted.data(), DType::kInt64, {B}};
  }
  in.nonpad_kv_seqlen = view.nonpad_kv_seqlen;

  GqaOutputs out;
  out.output = a.output;
  out.present_key = view.key;
  out.present_value = view.value;
  if (a.run.device != impl.options.device) {
    fail(Str("the cache lives on ", DeviceName(impl.options.device), " but the op was asked to run on ",
             DeviceName(a.run.device), " (set LayerAttendArgs::run.device to the cache's device)"));
  }
  try {
    GroupQueryAttention(attrs, in, out, a.run);
  } catch (const Error& e) {
    fail(e.what());
  }
  if (!view.shared) slot.written_epoch = impl.reserve_epoch;
}

}  // namespace kvshare
