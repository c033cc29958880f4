// KvCache internals shared by kv_cache.cc and attend_layer.cc. Internal header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cache/device_bytes.h"
#include "cache/kv_geometry.h"
#include "common/str.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace detail {

struct KvSlot {
  int layer = 0;
  KvGeometry geometry;
  DeviceBytes k, v;                 // [max_batch, N_kv, C, H] or [max_batch, C, N_kv*H], zero-filled, on options.device
  std::uint64_t written_epoch = 0;  // reserve epoch of the last successful write by the owning layer
};

struct KvRowState {
  std::int64_t length = 0;       // committed positions [0, length)
  std::int64_t reserved = 0;     // uncommitted n_new
  std::int64_t written_end = 0;  // highest position written + 1 since the row last restarted at 0
};

}  // namespace detail

struct KvCache::Impl {
  ModelKvSpec spec;
  KvCacheOptions options;
  LayerPlan plan;
  std::vector<detail::KvSlot> slots;
  std::vector<detail::KvRowState> rows;
  std::vector<std::int64_t> write_indices;  // [max_batch]
  std::vector<std::int64_t> nonpad;         // [max_batch]
  // Bumped by every Reserve of n_new > 0: a shared layer may read its source's
  // slot only once the source has written at the current epoch.
  std::uint64_t reserve_epoch = 0;

  void CheckRow(int row, const char* fn) const {
    if (row < 0 || row >= options.max_batch) {
      throw Error(
          detail::Str("KvCache::", fn, ": row ", row, " is out of range [0, max_batch = ", options.max_batch, ")"));
    }
  }
  void Sync(int row) {
    const detail::KvRowState& r = rows[static_cast<std::size_t>(row)];
    write_indices[static_cast<std::size_t>(row)] = r.length;
    nonpad[static_cast<std::size_t>(row)] = r.length + r.reserved;
  }
  // Positions < LostBelow(slot, row) have been overwritten in the slot's ring.
  std::int64_t LostBelow(const detail::KvSlot& s, int row) const {
    if (!s.geometry.ring) return 0;
    return std::max<std::int64_t>(0, rows[static_cast<std::size_t>(row)].written_end - s.geometry.capacity);
  }
  int Window(const detail::KvSlot& s) const { return spec.layers[static_cast<std::size_t>(s.layer)].window; }
  bool AnyReserved() const {
    for (const auto& r : rows)
      if (r.reserved > 0) return true;
    return false;
  }
};

}  // namespace kvshare
