// Kernel-level selection and the threaded MatMul driver.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvshare/error.h"
#include "kvshare/thread_pool.h"
#include "model/quant.h"
#include "model/quant_kernels.h"

namespace kvshare {

const char* KernelLevelName(KernelLevel level) {
  switch (level) {
    case KernelLevel::kScalar: return "scalar";
    case KernelLevel::kAvx2: return "avx2";
    case KernelLevel::kAvx512Vnni: return "avx512vnni";
    case KernelLevel::kFloat: return "float";
  }
  return "?";
}

bool KernelLevelAvailable(KernelLevel level) {
  switch (level) {
    case KernelLevel::kScalar: return true;
    case KernelLevel::kFloat: return true;
#if defined(KVSHARE_HAVE_X86_KERNELS) && defined(__GNUC__)
    case KernelLevel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case KernelLevel::kAvx512Vnni:
      return KernelLevelAvailable(KernelLevel::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
#endif
    default: return false;
  }
}

KernelLevel DefaultKernelLevel() {
  static const KernelLevel level = [] {
    if (const char* env = std::getenv("KVSHARE_KERNEL")) {
      for (KernelLevel l : {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512Vnni, KernelLevel::kFloat}) {
        if (std::strcmp(env, KernelLevelName(l)) == 0 && KernelLevelAvailable(l)) return l;
      }
      if (std::strcmp(env, "avx512") == 0 && KernelLevelAvailable(KernelLevel::kAvx512Vnni)) return KernelLevel::kAvx512Vnni;
    }
    if (KernelLevelAvailable(KernelLevel::kAvx512Vnni)) return KernelLevel::kAvx512Vnni;
    if (KernelLevelAvailable(KernelLevel::kAvx2)) return KernelLevel::kAvx2;
    return KernelLevel::kScalar;
  }();
  return level;
}

WeightMatrix WeightMatrix::Make(const void* data, GgmlType type, std::int64_t rows, std::int64_t cols) {
  if (!IsSupportedWeightType(type)) throw Error("WeightMatrix: unsupported weight type " + GgmlTypeName(type));
  const std::int64_t bs = GgmlBlockSize(type);
  if (rows < 0 || cols < 0 || cols % bs != 0) {
    throw Error("WeightMatrix: cols = " + std::to_string(cols) + " must be a multiple of the " + GgmlTypeName(type) +
                " block size " + std::to_string(bs));
  }
  return WeightMatrix{data, type, rows, cols, static_cast<std::size_t>(cols / bs * GgmlBlockBytes(type))};
}

WeightMatrix WeightMatrix::FromTensor(const GgufTensor& t) {
  CheckWeightType(t);
  if (t.n_dims > 2) throw Error("WeightMatrix: tensor '" + t.name + "' has rank " + std::to_string(t.n_dims) + ", expected <= 2");
  return Make(t.data, t.type, t.ne[1], t.ne[0]);
}

namespace {

const detail::QuantKernels& Kernels(KernelLevel level) {
#ifdef KVSHARE_HAVE_X86_KERNELS
  if (level == KernelLevel::kAvx512Vnni) return detail::kAvx512VnniKernels;
  if (level == KernelLevel::kAvx2) return detail::kAvx2Kernels;
#endif
  (void)level;
  return detail::kScalarKernels;
}

// Output rows per pool task: about kTasksPerThread tasks per thread, at least
// kMinRowsPerTask rows each. The pool takes a mutex per task, so fixed 16-row
// tasks made the 262144-row tied LM head cost ~16k lock handoffs per decoded
// token: Gemma 3 270M decoded slower on 2 threads than on 1 (43 vs 65 tok/s,
// `kvshare bench`); with this split, 69 vs 66. Each row's result does not
// depend on the split, so outputs stay identical for any thread count.
constexpr std::int64_t kMinRowsPerTask = 16;
constexpr std::int64_t kTasksPerThread = 4;

std::int64_t RowsPerTask(std::int64_t rows, const ThreadPool* pool) {
  const std::int64_t tasks = kTasksPerThread * (pool != nullptr ? pool->NumThreads() : 1);
  return std::max(kMinRowsPerTask, (rows + tasks - 1) / tasks);
}

// KernelLevel::kFloat: each task dequantizes its weight rows, kMinRowsPerTask
// at a time, and takes fp32 dot products of them with every activation row.
void MatMulFloat(const WeightMatrix& w, const MatMulParams& p) {
  const std::int64_t cols = w.cols, rows = w.rows, m = p.m;
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  const std::int64_t rows_per_task = RowsPerTask(rows, p.pool);
  const std::int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  ParallelFor(p.pool, tasks, [&](std::int64_t t) {
    const std::int64_t task_end = std::min(rows, (t + 1) * rows_per_task);
    std::vector<float> wf(static_cast<std::size_t>(kMinRowsPerTask * cols));  // [kMinRowsPerTask, cols]
    for (std::int64_t r0 = t * rows_per_task; r0 < task_end; r0 += kMinRowsPerTask) {
      const std::int64_t r1 = std::min(task_end, r0 + kMinRowsPerTask);
      for (std::int64_t r = r0; r < r1; ++r) {
        DequantizeRow(w.type, base + static_cast<std::size_t>(r) * w.row_bytes, wf.data() + (r - r0) * cols, cols);
      }
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t r = r0; r < r1; ++r) {
          p.y[i * rows + r] = detail::DotF32(wf.data() + (r - r0) * cols, p.x + i * cols, cols);
        }
      }
    }
  });
}

}  // namespace

