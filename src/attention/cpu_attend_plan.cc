#include "attention/cpu_attend_plan.h"

#include <algorithm>

namespace kvshare::detail {

int DefaultKvBlock(int head_size) {
  const int h = std::max(head_size, 1);
  return std::clamp(32768 / h, 32, 256);
}

AttendPlan BuildAttendPlan(const AttendParams& p) {
  AttendPlan plan;
  plan.group = p.num_heads / p.kv_heads;
  plan.block = p.kv_block_size > 0 ? p.kv_block_size : p.bf16_tiles ? kBf16TilesBlock : DefaultKvBlock(p.head_size);
  plan.q_tile = std::max(1, (p.bf16_tiles ? kMaxTileRowsBf16 : kMaxTileRows) / plan.group);
  // Split-KV at absolute key positions that are multiples of split_len, for
  // every tile whatever S: a query's splits (and so its result) depend only on
  // its own visible keys, not on the queries it shares a call or a tile with.
  const std::int64_t split_len = (static_cast<std::int64_t>(kSplitKeys) + plan.block - 1) / plan.block * plan.block;
  const std::int64_t H = p.head_size;

  for (int b = 0; b < p.batch; ++b) {
    const int vq = static_cast<int>(std::clamp<std::int64_t>(p.valid_q[b], 0, p.q_len));
    for (int n = 0; n < p.kv_heads; ++n) {
      for (int s0 = 0; s0 < vq; s0 += plan.q_tile) {
        AttendTile t;
        t.b = b;
        t.n = n;
        t.s0 = s0;
        t.s1 = std::min(vq, s0 + plan.q_tile);
        t.keys = {0, -1};
        bool any = false;
        for (int s = t.s0; s < t.s1; ++s) {
          const KeyRange r = VisibleKeys(p, b, s);
          if (r.Empty()) continue;
          t.keys.lo = any ? std::min(t.keys.lo, r.lo) : r.lo;
          t.keys.hi = any ? std::max(t.keys.hi, r.hi) : r.hi;
          any = true;
        }
        const int tile_index = static_cast<int>(plan.tiles.size());
        t.first_split = static_cast<int>(plan.splits.size());
        const std::int64_t first = t.keys.Empty() ? 0 : t.keys.lo / split_len;
        const std::int64_t ns = t.keys.Empty() ? 1 : t.keys.hi / split_len - first + 1;
        t.num_splits = static_cast<int>(ns);
        const std::int64_t rows = static_cast<std::int64_t>(t.s1 - t.s0) * plan.group;
        for (std::int64_t i = 0; i < ns; ++i) {
          AttendSplit sp;
          sp.tile = tile_index;
          if (t.keys.Empty()) {
            sp.j0 = sp.j1 = 0;
          } else {
            sp.j0 = std::max(t.keys.lo, (first + i) * split_len);
            sp.j1 = std::min(t.keys.hi + 1, (first + i + 1) * split_len);
          }
          if (ns > 1) {
            sp.part_offset = plan.partial_floats;
            plan.partial_floats += rows * (H + 2);
          }
          plan.splits.push_back(sp);
        }
        plan.tiles.push_back(t);
      }
    }
  }
  return plan;
}

}  // namespace kvshare::detail
