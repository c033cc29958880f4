// Kernel-level selection, weight packing at load and the threaded MatMul
// driver; each type's kernels: its row of weight_types.cc (which runs when,
// and why: kernels/dispatch.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/cpu_amx.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/quant/kernel_level.h"
#include "quant/bf16_tiles.h"
#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/quant.h"
#include "quant/weight_types.h"

namespace kvshare {

const char* KernelLevelName(KernelLevel level) {
  switch (level) {
    case KernelLevel::kScalar: return "scalar";
    case KernelLevel::kAvx2: return "avx2";
    case KernelLevel::kAvx512Vnni: return "avx512vnni";
    case KernelLevel::kAmx: return "amx";
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
    case KernelLevel::kAmx: return KernelLevelAvailable(KernelLevel::kAvx512Vnni) && detail::AmxUsable();
#endif
    default: return false;
  }
}

namespace {

constexpr KernelLevel kAllLevels[] = {KernelLevel::kScalar, KernelLevel::kAvx2, KernelLevel::kAvx512Vnni,
                                      KernelLevel::kAmx, KernelLevel::kFloat};

// A level by KVSHARE_KERNEL's names ("avx512" for "avx512vnni"); false for
// any other name.
bool ParseKernelLevel(std::string_view name, KernelLevel* level) {
  if (name == "avx512") name = "avx512vnni";
  for (KernelLevel l : kAllLevels) {
    if (name == KernelLevelName(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

KernelLevel StartLevel() {
  KernelLevel l{};
  if (const char* env = std::getenv("KVSHARE_KERNEL"); env != nullptr && ParseKernelLevel(env, &l) &&
                                                         KernelLevelAvailable(l)) {
    return l;
  }
  if (KernelLevelAvailable(KernelLevel::kAmx)) return KernelLevel::kAmx;
  if (KernelLevelAvailable(KernelLevel::kAvx512Vnni)) return KernelLevel::kAvx512Vnni;
  if (KernelLevelAvailable(KernelLevel::kAvx2)) return KernelLevel::kAvx2;
  return KernelLevel::kScalar;
}

std::atomic<KernelLevel>& CurrentLevel() {
  static std::atomic<KernelLevel> level{StartLevel()};  // once per process, thread-safe
  return level;
}

}  // namespace

KernelLevel DefaultKernelLevel() { return CurrentLevel().load(std::memory_order_relaxed); }

void SetMatMulKernel(const std::string& name) {
  KernelLevel l{};
  const bool known = ParseKernelLevel(name, &l);
  if (!known || !KernelLevelAvailable(l)) {
    std::string available;
    for (KernelLevel a : kAllLevels) {
      if (KernelLevelAvailable(a)) available += std::string(available.empty() ? "" : ", ") + KernelLevelName(a);
    }
    throw Error("matmul kernel '" + name + "' " +
                (known ? "cannot run on this CPU or build" : "is not a kernel level") +
                "; this process can run: " + available);
  }
  CurrentLevel().store(l, std::memory_order_relaxed);
}

// kvshare/quant/kernel_level.h: the level's name for the front ends, which do not see
// this layer's kernel header.
const char* MatMulKernelName() { return KernelLevelName(DefaultKernelLevel()); }

std::string MatMulKernelDescription() {
  const KernelLevel level = DefaultKernelLevel();
  std::string s = KernelLevelName(level);
  switch (level) {
    case KernelLevel::kAmx:
      return s + " (AMX-INT8 tiles for prefill and batched steps of the packed types, AVX-512 VNNI for the rest)";
    case KernelLevel::kFloat: return s + " (weights dequantized to fp32, no activation rounding)";
    default: break;
  }
#if defined(KVSHARE_HAVE_X86_KERNELS)
  if (KernelLevelAvailable(KernelLevel::kAmx)) return s + " (AMX available; KVSHARE_KERNEL holds the level lower)";
  if (level == KernelLevel::kAvx512Vnni) return s + " (no AMX: " + detail::AmxUnusableReason() + ")";
#endif
  return s;
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
  if (t.n_dims > 2)
    throw Error("WeightMatrix: tensor '" + t.name + "' has rank " + std::to_string(t.n_dims) + ", expected <= 2");
  return Make(t.data, t.type, t.ne[1], t.ne[0]);
}

namespace {

// Whether `level` has a kernel over packed weights of `type`.
bool HasPackedKernel(KernelLevel level, GgmlType type) {
  const detail::WeightTypeTraits* t = detail::FindWeightType(type);
  return level != KernelLevel::kFloat && t != nullptr && t->At(level).packed != nullptr;
}

// Whether w's products at `level` run on the AMX int8 tile kernels (packed
// weights the level has a packed kernel for, not on the bf16 tiles).
bool OnAmxTiles(KernelLevel level, const WeightMatrix& w) {
  return level == KernelLevel::kAmx && w.packed != nullptr && w.bf16_tiles == nullptr && HasPackedKernel(level, w.type);
}

}  // namespace

WeightMatrix PackForMatMul(WeightMatrix w, const PackOptions& options) {
  if (w.packed == nullptr && w.data != nullptr && detail::CanPack(w.type, w.rows) &&
      HasPackedKernel(DefaultKernelLevel(), w.type)) {
    w.packed = detail::Pack(w.data, w.type, w.rows, w.cols / GgmlBlockSize(w.type));
  }
  const bool is_float = w.type == GgmlType::kF32 || w.type == GgmlType::kF16 || w.type == GgmlType::kBF16;
  if (options.float_weights_bf16 && is_float && w.bf16_tiles == nullptr && w.data != nullptr) {
    w.bf16_tiles = std::make_shared<const detail::AmxBf16Weights>(w);
  }
  return w;
}

namespace {

// The work split: tasks of whole output rows of one target, about
// kTasksPerThread tasks per thread over all targets (each target's share by
// its weight bytes), at least kMinRowsPerTask rows each. Smaller tasks (fixed
// 64-256 KiB of weights) streamed 10-25% slower from DRAM on 2 threads
// (E2bVec): each new task restarts the hardware prefetchers' streams. Each
// row's result does not depend on the split, so outputs stay identical for any
// thread count. On one thread there is nothing to balance: one task per
// target, so that the AMX level's kernels, which stage a call's activation
// rows per task, stage them once (docs/kernels.md, AMX tile kernels).
constexpr std::int64_t kMinRowsPerTask = 16;
constexpr std::int64_t kTasksPerThread = 4;

// first[k] = index of target k's first task (first.back() = all tasks);
// rows_per_task[k] = its task size.
struct TaskSplit {
  std::vector<std::int64_t> first, rows_per_task;
};

TaskSplit SplitTasks(std::span<const MatMulTarget> targets, const ThreadPool* pool) {
  double total = 0.0;
  for (const MatMulTarget& t : targets) total += static_cast<double>(t.w.rows) * static_cast<double>(t.w.row_bytes);
  const int threads = pool != nullptr ? pool->NumThreads() : 1;
  const double per_task = std::max(1.0, total / (threads > 1 ? kTasksPerThread * threads : 1));
  TaskSplit s;
  s.first.push_back(0);
  for (const MatMulTarget& t : targets) {
    const double bytes = static_cast<double>(t.w.rows) * static_cast<double>(t.w.row_bytes);
    const std::int64_t want = std::max<std::int64_t>(1, std::llround(bytes / per_task));
    std::int64_t rpt = std::max(kMinRowsPerTask, (t.w.rows + want - 1) / want);
    if (t.w.packed != nullptr) rpt = (rpt + detail::kPackRows - 1) / detail::kPackRows * detail::kPackRows;
    if (t.w.bf16_tiles != nullptr) rpt = (rpt + 31) / 32 * 32;  // whole pairs of 16-row blocks
    s.rows_per_task.push_back(rpt);
    s.first.push_back(s.first.back() + (t.w.rows + rpt - 1) / rpt);
  }
  return s;
}

// Runs fn(k, r0, r1) for every task (rows [r0, r1) of target k) on the pool.
template <class Fn>
void ForEachTask(std::span<const MatMulTarget> targets, ThreadPool* pool, const Fn& fn) {
  const TaskSplit s = SplitTasks(targets, pool);
  ParallelFor(pool, s.first.back(), [&](std::int64_t task) {
    std::size_t k = 0;
    while (task >= s.first[k + 1]) ++k;
    const std::int64_t r0 = (task - s.first[k]) * s.rows_per_task[k];
    fn(k, r0, std::min(targets[k].w.rows, r0 + s.rows_per_task[k]));
  });
}

// KernelLevel::kFloat, rows [r0, r1) of one target: dequantizes the weight
// rows kMinRowsPerTask at a time and takes fp32 dot products of them with
// every activation row.
void MatMulFloatRows(const MatMulTarget& t, const float* x, std::int64_t m, std::int64_t r0, std::int64_t r1) {
  const WeightMatrix& w = t.w;
  const std::int64_t cols = w.cols;
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  std::vector<float> wf(static_cast<std::size_t>(kMinRowsPerTask * cols));  // [kMinRowsPerTask, cols]
  for (std::int64_t c0 = r0; c0 < r1; c0 += kMinRowsPerTask) {
    const std::int64_t c1 = std::min(r1, c0 + kMinRowsPerTask);
    for (std::int64_t r = c0; r < c1; ++r) {
      DequantizeRow(w.type, base + static_cast<std::size_t>(r) * w.row_bytes, wf.data() + (r - c0) * cols, cols);
    }
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t r = c0; r < c1; ++r)
        t.y[i * w.rows + r] = detail::DotF32(wf.data() + (r - c0) * cols, x + i * cols, cols);
    }
  }
}

// Integer levels, rows [r0, r1) of one target against activation rows
// [i, i + n) (n <= kMaxActRows, or AmxActRowsPerCall for the AMX level's packed
// kernels): the fp32 rows x, or as quantized in a8 (per
// 32) or a8k (per 256), as the type's act says.
void MatMulQuantRows(KernelLevel level, const MatMulTarget& t, const float* x, const ActQ8* a8, const ActQ8K* a8k,
                     std::int64_t r0, std::int64_t r1, std::int64_t i, int n, const detail::AmxStagedActs* staged) {
  const WeightMatrix& w = t.w;
  const detail::WeightTypeTraits& tr = *detail::FindWeightType(w.type);
  const detail::LevelKernels& k = tr.At(level);
  // Activation blocks per row: nb weight blocks of act_blocks each (per 256
  // or per 32, so IQ4_XS: 8 per weight block, NVFP4 / Q2_0: 2, Q1_0: 4; float
  // types: one float per element).
  const std::int64_t rows = w.rows, nb = w.cols / tr.block, na = nb * tr.act_blocks;
  const void* act = tr.act == detail::ActFormat::kQ8    ? static_cast<const void*>(a8 + i * na)
                    : tr.act == detail::ActFormat::kQ8K ? static_cast<const void*>(a8k + i * na)
                                                        : static_cast<const void*>(x + i * na);
  float* y = t.y + i * rows + r0;
  // A matrix packed for another level (the tests run every level on one
  // matrix) falls through to its ggml layout where this level has no packed
  // kernel for the type.
  if (w.packed != nullptr && k.packed != nullptr) {
    k.packed(*w.packed, r0, r1, act, na, n, y, rows, staged);
    return;
  }
  const void* wr = static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(r0) * w.row_bytes;
  k.rows(wr, r1 - r0, act, na, nb, n, y, rows);
}

// The AMX level's tile kernels' activation rows, laid out once per chunk of
// AmxActRowsPerCall rows for every task (dispatch.h: AmxStagedActs), per
// activation format; empty where no target runs on the tiles. A chunk of
// fewer than 16 rows gets none (a null view): it runs on the AVX-512
// kernels, or the kernel lays out its few rows itself.
struct AmxTileActs {
  std::vector<detail::AmxStagedActs> q8, q8k;
};

AmxTileActs StageAmxActs(const MatMulManyParams& p, const ActQ8* a8, const ActQ8K* a8k) {
  AmxTileActs out;
#if defined(KVSHARE_HAVE_X86_KERNELS)
  if (p.level != KernelLevel::kAmx || p.m < detail::kAmxStageMinRows) return out;
  bool q8 = false, q8k = false;
  for (const MatMulTarget& t : p.targets) {
    if (!OnAmxTiles(p.level, t.w)) continue;
    const detail::ActFormat act = detail::FindWeightType(t.w.type)->act;
    q8 = q8 || act == detail::ActFormat::kQ8;
    q8k = q8k || act == detail::ActFormat::kQ8K;
  }
  if (!q8 && !q8k) return out;
  const std::int64_t cols = p.targets[0].w.cols, step = detail::AmxActRowsPerCall(cols);
  const std::int64_t chunks = (p.m + step - 1) / step;
  // Storage per chunk and format, kept by the calling thread (it only grows).
  thread_local std::vector<detail::AmxActStage> q8_store, q8k_store;
  const auto n_chunks = static_cast<std::size_t>(chunks);
  if (q8) {
    q8_store.resize(std::max(q8_store.size(), n_chunks));
    out.q8.resize(n_chunks);
  }
  if (q8k) {
    q8k_store.resize(std::max(q8k_store.size(), n_chunks));
    out.q8k.resize(n_chunks);
  }
  detail::AmxActStage* q8s = q8_store.data();
  detail::AmxActStage* q8ks = q8k_store.data();
  ParallelFor(p.pool, chunks, [&](std::int64_t c) {
    const std::int64_t i = c * step;
    const int n = static_cast<int>(std::min<std::int64_t>(step, p.m - i));
    if (n < detail::kAmxStageMinRows) return;
    const auto k = static_cast<std::size_t>(c);
    if (q8) out.q8[k] = detail::AmxStageQ8(a8 + i * (cols / 32), cols / 32, cols / 32, n, q8s[k]);
    if (q8k) out.q8k[k] = detail::AmxStageQ8K(a8k + i * (cols / 256), cols / 256, cols / 256, n, q8ks[k]);
  });
#else
  (void)p, (void)a8, (void)a8k;
#endif
  return out;
}

}  // namespace

void MatMulMany(const MatMulManyParams& p) {
  if (p.m < 0) throw Error("MatMul: m = " + std::to_string(p.m) + " must be >= 0");
  const std::int64_t cols = p.targets.empty() ? 0 : p.targets[0].w.cols;
  for (const MatMulTarget& t : p.targets) {
    if (!IsSupportedWeightType(t.w.type)) throw Error("MatMul: unsupported weight type " + GgmlTypeName(t.w.type));
    if (t.w.cols != cols) {
      throw Error("MatMulMany: every target must have the input length of the first (" + std::to_string(cols) +
                  " columns), got " + std::to_string(t.w.cols));
    }
  }
  std::int64_t rows = 0;
  for (const MatMulTarget& t : p.targets) rows += t.w.rows;
  if (p.m == 0 || rows == 0) return;
  if (p.x == nullptr) throw Error("MatMul: null x, y or weight data");
  for (const MatMulTarget& t : p.targets) {
    if (t.w.rows > 0 && (t.y == nullptr || (t.w.data == nullptr && t.w.cols > 0)))
      throw Error("MatMul: null x, y or weight data");
  }
  if (!KernelLevelAvailable(p.level)) {
    throw Error(std::string("MatMul: kernel level ") + KernelLevelName(p.level) +
                " is not available on this CPU/build");
  }
  const std::int64_t m = p.m;
  if (p.level == KernelLevel::kFloat) {
    ForEachTask(p.targets, p.pool, [&](std::size_t k, std::int64_t r0, std::int64_t r1) {
      MatMulFloatRows(p.targets[k], p.x, m, r0, r1);
    });
    return;
  }

  // Quantize the activations once per format the targets use (row i -> its
  // own blocks), into this thread's scratch; for targets on the bf16 tiles,
  // round them to bf16 once.
  thread_local std::vector<ActQ8> a8_scratch;
  thread_local std::vector<ActQ8K> a8k_scratch;
  bool q32 = false, kquant = false, bf16 = false;
  for (const MatMulTarget& t : p.targets) {
    const detail::ActFormat act = detail::FindWeightType(t.w.type)->act;
    bf16 = bf16 || t.w.bf16_tiles != nullptr;
    kquant = kquant || (act == detail::ActFormat::kQ8K && t.w.bf16_tiles == nullptr);
    q32 = q32 || (act == detail::ActFormat::kQ8 && t.w.bf16_tiles == nullptr);
  }
  // Rows are independent: ranges of rows on the pool (prefill, batched
  // steps), each quantized exactly as alone.
  const auto for_rows = [&](const auto& quantize_row) {
    ParallelForRanges(p.pool, m, RowGrain(p.pool, m, cols), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) quantize_row(i);
    });
  };
  if (q32) {
    const std::int64_t nb = cols / 32;
    a8_scratch.resize(static_cast<std::size_t>(m * nb));
    ActQ8* a = a8_scratch.data();
    for_rows([&](std::int64_t i) { QuantizeRowQ8(p.x + i * cols, a + i * nb, cols); });
  }
  if (kquant) {
    const std::int64_t nb = cols / 256;
    a8k_scratch.resize(static_cast<std::size_t>(m * nb));
    ActQ8K* a = a8k_scratch.data();
    for_rows([&](std::int64_t i) { QuantizeRowQ8K(p.x + i * cols, a + i * nb, cols); });
  }
  // Pointers, not the thread_local names: the tasks run on other threads too.
  const ActQ8* a8 = a8_scratch.data();
  const ActQ8K* a8k = a8k_scratch.data();
  const std::uint16_t* staged = bf16 ? detail::AmxBf16Stage(p.x, m, cols, p.pool) : nullptr;
  const AmxTileActs tile_acts = StageAmxActs(p, a8, a8k);
  // A task's weight rows meet the activation rows kMaxActRows at a time
  // (AmxActRowsPerCall for the AMX level's packed kernels): each weight block is
  // unpacked (and read from cache) once per group of rows.
  ForEachTask(p.targets, p.pool, [&](std::size_t t, std::int64_t r0, std::int64_t r1) {
    const WeightMatrix& w = p.targets[t].w;
    if (w.bf16_tiles != nullptr) {
      w.bf16_tiles->Rows(staged, m, r0, r1, p.targets[t].y, w.rows);
      return;
    }
    const bool tiles = OnAmxTiles(p.level, w);
    const std::int64_t step = tiles ? detail::AmxActRowsPerCall(cols) : detail::kMaxActRows;
    const std::vector<detail::AmxStagedActs>* views = nullptr;
    if (tiles) views = detail::FindWeightType(w.type)->act == detail::ActFormat::kQ8 ? &tile_acts.q8 : &tile_acts.q8k;
    for (std::int64_t i = 0; i < m; i += step) {
      const int n = static_cast<int>(std::min<std::int64_t>(step, m - i));
      const std::size_t chunk = static_cast<std::size_t>(i / step);
      const detail::AmxStagedActs* view =
          views != nullptr && chunk < views->size() && (*views)[chunk].tiles != nullptr ? &(*views)[chunk] : nullptr;
      MatMulQuantRows(p.level, p.targets[t], p.x, a8, a8k, r0, r1, i, n, view);
    }
  });
}

void MatMul(const WeightMatrix& w, const MatMulParams& p) {
  const MatMulTarget t{.w = w, .y = p.y};
  MatMulMany({.x = p.x, .m = p.m, .targets = std::span<const MatMulTarget>(&t, 1), .pool = p.pool, .level = p.level});
}

}  // namespace kvshare
