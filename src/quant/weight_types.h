// The weight-type table: for every ggml type kvshare computes with, what
// DequantizeRow, MatMul and Pack need to know about it, in one row
// (weight_types.cc), as ggml's type_traits do. The switches over types, the
// per-level kernel tables and the packable-type lists all read it.
//
// A row holds the file-format facts (block, bytes: kGgmlTypes in
// kvshare/gguf/gguf.h), the reference dequantizer, the activation format
// MatMul quantizes to for it, the row kernel and packed kernel of each kernel
// level (which of them runs and why: kernels/dispatch.h) and the packed
// layout (kernels/packed.h). The kernels keep their typed signatures; the
// table stores them type-erased (const void* blocks and activations) through
// thunks that weight_types.cc instantiates, after the compiler has checked
// each against the row's block and activation types.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvshare/gguf/gguf.h"
#include "quant/kernels/packed.h"
#include "quant/quant.h"

namespace kvshare::detail {

struct AmxStagedActs;  // kernels/dispatch.h

// What MatMul hands a type's kernels as activations.
enum class ActFormat : std::uint8_t {
  kFloat,  // the fp32 rows as given (F32 / F16 / BF16 weights: float dot products)
  kQ8,     // int8 per 32 elements (ActQ8)
  kQ8K,    // int8 per 256 with 16-element sums (ActQ8K)
};

// kernels/dispatch.h RowsKernel with the weight blocks and activation blocks
// (Block and Act of the row) as void.
using RowsFn = void (*)(const void* w, std::int64_t nrows, const void* x, std::int64_t x_stride, std::int64_t nb,
                        int acts, float* y, std::int64_t y_stride);
// kernels/dispatch.h PackedKernel with the activation blocks as void.
using PackedFn = void (*)(const PackedWeights& w, std::int64_t r0, std::int64_t r1, const void* x,
                          std::int64_t x_stride, int acts, float* y, std::int64_t y_stride,
                          const AmxStagedActs* staged);
// nb blocks at src to fp32 dst (quant.h's Dequant* functions).
using DequantFn = void (*)(const void* src, float* dst, std::int64_t nb);

// The integer kernel levels (KernelLevel kScalar, kAvx2, kAvx512Vnni, kAmx).
inline constexpr int kIntLevels = 4;

struct LevelKernels {
  // The level's row kernel: its own, or (none in the row) the level below's.
  RowsFn rows = nullptr;
  // Its kernel over packed weights; null: the level does not pack the type.
  PackedFn packed = nullptr;
};

struct WeightTypeTraits {
  GgmlType type;
  const char* name;      // GgmlTypeName
  std::int64_t block;    // elements per block (kGgmlTypes)
  std::int64_t bytes;    // bytes per block (kGgmlTypes) = sizeof(the block struct)
  DequantFn dequantize;  // the reference dequantizer (DequantizeRow)
  ActFormat act;
  // Activation blocks per weight block: block / 32 or block / 256 (kFloat: 1
  // float per element), so a row of nb weight blocks meets nb * act_blocks.
  std::int64_t act_blocks;
  LevelKernels level[kIntLevels];  // by KernelLevel
  PackLayout packing;              // packing.pack null: no packed layout

  // The kernels of an integer level (not kFloat).
  const LevelKernels& At(KernelLevel l) const { return level[static_cast<int>(l)]; }
  bool Packable() const { return packing.pack != nullptr; }
};

// The row of `type`; null: kvshare does not compute with it.
const WeightTypeTraits* FindWeightType(GgmlType type);
// Every row, in the order of SupportedWeightTypesString.
std::span<const WeightTypeTraits> WeightTypes();
// "A, B, ... or Z": the names of the packable types, the packed 32-element
// types first (Pack's error).
const std::string& PackableWeightTypesString();

}  // namespace kvshare::detail
