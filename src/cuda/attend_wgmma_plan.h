// Host-side decisions of the Hopper prefill kernel (attend_wgmma_cuda.cu):
// which calls it takes, its tile shape, the split of the key axis, and the
// TMA tensor maps of K and V. Plain C++ without CUDA headers, so
// tests/cuda_wgmma_plan_test.cc checks it on any machine. Internal header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "attention/attend.h"

namespace kvshare::detail {

// A block: one producer warpgroup (a thread issuing the TMA loads) and two
// consumer warpgroups of 64 M-rows each (wgmma's M). At H 512 a warpgroup's
// 64 x 512 fp32 accumulators would not fit in its registers, so the two
// consumers take the same 64 rows and split the output dims (each computes
// the same scores); elsewhere they take 64 rows each.
struct WgmmaShape {
  int keys_per_tile = 0;  // KT: keys of a K / V tile (wgmma N of Q K^T)
  int dim_groups = 1;     // consumer warpgroups along the output dims (1 or 2)
  int rows = 0;           // M-rows (query, head pairs) per block: 128 / dim_groups
  int stages = 2;         // K / V tiles in flight
  int smem_bytes = 0;     // dynamic shared memory: Q, the stages, 2 * stages barriers, 1024 alignment slack
  // The overlapped loop (a tile's softmax beside the previous P V): not at
  // H 256, where its consumers spilled (136 bytes; nvcc 13.0 -Xptxas -v).
  bool overlap = true;
};

KVSHARE_HOST_DEVICE constexpr WgmmaShape WgmmaShapeFor(int H) {
  // Q [rows][H] + stages x (K, V) [KT][H], 16-bit: 160 KiB at H 128 and
  // 192 KiB at H 256 / 512, under Hopper's 227 KiB per block.
  WgmmaShape s;
  s.keys_per_tile = H == 128 ? 128 : H == 256 ? 64 : 32;
  s.dim_groups = H == 512 ? 2 : 1;
  s.rows = 128 / s.dim_groups;
  s.stages = 2;
  s.smem_bytes = s.rows * H * 2 + s.stages * 2 * s.keys_per_tile * H * 2 + 2 * s.stages * 8 + 1024;
  s.overlap = H != 256;
  return s;
}

// The most key splits of one call (kCudaMaxKeySplits of attend_cuda.h).
inline constexpr int kWgmmaMaxKeySplits = 64;

// M-rows (query s, head g of the KV head's group) of a call: S * G.
inline std::int64_t WgmmaMRows(const AttendParams& p) {
  return static_cast<std::int64_t>(p.q_len) * (p.num_heads / p.kv_heads);
}

// Key splits for a GPU of sm_count multiprocessors (one block each: the
// shared memory allows no second): enough blocks for two waves, splits of
// at least 4 tiles, at most kWgmmaMaxKeySplits. per_split: keys per split.
struct WgmmaSplit {
  int key_splits = 1;
  std::int64_t per_split = 1;
  int m_tiles = 0;  // blocks along the M-rows
};
inline WgmmaSplit WgmmaSplitFor(const AttendParams& p, std::int64_t max_kv_len, int sm_count) {
  const WgmmaShape shape = WgmmaShapeFor(p.head_size);
  WgmmaSplit s;
  s.m_tiles = static_cast<int>((WgmmaMRows(p) + shape.rows - 1) / shape.rows);
  const std::int64_t blocks = static_cast<std::int64_t>(p.batch) * p.kv_heads * s.m_tiles;
  const std::int64_t want = (2LL * sm_count + blocks - 1) / std::max<std::int64_t>(1, blocks);
  const std::int64_t by_keys =
      std::max<std::int64_t>(1, (max_kv_len + 4LL * shape.keys_per_tile - 1) / (4LL * shape.keys_per_tile));
  s.key_splits = static_cast<int>(std::clamp<std::int64_t>(std::min(want, by_keys), 1, kWgmmaMaxKeySplits));
  s.per_split = std::max<std::int64_t>(1, (max_kv_len + s.key_splits - 1) / s.key_splits);
  return s;
}

// A K or V source as a 4-D TMA tensor: dim 0 the head's H values, dims 1-3
// the key, KV-head and batch axes ordered by increasing stride (the layout
// the driver expects of a tensor; BNSH and BSNH caches order differently),
// axes of extent 1 last. Element (b, n, j, d) is box coordinate (d, and j, n,
// b at slots key, head, batch of dims 1-3). Boxes are 64 values (128 bytes,
// the 128-byte swizzle's row) by keys_per_tile keys.
struct KvTensorMapPlan {
  std::uint64_t dims[4] = {0, 0, 0, 0};
  std::uint64_t strides_bytes[3] = {0, 0, 0};  // of dims 1-3
  std::uint32_t box[4] = {0, 0, 0, 0};
  int slot_key = 0, slot_head = 1, slot_batch = 2;
};

// Fills *plan for source s (16-bit values) holding `keys` keys per (row, KV
// head); returns "" or why TMA cannot read s (then the kernel is not used).
inline std::string PlanKvTensorMap(const KvSource& s, int H, int kv_heads, int batch, std::int64_t keys, int kt,
                                   KvTensorMapPlan* plan) {
  if (s.ring_capacity > 0) return "a ring (circular) K/V source: TMA boxes cannot wrap";
  if (reinterpret_cast<std::uintptr_t>(s.data) % 16 != 0) return "K/V data not 16-byte aligned";
  if (H % 64 != 0) return "head size not a multiple of 64";
  struct Axis {
    std::uint64_t extent;
    std::int64_t stride;  // elements
    int which;            // 0 key, 1 head, 2 batch
  };
  Axis axes[3] = {{static_cast<std::uint64_t>(std::max<std::int64_t>(keys, 1)), s.row_stride, 0},
                  {static_cast<std::uint64_t>(kv_heads), s.head_stride, 1},
                  {static_cast<std::uint64_t>(batch), s.batch_stride, 2}};
  // Axes of extent 1 after the others (their stride is never used), the
  // rest by increasing stride; ties keep the key axis first.
  std::stable_sort(axes, axes + 3, [](const Axis& a, const Axis& b) {
    if ((a.extent == 1) != (b.extent == 1)) return b.extent == 1;
    return a.extent != 1 && a.stride < b.stride;
  });
  plan->dims[0] = static_cast<std::uint64_t>(H);
  plan->box[0] = 64;
  std::uint64_t packed = static_cast<std::uint64_t>(H) * 2;  // bytes spanned by the dims so far
  for (int i = 0; i < 3; ++i) {
    const Axis& a = axes[i];
    if (a.extent > (1ULL << 32)) return "a K/V axis longer than 2^32";
    std::uint64_t stride = static_cast<std::uint64_t>(a.stride) * 2;
    if (a.extent == 1) {
      stride = packed;  // never stepped: any valid stride
    } else if (a.stride <= 0) {
      return "a K/V stride of 0 or less over an axis longer than 1";
    }
    if (stride % 16 != 0) return "a K/V stride not a multiple of 16 bytes";
    if (stride >= (1ULL << 40)) return "a K/V stride of 2^40 bytes or more";
    plan->dims[i + 1] = a.extent;
    plan->strides_bytes[i] = stride;
    plan->box[i + 1] = a.which == 0 ? static_cast<std::uint32_t>(kt) : 1u;
    (a.which == 0 ? plan->slot_key : a.which == 1 ? plan->slot_head : plan->slot_batch) = i;
    packed = std::max(packed, stride * a.extent);
  }
  return "";
}

// Why the Hopper kernel does not take p on a device of compute capability
// cc_major.cc_minor ("" when it takes it): it needs sm_90 exactly (its code is
// sm_90a's), no output_qk, no bias, K and V both fp16 or both bf16, H 128 /
// 256 / 512, a prefill shape (S * G >= 64: decode stays on the other
// kernels), at least one tile of keys (max_kv_len >= keys_per_tile: a TMA
// box may not be longer than its tensor's axis, and the key axis spans
// max_kv_len) and K / V that TMA can read (PlanKvTensorMap).
inline std::string WgmmaRefusal(const AttendParams& p, std::int64_t max_kv_len, int cc_major, int cc_minor) {
  if (cc_major != 9 || cc_minor != 0) {
    return "device of compute capability " + std::to_string(cc_major) + "." + std::to_string(cc_minor) + ", not 9.0";
  }
  if (p.qk_mode != 0) return "output_qk requested";
  if (p.bias.data != nullptr) return "attention_bias given";
  if ((p.k.dtype != DType::kFloat16 && p.k.dtype != DType::kBFloat16) || p.v.dtype != p.k.dtype) {
    return "K/V not both fp16 or both bf16";
  }
  const int H = p.head_size;
  if (H != 128 && H != 256 && H != 512) return "head size " + std::to_string(H) + " (takes 128, 256, 512)";
  if (WgmmaMRows(p) < 64) return "decode shape (S * G < 64)";
  const int kt = WgmmaShapeFor(H).keys_per_tile;
  if (max_kv_len < kt) {
    return std::to_string(max_kv_len) + " keys, fewer than a tile of " + std::to_string(kt) + " (a TMA box)";
  }
  KvTensorMapPlan plan;
  for (const KvSource* s : {&p.k, &p.v}) {
    const std::string why = PlanKvTensorMap(*s, H, p.kv_heads, p.batch, max_kv_len, kt, &plan);
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace kvshare::detail
