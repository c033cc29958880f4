// KvCache: per-owning-layer buffers, per-row lengths and reservations, ring
// eviction bookkeeping for exact rewind checks.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cache/kv_cache_impl.h"
#include "cache/kv_geometry.h"
#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare {

using detail::Str;

KvCache::KvCache(const ModelKvSpec& spec, const KvCacheOptions& options) : impl_(std::make_unique<Impl>()) {
  detail::ValidateKvCacheOptions(options);
  impl_->plan = BuildLayerPlan(spec);
  detail::ValidateKvDtypeForSpec(spec, options);
  impl_->spec = spec;
  impl_->options = options;
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    if (!impl_->plan.layers[i].owns_cache) continue;
    detail::KvSlot s;
    s.layer = static_cast<int>(i);
    s.geometry = detail::LayerGeometry(spec.layers[i], options);
    const std::size_t half = detail::KvBytes(spec.layers[i], s.geometry.capacity, options) / 2;
    s.k = detail::DeviceBytes(options.device, half);
    s.v = detail::DeviceBytes(options.device, half);
    impl_->slots.push_back(std::move(s));
  }
  const auto B = static_cast<std::size_t>(options.max_batch);
  impl_->rows.assign(B, detail::KvRowState{});
  impl_->write_indices.assign(B, 0);
  impl_->nonpad.assign(B, 0);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

const ModelKvSpec& KvCache::Spec() const { return impl_->spec; }
const KvCacheOptions& KvCache::Options() const { return impl_->options; }
const LayerPlan& KvCache::Plan() const { return impl_->plan; }

std::int64_t KvCache::Reserve(int row, std::int64_t n_new) {
  Impl& m = *impl_;
  m.CheckRow(row, "Reserve");
  detail::KvRowState& r = m.rows[static_cast<std::size_t>(row)];
  if (n_new < 0) throw Error(Str("KvCache::Reserve: row ", row, ": n_new must be >= 0, got ", n_new));
  if (n_new > m.options.max_step) {
    throw Error(Str("KvCache::Reserve: row ", row, ": ", n_new, " new tokens exceed max_step ", m.options.max_step,
                    "; split the chunk or increase KvCacheOptions::max_step to at least ", n_new));
  }
  if (r.reserved > 0) {
    throw Error(Str("KvCache::Reserve: row ", row, " already has ", r.reserved,
                    " reserved tokens; call Commit(row) after the step (or Rewind(row, Length(row)) to drop them)"));
  }
  if (r.length + n_new > m.options.max_seq) {
    throw Error(Str("row ", row, ": ", r.length, " + ", n_new, " tokens exceed max_seq ", m.options.max_seq,
                    "; increase max_seq to at least ", r.length + n_new));
  }
  r.reserved = n_new;
  if (n_new > 0) ++m.reserve_epoch;
  // The op overwrites ring slots as soon as the step runs: account for it now.
  r.written_end = std::max(r.written_end, r.length + n_new);
  m.Sync(row);
  return r.length;
}

void KvCache::Commit(int row) {
  impl_->CheckRow(row, "Commit");
  detail::KvRowState& r = impl_->rows[static_cast<std::size_t>(row)];
  r.length += r.reserved;
  r.reserved = 0;
  impl_->Sync(row);
}

void KvCache::CommitAll() {
  for (int b = 0; b < impl_->options.max_batch; ++b) Commit(b);
}

void KvCache::Rewind(int row, std::int64_t length) {
  Impl& m = *impl_;
  m.CheckRow(row, "Rewind");
  detail::KvRowState& r = m.rows[static_cast<std::size_t>(row)];
  if (length < 0 || length > r.length) {
    throw Error(
        Str("KvCache::Rewind: row ", row, ": length ", length, " is out of range [0, Length(row) = ", r.length, "]"));
  }
  if (length > 0) {
    for (const detail::KvSlot& s : m.slots) {
      const std::int64_t lost = m.LostBelow(s, row);
      const int W = m.Window(s);
      const std::int64_t need_from = std::max<std::int64_t>(0, length - W + 1);
      if (need_from >= lost) continue;
      throw Error(Str("KvCache::Rewind: row ", row, " to length ", length, ": sliding layer ", s.layer, " (window ", W,
                      ") keeps a ring of ", s.geometry.capacity,
                      " positions (window + max_step - 1), and positions 0..", lost - 1,
                      " of this row are gone (overwritten); decoding on from length ", length, " needs positions ",
                      need_from, "..", length - 1, ". Rewind to 0 or to a length >= ", lost + W - 1,
                      ", or keep every position with KvCacheOptions{.exact_rewind = true} "
                      "(full-length buffers for sliding layers)"));
    }
  }
  r.length = length;
  r.reserved = 0;
  if (length == 0) r.written_end = 0;  // nothing before 0 is needed: the ring starts over
  m.Sync(row);
}

