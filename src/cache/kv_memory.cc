// Capacity policy and memory accounting of the KV cache.
#include <cstdio>
#include <sstream>
#include <string>

#include "cache/kv_geometry.h"
#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace detail {

void ValidateKvCacheOptions(const KvCacheOptions& o) {
  auto fail = [](const std::string& m) { throw Error("KvCacheOptions: " + m); };
  if (o.max_batch < 1) fail(Str("max_batch must be >= 1, got ", o.max_batch));
  if (o.max_seq < 1) fail(Str("max_seq must be >= 1 (positions per row), got ", o.max_seq));
  if (o.max_step < 1) fail(Str("max_step must be >= 1 (most new tokens per row and step), got ", o.max_step));
  if (o.max_step > o.max_seq) {
    fail(Str("max_step ", o.max_step, " exceeds max_seq ", o.max_seq, "; lower max_step to at most ", o.max_seq));
  }
  if (!IsKvCacheDType(o.dtype)) {
    fail(Str("dtype must be float32, float16, bfloat16 or q8_0, got ", DTypeName(o.dtype)));
  }
}

void ValidateKvDtypeForSpec(const ModelKvSpec& spec, const KvCacheOptions& o) {
  if (o.dtype != DType::kQ8_0) return;
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    const int H = spec.layers[i].head_size;
    if (H % kQ8_0BlockSize != 0) {
      throw Error(Str("KvCacheOptions: dtype q8_0 stores blocks of ", kQ8_0BlockSize,
                      " values along the head dimension, "
                      "but layer ",
                      i, " has head_size ", H, ", not a multiple of ", kQ8_0BlockSize,
                      "; use float16 or bfloat16 for this model"));
    }
  }
}

KvGeometry LayerGeometry(const LayerSpec& l, const KvCacheOptions& o) {
  if (l.type == AttentionType::kSliding && !o.exact_rewind) {
    const std::int64_t ring = static_cast<std::int64_t>(l.window) + o.max_step - 1;
    if (ring < o.max_seq) return KvGeometry{ring, true};
  }
  return KvGeometry{o.max_seq, false};
}

std::size_t KvBytes(const LayerSpec& l, std::int64_t capacity, const KvCacheOptions& o) {
  return 2 * DTypeBytes(o.dtype, static_cast<std::int64_t>(o.max_batch) * l.kv_heads * l.head_size * capacity);
}

}  // namespace detail

namespace {

std::string Mb(std::size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

KvMemoryReport EstimateKvMemory(const ModelKvSpec& spec, const KvCacheOptions& options) {
  detail::ValidateKvCacheOptions(options);
  const LayerPlan plan = BuildLayerPlan(spec);
  detail::ValidateKvDtypeForSpec(spec, options);
  KvMemoryReport r;
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const LayerPlanEntry& e = plan.layers[i];
    const detail::KvGeometry own = detail::LayerGeometry(l, options);
    const detail::KvGeometry src =
        detail::LayerGeometry(spec.layers[static_cast<std::size_t>(e.source_layer)], options);
    LayerMemory m;
    m.layer = static_cast<int>(i);
    m.type = l.type;
    m.kv_heads = l.kv_heads;
    m.head_size = l.head_size;
    m.owns_cache = e.owns_cache;
    m.source_layer = e.source_layer;
    m.capacity = src.capacity;
    m.ring = src.ring;
    m.bytes_if_owned = detail::KvBytes(l, own.capacity, options);
    m.bytes_full_length = detail::KvBytes(l, options.max_seq, options);
    m.bytes = e.owns_cache ? m.bytes_if_owned : 0;
    r.total_bytes += m.bytes;
    r.bytes_without_sharing += m.bytes_if_owned;
    if (e.owns_cache) r.saved_by_rings += m.bytes_full_length - m.bytes;
    r.layers.push_back(m);
  }
  r.saved_by_sharing = r.bytes_without_sharing - r.total_bytes;
  return r;
}

std::string KvMemoryReport::ToString() const {
  std::ostringstream os;
  os << "layer  type     H    N_kv  kv source  positions  ring  bytes\n";
  for (const LayerMemory& m : layers) {
    char owner[24], line[160];
    if (m.owns_cache) {
      std::snprintf(owner, sizeof(owner), "own");
    } else {
      std::snprintf(owner, sizeof(owner), "layer %d", m.source_layer);
    }
    std::snprintf(line, sizeof(line), "%5d  %-7s  %-3d  %4d  %-9s  %9lld  %-4s  %zu\n", m.layer,
                  AttentionTypeName(m.type), m.head_size, m.kv_heads, owner, static_cast<long long>(m.capacity),
                  m.ring ? "yes" : "no", m.bytes);
    os << line;
  }
  const double pct = bytes_without_sharing == 0
                         ? 0.0
                         : 100.0 * static_cast<double>(saved_by_sharing) / static_cast<double>(bytes_without_sharing);
  char pct_s[32];
  std::snprintf(pct_s, sizeof(pct_s), "%.1f%%", pct);
  os << "total KV: " << total_bytes << " bytes (" << Mb(total_bytes) << ")\n"
     << "without sharing: " << bytes_without_sharing << " bytes (" << Mb(bytes_without_sharing) << ")\n"
     << "saved by sharing: " << saved_by_sharing << " bytes (" << Mb(saved_by_sharing) << ", " << pct_s << ")\n"
     << "saved by rings: " << saved_by_rings << " bytes (" << Mb(saved_by_rings) << ")\n";
  return os.str();
}

}  // namespace kvshare
