// Packing and work split of the bf16 tile products (bf16_tiles.h); the tile
// loops are in kernels/amx/bf16_tiles.cc.
#include "quant/bf16_tiles.h"

#include <algorithm>

#include "common/cpu_amx.h"
#include "common/float_convert.h"
#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {

namespace {

constexpr std::int64_t RoundUp(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// Activation rows per task: a task's staged rows (up to 128 x K bf16) stay in
// L2 while its weight blocks stream past them.
constexpr std::int64_t kTaskRows = 128;

}  // namespace

bool AmxBf16Usable() { return AmxBf16Allowed(); }

AmxBf16Weights::AmxBf16Weights(const WeightMatrix& w, ThreadPool* pool) {
  if (!AmxBf16Usable()) {
    throw Error(Str("bf16 tile matrix [", w.rows, ", ", w.cols, "]: this process has no usable AMX-BF16 tiles (",
                    AmxBf16UnusableReason(), ")"));
  }
  n_ = w.rows;
  k_ = w.cols;
  kp_ = RoundUp(std::max<std::int64_t>(k_, 1), 32);
  blocks_ = RoundUp(RoundUp(n_, 16) / 16, 2);
  const std::int64_t steps = kp_ / 32;
  packed_.assign(static_cast<std::size_t>(blocks_ * steps * 512), 0);
  ParallelFor(pool, RoundUp(n_, 16) / 16, [&](std::int64_t b) {
    std::vector<float> row(static_cast<std::size_t>(k_));
    for (std::int64_t j = 0; j < 16 && 16 * b + j < n_; ++j) {
      DequantizeRow(w.type, static_cast<const std::uint8_t*>(w.data) + (16 * b + j) * w.row_bytes, row.data(), k_);
      for (std::int64_t c = 0; c < k_; ++c) {
        const std::int64_t s = c / 32, i = (c % 32) / 2;
        packed_[static_cast<std::size_t>((b * steps + s) * 512 + i * 32 + 2 * j + c % 2)] = F32ToBF16(row[c]);
      }
    }
  });
}

void AmxBf16Weights::Apply(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
  if (m <= 0 || n_ <= 0) return;
  // Staged activations: all m rows (padded with zero rows to a multiple of
  // 32), so each row is converted once however the tasks split the outputs.
  const std::int64_t mp = RoundUp(m, 32);
  thread_local std::vector<std::uint16_t> staged;
  staged.resize(static_cast<std::size_t>(mp * kp_));
  std::uint16_t* a = staged.data();
  ParallelForRanges(pool, mp, RowGrain(pool, mp, kp_), [&](std::int64_t r0, std::int64_t r1) {
    AmxBf16StageRows(x, m, r0, r1, k_, kp_, a);
  });

  // Tasks: row chunks x spans of weight-row blocks, enough of them to share
  // out (four per thread) when m is small.
  const std::int64_t chunks = (m + kTaskRows - 1) / kTaskRows, pairs = blocks_ / 2;
  const std::int64_t threads = pool ? pool->NumThreads() : 1;
  const std::int64_t spans = std::min(pairs, std::max<std::int64_t>(1, (4 * threads + chunks - 1) / chunks));
  const std::int64_t span_pairs = (pairs + spans - 1) / spans;
  ParallelFor(pool, chunks * spans, [&](std::int64_t t) {
    const std::int64_t c = t / spans, s = t % spans, r0 = 32 * s * span_pairs;
    if (r0 >= n_) return;
    AmxBf16Product(Block(a + c * kTaskRows * kp_, std::min(kTaskRows, m - c * kTaskRows), r0,
                         std::min(n_, r0 + 32 * span_pairs), y + c * kTaskRows * n_, n_));
  });
}

AmxBf16Block AmxBf16Weights::Block(const std::uint16_t* a, std::int64_t rows, std::int64_t r0, std::int64_t r1,
                                   float* y, std::int64_t ys) const {
  AmxBf16Block blk;
  blk.a = a;
  blk.rows = rows;
  blk.kp = kp_;
  blk.packed = packed_.data();
  blk.block0 = r0 / 16;
  blk.block1 = std::min(blocks_, RoundUp(r1, 32) / 16);
  blk.n = r1;
  blk.y = y;
  blk.ys = ys;
  return blk;
}

#if !(defined(__x86_64__) && defined(__GNUC__))
// Never reached: AmxBf16Usable() is false off x86-64.
void AmxBf16StageRows(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                      std::uint16_t*) {}
void AmxBf16Product(const AmxBf16Block&) {}
#endif

}  // namespace kvshare::detail
