// Float-weight matrix products in bf16 on Intel AMX tiles (tdpbf16ps): the
// reduced-precision linears of the encoders (bf16 encoder precision,
// docs/vision.md "Precision") on hosts with AMX-BF16, where oneDNN 2.6's
// bf16 matmul runs on AVX512-BF16 only. Internal to src/.
//
// Arithmetic (Intel SDM, TDPBF16PS): the weights are rounded to bf16 once at
// construction and the activations per call (nearest even; the conversion
// instruction and the tiles treat denormals as zero); each product of two
// bf16 numbers is exact in f32 and is added to an f32 sum by a fused
// multiply-add (nearest even, denormal results flushed), over the columns in
// order, two at a time (0 and 1, then 2 and 3, ...). So, with u = 2^-8 (one
// bf16 rounding) and the unit roundoff 2^-24 of the sums,
//   |y[i, r] - sum_c W[r, c] x[i, c]|
//     <= (2u + u^2) sum_c |W[r, c] x[i, c]| + gamma_K sum_c |bf16(W) bf16(x)|
// up to the flushed denormals (gamma_K = K 2^-24 / (1 - K 2^-24), Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., Lemma 3.1).
// Output y[i, r] depends only on row i of x and row r of W: never on the
// other rows of a call, m, or the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/quant.h"

namespace kvshare {
class ThreadPool;
}

namespace kvshare::detail {

// Whether the tiles serve bf16 products here: AMX usable and allowed
// (cpu_amx.h: KVSHARE_KERNEL unset or "amx") and AVX512-BF16 for the
// activations' rounding.
bool AmxBf16Usable();

// The tile kernels (kernels/amx/bf16_tiles.cc), entered only when
// AmxBf16Usable(). Staged activations are laid out as the tiles' A operand:
// per group of 16 rows and step of 32 columns one 1 KiB tile (16 rows of 32
// bf16), the steps of a group consecutive, so row group g starts at a + 16 g kp
// (kp = k rounded up to 32) and every tile load is contiguous. Stages rows
// [r0, r1) of that layout: row r < m from x [m, k] (row stride k) as bf16,
// the columns past k zero; rows r >= m all zero.
void AmxBf16StageRows(const float* x, std::int64_t m, std::int64_t r0, std::int64_t r1, std::int64_t k,
                      std::int64_t kp, std::uint16_t* a);

struct AmxBf16Block {
  const std::uint16_t* a = nullptr;  // staged rows (AmxBf16StageRows) from a group of 16
  std::int64_t rows = 0;             // valid rows of a (readable up to a multiple of 32)
  std::int64_t kp = 0;
  const std::uint16_t* packed = nullptr;  // AmxBf16Weights' blocks
  std::int64_t block0 = 0, block1 = 0;    // row blocks [block0, block1), both even
  std::int64_t n = 0;                     // weight rows (outputs past n are not written)
  float* y = nullptr;                     // y[row * ys + r] for r in [16 block0, min(16 block1, n))
  std::int64_t ys = 0;
};

// y = a W^T over the block's rows and weight-row blocks.
void AmxBf16Product(const AmxBf16Block& blk);

// Rows [0, m) of x [m, k] staged for the tiles (AmxBf16StageRows, kp = k
// rounded up to 32 and at least 32; zero rows up to a multiple of 32) into
// this thread's buffer, the rows shared out on `pool`. Valid until the
// thread's next call.
const std::uint16_t* AmxBf16Stage(const float* x, std::int64_t m, std::int64_t k, ThreadPool* pool);

// W [rows, cols] in bf16, packed as the tiles' B operand: per block of 16
// weight rows and 32 columns, 16 tile rows of 16 column pairs (tile row i,
// pair j: W[16 b + j][32 s + 2 i], W[16 b + j][32 s + 2 i + 1]), blocks
// [b][s], zero-padded to an even number of row blocks and to a multiple of
// 32 columns.
class AmxBf16Weights {
 public:
  AmxBf16Weights() = default;
  // w: any type DequantizeRow reads. Throws kvshare::Error when
  // AmxBf16Usable() is false, or as DequantizeRow does.
  explicit AmxBf16Weights(const WeightMatrix& w, ThreadPool* pool = nullptr);

  std::int64_t rows() const { return n_; }
  std::int64_t cols() const { return k_; }
  // y[m, rows()] = bf16(x)[m, cols()] bf16(W)^T with the arithmetic above.
  // x rows are cols() floats apart, y rows rows() floats apart.
  void Apply(const float* x, std::int64_t m, float* y, ThreadPool* pool) const;
  // Outputs [r0, r1) (r0 a multiple of 32) of m staged rows into y (row
  // stride ys), on the calling thread: the work of one task. `staged` is what
  // AmxBf16Stage(x, ..., cols(), ...) returned, from a row that is a
  // multiple of 16.
  void Rows(const std::uint16_t* staged, std::int64_t m, std::int64_t r0, std::int64_t r1, float* y,
            std::int64_t ys) const;

 private:
  std::int64_t n_ = 0, k_ = 0;
  std::int64_t kp_ = 0;      // cols rounded up to 32
  std::int64_t blocks_ = 0;  // 16-row blocks, even
  std::vector<std::uint16_t> packed_;
};

}  // namespace kvshare::detail