void MatMul(const WeightMatrix& w, const MatMulParams& p) {
  if (!IsSupportedWeightType(w.type)) throw Error("MatMul: unsupported weight type " + GgmlTypeName(w.type));
  if (p.m < 0) throw Error("MatMul: m = " + std::to_string(p.m) + " must be >= 0");
  if (p.m == 0 || w.rows == 0) return;
  if (p.x == nullptr || p.y == nullptr || (w.data == nullptr && w.cols > 0)) throw Error("MatMul: null x, y or weight data");
  if (!KernelLevelAvailable(p.level)) {
    throw Error(std::string("MatMul: kernel level ") + KernelLevelName(p.level) + " is not available on this CPU/build");
  }
  if (p.level == KernelLevel::kFloat) {
    MatMulFloat(w, p);
    return;
  }
  const detail::QuantKernels& k = Kernels(p.level);
  const std::int64_t cols = w.cols, rows = w.rows, m = p.m;
  const auto* base = static_cast<const std::uint8_t*>(w.data);

  // Quantize the activations once (row i -> its own blocks).
  std::vector<ActQ8> a8;
  std::vector<ActQ8K> a8k;
  const bool kquant = UsesSuperBlockActivations(w.type);
  const bool q32 = !kquant && GgmlBlockSize(w.type) == 32;
  const std::int64_t nb = cols / GgmlBlockSize(w.type);
  if (q32) {
    a8.resize(static_cast<std::size_t>(m * nb));
    for (std::int64_t i = 0; i < m; ++i) QuantizeRowQ8(p.x + i * cols, a8.data() + i * nb, cols);
  } else if (kquant) {
    a8k.resize(static_cast<std::size_t>(m * nb));
    for (std::int64_t i = 0; i < m; ++i) QuantizeRowQ8K(p.x + i * cols, a8k.data() + i * nb, cols);
  }

  // Y[i + j, r] = W[r] . X[i + j] for r in [r0, r1), j < n (n <= kMaxActRows).
  auto dot_rows = [&](std::int64_t r0, std::int64_t r1, std::int64_t i, int n) {
    const void* wr = base + static_cast<std::size_t>(r0) * w.row_bytes;
    const std::int64_t nr = r1 - r0;
    float* y = p.y + i * rows + r0;
    switch (w.type) {
      case GgmlType::kQ8_0: k.q8_0(static_cast<const BlockQ8_0*>(wr), nr, a8.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ4_0: k.q4_0(static_cast<const BlockQ4_0*>(wr), nr, a8.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ4_1: k.q4_1(static_cast<const BlockQ4_1*>(wr), nr, a8.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ5_0: k.q5_0(static_cast<const BlockQ5_0*>(wr), nr, a8.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ5_1: k.q5_1(static_cast<const BlockQ5_1*>(wr), nr, a8.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ4_K: k.q4_k(static_cast<const BlockQ4_K*>(wr), nr, a8k.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ5_K: k.q5_k(static_cast<const BlockQ5_K*>(wr), nr, a8k.data() + i * nb, nb, nb, n, y, rows); return;
      case GgmlType::kQ6_K: k.q6_k(static_cast<const BlockQ6_K*>(wr), nr, a8k.data() + i * nb, nb, nb, n, y, rows); return;
      default: break;
    }
    for (std::int64_t r = r0; r < r1; ++r) {
      const void* wrow = base + static_cast<std::size_t>(r) * w.row_bytes;
      for (int j = 0; j < n; ++j) {
        const float* x = p.x + (i + j) * cols;
        float& out = p.y[(i + j) * rows + r];
        switch (w.type) {
          case GgmlType::kF32: out = detail::DotF32(static_cast<const float*>(wrow), x, cols); break;
          case GgmlType::kF16: out = detail::DotF16(static_cast<const std::uint16_t*>(wrow), x, cols); break;
          case GgmlType::kBF16: out = detail::DotBF16(static_cast<const std::uint16_t*>(wrow), x, cols); break;
          default: out = 0.0f; break;
        }
      }
    }
  };
  // A task's weight rows meet the activation rows kMaxActRows at a time: each
  // weight block is unpacked (and read from cache) once per group of rows.
  const std::int64_t rows_per_task = RowsPerTask(rows, p.pool);
  const std::int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  ParallelFor(p.pool, tasks, [&](std::int64_t t) {
    const std::int64_t r0 = t * rows_per_task;
    const std::int64_t r1 = std::min(rows, r0 + rows_per_task);
    for (std::int64_t i = 0; i < m; i += detail::kMaxActRows) {
      dot_rows(r0, r1, i, static_cast<int>(std::min<std::int64_t>(detail::kMaxActRows, m - i)));
    }
  });
}

}  // namespace kvshare
