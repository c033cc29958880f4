// Work decomposition of the blocked attention kernel (cpu_attend.cc): query
// tiles per (row, KV head) and a fixed split-KV.
//
// Everything here depends only on the problem (AttendParams), never on the
// thread count, so the kernel's results are bitwise identical for any pool.
// Splits (and the kernel's KV blocks) sit at absolute key positions, multiples
// of their length, so one query's result does not depend on the other queries
// of its call either: a prompt run in chunks of any size, or a decode row
// sharing a batched step with prefill rows, gives bitwise the same output as
// the same query run alone (exact prompt caching and batching).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/attend.h"

namespace kvshare::detail {

// Queries [s0, s1) of row b times the G query heads of KV head n. Row r of a
// tile is query s0 + r / G, head n * G + r % G.
struct AttendTile {
  int b = 0;
  int n = 0;
  int s0 = 0;
  int s1 = 0;
  KeyRange keys;        // union of the rows' visible ranges
  int first_split = 0;  // index into AttendPlan::splits
  int num_splits = 0;
};

// Keys [j0, j1) of a tile. With num_splits > 1 the partial state (m[rows],
// l[rows], acc[rows * H]) goes to partial + part_offset and is combined in
// split order.
struct AttendSplit {
  int tile = 0;
  std::int64_t j0 = 0;
  std::int64_t j1 = 0;
  std::int64_t part_offset = -1;
};

struct AttendPlan {
  int block = 0;   // keys per block
  int q_tile = 0;  // queries per tile
  int group = 0;   // G = N / N_kv
  std::vector<AttendTile> tiles;
  std::vector<AttendSplit> splits;
  std::int64_t partial_floats = 0;
};

// Block length when p.kv_block_size == 0: about 128 KiB of fp32 keys (L2).
int DefaultKvBlock(int head_size);

// Builds the plan. kMaxTileRows query-head rows per tile; every tile's keys
// are split at the multiples of split_len (kSplitKeys rounded up to the block
// length), so a tile spanning several such chunks has several splits.
AttendPlan BuildAttendPlan(const AttendParams& p);

inline constexpr int kMaxTileRows = 64;
// With the bf16 products on AMX tiles (AttendParams::bf16_tiles): each item
// rounds its keys and values to bf16 once per block, so more rows share it.
inline constexpr int kMaxTileRowsBf16 = 256;
// Their block length (each block's P V tiles are stored and added to the
// accumulators once): 256 measured best of 128 / 256 / 512 for 512 queries
// after 16384 keys (4 heads on 1 KV head, H = 256; f16 cache).
inline constexpr int kBf16TilesBlock = 256;
inline constexpr int kSplitKeys = 1024;

}  // namespace kvshare::detail
