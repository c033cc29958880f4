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

// Activation rows per tile product: their staged rows (up to 128 x K bf16)
// stay in L2 while a task's weight blocks pass.
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

const std::uint16_t* AmxBf16Stage(const float* x, std::int64_t m, std::int64_t k, ThreadPool* pool) {
  const std::int64_t kp = std::max<std::int64_t>(RoundUp(k, 32), 32), mp = RoundUp(m, 32);
  thread_local std::vector<std::uint16_t> staged;
  staged.resize(static_cast<std::size_t>(mp * kp));
  std::uint16_t* a = staged.data();
  ParallelForRanges(pool, mp, RowGrain(pool, mp, kp),
                    [&](std::int64_t r0, std::int64_t r1) { AmxBf16StageRows(x, m, r0, r1, k, kp, a); });
  return a;
}

void AmxBf16Weights::Apply(const float* x, std::int64_t m, float* y, ThreadPool* pool) const {
  if (m <= 0 || n_ <= 0) return;
  const std::uint16_t* staged = AmxBf16Stage(x, m, k_, pool);
  // Tasks: row chunks x spans of weight-row blocks, enough of them to share
  // out (four per thread) when m is small. (Spans alone, each over all the
  // rows as MatMulMany's tasks run, measured slower here in 3 alternating
  // runs: SigLIP q / k / v / o 31-41 ms against 44-50 ms, 1 thread.)
  const std::int64_t chunks = (m + kTaskRows - 1) / kTaskRows, pairs = blocks_ / 2;
  const std::int64_t threads = pool ? pool->NumThreads() : 1;
  const std::int64_t spans = std::min(pairs, std::max<std::int64_t>(1, (4 * threads + chunks - 1) / chunks));
  const std::int64_t span = 32 * ((pairs + spans - 1) / spans);
  ParallelFor(pool, chunks * spans, [&](std::int64_t t) {
    const std::int64_t c = t / spans, r0 = t % spans * span, i = c * kTaskRows;
    if (r0 < n_) Rows(staged + i * kp_, std::min(kTaskRows, m - i), r0, std::min(n_, r0 + span), y + i * n_, n_);
  });
}

void AmxBf16Weights::Rows(const std::uint16_t* staged, std::int64_t m, std::int64_t r0, std::int64_t r1, float* y,
                          std::int64_t ys) const {
  AmxBf16Block blk;
  blk.kp = kp_;
  blk.packed = packed_.data();
  blk.block0 = r0 / 16;
  blk.block1 = std::min(blocks_, RoundUp(r1, 32) / 16);
  blk.n = r1;
  blk.ys = ys;
  for (std::int64_t i = 0; i < m; i += kTaskRows) {
    blk.a = staged + i * kp_;
    blk.rows = std::min(kTaskRows, m - i);
    blk.y = y + i * ys;
    AmxBf16Product(blk);
  }
}

#if !(defined(__x86_64__) && defined(__GNUC__))
// Never reached: AmxBf16Usable() is false off x86-64.
void AmxBf16StageRows(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                      std::uint16_t*) {}
void AmxBf16Product(const AmxBf16Block&) {}
#endif

}  // namespace kvshare::detail
