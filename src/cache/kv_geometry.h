// Capacity policy shared by the cache and its memory report. Internal header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvshare/cache/kv_cache.h"

namespace kvshare::detail {

struct KvGeometry {
  std::int64_t capacity = 0;  // C positions per row
  bool ring = false;          // circular scatter (sliding layers only)
};

// Throws kvshare::Error on bad options (what to change in the message).
void ValidateKvCacheOptions(const KvCacheOptions& options);

// Throws kvshare::Error when the dtype does not fit a layer of the spec
// (q8_0 needs every head_size to be a multiple of 32).
void ValidateKvDtypeForSpec(const ModelKvSpec& spec, const KvCacheOptions& options);

// Sliding layers: a ring of W + max_step - 1 positions unless exact_rewind is
// set or the ring would not be smaller than max_seq; otherwise max_seq.
KvGeometry LayerGeometry(const LayerSpec& layer, const KvCacheOptions& options);

// Bytes of K + V for one layer at `capacity` positions.
std::size_t KvBytes(const LayerSpec& layer, std::int64_t capacity, const KvCacheOptions& options);

}  // namespace kvshare::detail