void KvCache::Reset(int row) {
  impl_->CheckRow(row, "Reset");
  impl_->rows[static_cast<std::size_t>(row)] = detail::KvRowState{};
  impl_->Sync(row);
}

void KvCache::CopyRow(int src, int dst) {
  Impl& m = *impl_;
  m.CheckRow(src, "CopyRow");
  m.CheckRow(dst, "CopyRow");
  if (src == dst) return;
  if (m.options.device != Device::kCpu) {
    throw Error("KvCache::CopyRow: rows can only be copied in a cache in host memory (device cpu)");
  }
  if (m.rows[static_cast<std::size_t>(src)].reserved > 0 || m.rows[static_cast<std::size_t>(dst)].reserved > 0) {
    throw Error(Str("KvCache::CopyRow: row ", src, " or ", dst, " has reserved tokens; commit the step first"));
  }
  // The row is the outermost dimension of both layouts: one contiguous block.
  const auto B = static_cast<std::size_t>(m.options.max_batch);
  for (detail::KvSlot& s : m.slots) {
    for (detail::DeviceBytes* buf : {&s.k, &s.v}) {
      const std::size_t row_bytes = buf->size() / B;
      std::memcpy(buf->data() + static_cast<std::size_t>(dst) * row_bytes,
                  buf->data() + static_cast<std::size_t>(src) * row_bytes, row_bytes);
    }
  }
  m.rows[static_cast<std::size_t>(dst)] = m.rows[static_cast<std::size_t>(src)];
  m.Sync(dst);
}

std::int64_t KvCache::Length(int row) const {
  impl_->CheckRow(row, "Length");
  return impl_->rows[static_cast<std::size_t>(row)].length;
}

std::int64_t KvCache::Reserved(int row) const {
  impl_->CheckRow(row, "Reserved");
  return impl_->rows[static_cast<std::size_t>(row)].reserved;
}

std::int64_t KvCache::OldestRewindLength(int row) const {
  impl_->CheckRow(row, "OldestRewindLength");
  std::int64_t oldest = 1;
  for (const detail::KvSlot& s : impl_->slots) {
    const std::int64_t lost = impl_->LostBelow(s, row);
    if (lost > 0) oldest = std::max(oldest, lost + impl_->Window(s) - 1);
  }
  return oldest;
}

ConstTensorView KvCache::WriteIndices() const {
  return ConstTensorView{impl_->write_indices.data(), DType::kInt64, Shape{impl_->options.max_batch}};
}

ConstTensorView KvCache::NonpadKvSeqlen() const {
  return ConstTensorView{impl_->nonpad.data(), DType::kInt64, Shape{impl_->options.max_batch}};
}

LayerKvView KvCache::Layer(int layer, int batch) {
  Impl& m = *impl_;
  const int L = static_cast<int>(m.spec.layers.size());
  if (layer < 0 || layer >= L) throw Error(Str("KvCache::Layer: layer ", layer, " is out of range [0, ", L, ")"));
  if (batch == 0) batch = m.options.max_batch;
  if (batch < 0 || batch > m.options.max_batch) {
    throw Error(Str("KvCache::Layer: batch ", batch, " is out of range [1, max_batch = ", m.options.max_batch, "]"));
  }
  const LayerPlanEntry& e = m.plan.layers[static_cast<std::size_t>(layer)];
  detail::KvSlot& s = m.slots[static_cast<std::size_t>(e.cache_slot)];
  const LayerSpec& l = m.spec.layers[static_cast<std::size_t>(s.layer)];
  const std::int64_t C = s.geometry.capacity;
  const Shape shape = m.options.layout == KvLayout::kBnsh
                          ? Shape{batch, l.kv_heads, C, l.head_size}
                          : Shape{batch, C, static_cast<std::int64_t>(l.kv_heads) * l.head_size};
  LayerKvView v;
  v.layer = layer;
  v.source_layer = e.source_layer;
  v.shared = !e.owns_cache;
  v.key = TensorView{s.k.data(), m.options.dtype, shape};
  v.value = TensorView{s.v.data(), m.options.dtype, shape};
  v.write_indices = ConstTensorView{m.write_indices.data(), DType::kInt64, Shape{batch}};
  v.nonpad_kv_seqlen = ConstTensorView{m.nonpad.data(), DType::kInt64, Shape{batch}};
  v.scatter_mode = s.geometry.ring ? GqaAttributes::ScatterMode::kCircular : GqaAttributes::ScatterMode::kLinear;
  v.window = m.spec.layers[static_cast<std::size_t>(layer)].type == AttentionType::kSliding
                 ? m.spec.layers[static_cast<std::size_t>(layer)].window
                 : -1;
  v.capacity = C;
  return v;
}

KvMemoryReport KvCache::Memory() const { return EstimateKvMemory(impl_->spec, impl_->options); }

}  // namespace kvshare
