// The weight-type table (weight_types.h): one row per ggml type kvshare
// computes with.
#include "quant/weight_types.h"

#include <array>
#include <type_traits>

#include "quant/kernels/dispatch.h"
#include "quant/kernels/packed.h"
#include "quant/kernels/rows.h"
#include "quant/quant_iq.h"

namespace kvshare::detail {
namespace {

// What a row states, typed: the compiler checks each function against the
// row's weight block and activation type.
template <typename B, typename A>
struct Row {
  using Block = B;
  using Act = A;  // ActQ8, ActQ8K, or float (float dot products)
  void (*dequantize)(const B*, float*, std::int64_t) = nullptr;
  // By level (scalar, avx2, avx512vnni, amx); none: the level below's runs there.
  RowsKernel<B, A>* rows[kIntLevels] = {};
  // By level; none: the level does not pack the type.
  PackedKernel<A>* packed[kIntLevels] = {};
  // The packed layout: plane bytes per packed block, and PackRows for the
  // block (none: no packed layout).
  PlaneBytes planes = {};
  void (*pack)(const B*, std::int64_t, std::int64_t, std::int64_t, const PlaneBytes&,
               std::uint8_t* const[kPackPlanes]) = nullptr;
};

// The thunks that erase the block and activation types (each forwards its
// arguments to the one kernel it is instantiated for).
template <typename Block, typename Act, RowsKernel<Block, Act>* K>
constexpr RowsFn ErasedRows() {
  if constexpr (K == nullptr) {
    return nullptr;
  } else {
    return [](const void* w, std::int64_t nrows, const void* x, std::int64_t xs, std::int64_t nb, int acts, float* y,
              std::int64_t ys) {
      K(static_cast<const Block*>(w), nrows, static_cast<const Act*>(x), xs, nb, acts, y, ys);
    };
  }
}
template <typename Block, void (*K)(const Block*, float*, std::int64_t)>
void ErasedDequant(const void* src, float* dst, std::int64_t nb) {
  K(static_cast<const Block*>(src), dst, nb);
}
template <typename Block, void (*K)(const Block*, std::int64_t, std::int64_t, std::int64_t, const PlaneBytes&,
                                    std::uint8_t* const[kPackPlanes])>
void ErasedPack(const void* w, std::int64_t rows, std::int64_t nb, std::int64_t sub, const PlaneBytes& pb,
                std::uint8_t* const plane[kPackPlanes]) {
  K(static_cast<const Block*>(w), rows, nb, sub, pb, plane);
}
template <typename Act, PackedKernel<Act>* K>
constexpr PackedFn ErasedPacked() {
  if constexpr (K == nullptr) {
    return nullptr;
  } else {
    return [](const PackedWeights& w, std::int64_t r0, std::int64_t r1, const void* x, std::int64_t xs, int acts,
              float* y, std::int64_t ys,
              const AmxStagedActs* staged) { K(w, r0, r1, static_cast<const Act*>(x), xs, acts, y, ys, staged); };
  }
}

template <typename Act>
constexpr ActFormat kActFormat = std::is_same_v<Act, ActQ8>    ? ActFormat::kQ8
                                 : std::is_same_v<Act, ActQ8K> ? ActFormat::kQ8K
                                                               : ActFormat::kFloat;
template <typename Act>
constexpr std::int64_t kActElements = std::is_same_v<Act, ActQ8>    ? 32
                                      : std::is_same_v<Act, ActQ8K> ? 256
                                                                    : 1;

// The row of kType from what kRowOf() states and the GGUF table's facts.
// (The Row comes from a function, not as a template argument itself: GCC 12
// refuses function pointers inside class-type template arguments.)
template <GgmlType kType, auto kRowOf>
constexpr WeightTypeTraits Make() {
  constexpr auto kRow = kRowOf();
  using Block = typename decltype(kRow)::Block;
  using Act = typename decltype(kRow)::Act;
  constexpr const GgmlTypeInfo* info = FindGgmlTypeInfo(kType);
  static_assert(info != nullptr && sizeof(Block) == static_cast<std::size_t>(info->bytes),
                "the block struct must have the GGUF table's block bytes");
  static_assert(info->block % kActElements<Act> == 0, "a weight block must hold whole activation blocks");
  static_assert(kRow.dequantize != nullptr && kRow.rows[0] != nullptr,
                "every type has a dequantizer and a scalar twin");
  static_assert((kRow.packed[0] == nullptr && kRow.packed[1] == nullptr && kRow.packed[2] == nullptr &&
                 kRow.packed[3] == nullptr) ||
                    (kRow.pack != nullptr && kRow.planes.codes > 0),
                "a packed kernel needs the type's packed layout");
  WeightTypeTraits t{
      .type = kType,
      .name = info->name,
      .block = info->block,
      .bytes = info->bytes,
      .dequantize = ErasedDequant<Block, kRow.dequantize>,
      .act = kActFormat<Act>,
      .act_blocks = info->block / kActElements<Act>,
      .level = {{ErasedRows<Block, Act, kRow.rows[0]>(), ErasedPacked<Act, kRow.packed[0]>()},
                {ErasedRows<Block, Act, kRow.rows[1]>(), ErasedPacked<Act, kRow.packed[1]>()},
                {ErasedRows<Block, Act, kRow.rows[2]>(), ErasedPacked<Act, kRow.packed[2]>()},
                {ErasedRows<Block, Act, kRow.rows[3]>(), ErasedPacked<Act, kRow.packed[3]>()}},
      .packing = {.planes = kRow.planes, .pack = nullptr},
  };
  for (int l = 1; l < kIntLevels; ++l) {
    if (t.level[l].rows == nullptr) t.level[l].rows = t.level[l - 1].rows;
  }
  if constexpr (kRow.pack != nullptr) t.packing.pack = ErasedPack<Block, kRow.pack>;
  return t;
}

// The SIMD levels' kernels exist on x86-64 builds only (dispatch.h).
#ifdef KVSHARE_HAVE_X86_KERNELS
#define KVSHARE_X86(kernel) kernel
#else
#define KVSHARE_X86(kernel) nullptr
#endif

// One row: KVSHARE_TYPE(GgmlType, block struct, activation type, what the
// Row states).
#define KVSHARE_TYPE(TYPE, BLOCK, ACT, ...) Make<GgmlType::TYPE, [] { return Row<BLOCK, ACT>{__VA_ARGS__}; }>()
// The packed kernels of the 32-element types (ActQ8) and the K-quants (ActQ8K).
#define KVSHARE_PACKED_Q32 \
  { nullptr, KVSHARE_X86(Avx2PackedRows), KVSHARE_X86(Avx512PackedRows), KVSHARE_X86(AmxPackedRows) }
#define KVSHARE_PACKED_K \
  { nullptr, KVSHARE_X86(Avx2PackedKRows), KVSHARE_X86(Avx512PackedKRows), KVSHARE_X86(AmxPackedKRows) }
// The IQ1-IQ3 grid types: one kernel template per level over their blocks.
#define KVSHARE_IQ_TYPE(TYPE, BLOCK)                                                                           \
  KVSHARE_TYPE(TYPE, BLOCK, ActQ8K, .dequantize = DequantIq<BLOCK>,                                            \
               .rows = {ScalarIqRows<BLOCK>, KVSHARE_X86(Avx2IqRows<BLOCK>), KVSHARE_X86(Avx512IqRows<BLOCK>), \
                        KVSHARE_X86(AmxIqRows<BLOCK>)})

// Row order: SupportedWeightTypesString's. F32 / F16 / BF16 take float dot
// products at every level (kernels/float.cc dispatches itself), so they name
// only the first. Which kernel is which and why: kernels/dispatch.h.
constexpr WeightTypeTraits kTypes[] = {
    KVSHARE_TYPE(kF32, float, float, .dequantize = DequantF32, .rows = {RowsF32}),
    KVSHARE_TYPE(kF16, std::uint16_t, float, .dequantize = DequantF16, .rows = {RowsF16}),
    KVSHARE_TYPE(kBF16, std::uint16_t, float, .dequantize = DequantBF16, .rows = {RowsBF16}),
    KVSHARE_TYPE(kQ8_0, BlockQ8_0, ActQ8, .dequantize = DequantQ8_0,
                 .rows = {ScalarQ8_0Rows, KVSHARE_X86(Avx2Q8_0Rows), KVSHARE_X86(Avx512Q8_0Rows)},
                 .packed = KVSHARE_PACKED_Q32, .planes = {.codes = 512, .d = 32}, .pack = PackRows),
    KVSHARE_TYPE(kQ4_0, BlockQ4_0, ActQ8, .dequantize = DequantQ4_0,
                 .rows = {ScalarQ4_0Rows, KVSHARE_X86(Avx2Q4_0Rows), KVSHARE_X86(Avx512Q4_0Rows)},
                 .packed = KVSHARE_PACKED_Q32, .planes = {.codes = 256, .d = 32}, .pack = PackRows),
    KVSHARE_TYPE(kQ4_1, BlockQ4_1, ActQ8, .dequantize = DequantQ4_1,
                 .rows = {ScalarQ4_1Rows, KVSHARE_X86(Avx2Q4_1Rows), KVSHARE_X86(Avx512Q4_1Rows)}),
    KVSHARE_TYPE(kQ5_0, BlockQ5_0, ActQ8, .dequantize = DequantQ5_0,
                 .rows = {ScalarQ5_0Rows, KVSHARE_X86(Avx2Q5_0Rows), KVSHARE_X86(Avx512Q5_0Rows)},
                 .packed = KVSHARE_PACKED_Q32, .planes = {.codes = 256, .high = 64, .d = 32}, .pack = PackRows),
    KVSHARE_TYPE(kQ5_1, BlockQ5_1, ActQ8, .dequantize = DequantQ5_1,
                 .rows = {ScalarQ5_1Rows, KVSHARE_X86(Avx2Q5_1Rows), KVSHARE_X86(Avx512Q5_1Rows)}),
    KVSHARE_TYPE(kQ2_K, BlockQ2_K, ActQ8K, .dequantize = DequantQ2_K,
                 .rows = {ScalarQ2_KRows, KVSHARE_X86(Avx2Q2_KRows)}, .packed = KVSHARE_PACKED_K,
                 .planes = {.codes = 1024, .subs = 256, .d = 32, .dmin = 32}, .pack = PackRows),
    KVSHARE_TYPE(kQ3_K, BlockQ3_K, ActQ8K, .dequantize = DequantQ3_K,
                 .rows = {ScalarQ3_KRows, KVSHARE_X86(Avx2Q3_KRows)}, .packed = KVSHARE_PACKED_K,
                 .planes = {.codes = 1024, .high = 512, .subs = 256, .d = 32}, .pack = PackRows),
    KVSHARE_TYPE(kQ4_K, BlockQ4_K, ActQ8K, .dequantize = DequantQ4_K,
                 .rows = {ScalarQ4_KRows, KVSHARE_X86(Avx2Q4_KRows), KVSHARE_X86(Avx512Q4_KRows)},
                 .packed = KVSHARE_PACKED_K, .planes = {.codes = 2048, .subs = 128, .mins = 128, .d = 32, .dmin = 32},
                 .pack = PackRows),
    KVSHARE_TYPE(kQ5_K, BlockQ5_K, ActQ8K, .dequantize = DequantQ5_K,
                 .rows = {ScalarQ5_KRows, KVSHARE_X86(Avx2Q5_KRows), KVSHARE_X86(Avx512Q5_KRows)}),
    KVSHARE_TYPE(kQ6_K, BlockQ6_K, ActQ8K, .dequantize = DequantQ6_K,
                 .rows = {ScalarQ6_KRows, KVSHARE_X86(Avx2Q6_KRows), KVSHARE_X86(Avx512Q6_KRows)},
                 .packed = KVSHARE_PACKED_K, .planes = {.codes = 2048, .high = 1024, .subs = 256, .d = 32},
                 .pack = PackRows),
    KVSHARE_IQ_TYPE(kIQ1_S, BlockIQ1_S),
    KVSHARE_IQ_TYPE(kIQ1_M, BlockIQ1_M),
    KVSHARE_IQ_TYPE(kIQ2_XXS, BlockIQ2_XXS),
    KVSHARE_IQ_TYPE(kIQ2_XS, BlockIQ2_XS),
    KVSHARE_IQ_TYPE(kIQ2_S, BlockIQ2_S),
    KVSHARE_IQ_TYPE(kIQ3_XXS, BlockIQ3_XXS),
    KVSHARE_IQ_TYPE(kIQ3_S, BlockIQ3_S),
    KVSHARE_TYPE(kIQ4_NL, BlockIQ4_NL, ActQ8, .dequantize = DequantIQ4_NL,
                 .rows = {ScalarIQ4_NLRows, KVSHARE_X86(Avx2IQ4_NLRows)}, .packed = KVSHARE_PACKED_Q32,
                 .planes = {.codes = 256, .d = 32}, .pack = PackRows),
    // Packed per 32-element sub-block: 8 packed blocks per block.
    KVSHARE_TYPE(kIQ4_XS, BlockIQ4_XS, ActQ8, .dequantize = DequantIQ4_XS,
                 .rows = {ScalarIQ4_XSRows, KVSHARE_X86(Avx2IQ4_XSRows)}, .packed = KVSHARE_PACKED_Q32,
                 .planes = {.codes = 256, .dsub = 64}, .pack = PackRows),
    KVSHARE_TYPE(kTQ1_0, BlockTQ1_0, ActQ8K, .dequantize = DequantTQ1_0,
                 .rows = {ScalarTQ1_0Rows, KVSHARE_X86(Avx2TQ1_0Rows)}),
    KVSHARE_TYPE(kTQ2_0, BlockTQ2_0, ActQ8K, .dequantize = DequantTQ2_0,
                 .rows = {ScalarTQ2_0Rows, KVSHARE_X86(Avx2TQ2_0Rows)}),
    KVSHARE_TYPE(kMXFP4, BlockMXFP4, ActQ8, .dequantize = DequantMXFP4,
                 .rows = {ScalarMXFP4Rows, KVSHARE_X86(Avx2MXFP4Rows)}, .packed = KVSHARE_PACKED_Q32,
                 .planes = {.codes = 256, .dsub = 64}, .pack = PackRows),
    KVSHARE_TYPE(kNVFP4, BlockNVFP4, ActQ8, .dequantize = DequantNVFP4,
                 .rows = {ScalarNVFP4Rows, KVSHARE_X86(Avx2NVFP4Rows)}),
    KVSHARE_TYPE(kQ1_0, BlockQ1_0, ActQ8, .dequantize = DequantQ1_0,
                 .rows = {ScalarQ1_0Rows, KVSHARE_X86(Avx2Q1_0Rows)}),
    KVSHARE_TYPE(kQ2_0, BlockQ2_0, ActQ8, .dequantize = DequantQ2_0,
                 .rows = {ScalarQ2_0Rows, KVSHARE_X86(Avx2Q2_0Rows)}),
};
#undef KVSHARE_IQ_TYPE
#undef KVSHARE_PACKED_K
#undef KVSHARE_PACKED_Q32
#undef KVSHARE_TYPE
#undef KVSHARE_X86

// FindWeightType's index: row by type id (GGUF ids are small).
constexpr std::size_t kMaxTypeId = 64;
constexpr std::array<const WeightTypeTraits*, kMaxTypeId> kIndex = [] {
  std::array<const WeightTypeTraits*, kMaxTypeId> index{};
  for (const WeightTypeTraits& t : kTypes) {
    const auto id = static_cast<std::size_t>(t.type);
    if (id >= kMaxTypeId || index[id] != nullptr) throw "a type id above kMaxTypeId, or a type listed twice";
    index[id] = &t;
  }
  return index;
}();

}  // namespace

const WeightTypeTraits* FindWeightType(GgmlType type) {
  const auto id = static_cast<std::size_t>(type);
  return id < kMaxTypeId ? kIndex[id] : nullptr;
}

std::span<const WeightTypeTraits> WeightTypes() { return kTypes; }

const std::string& PackableWeightTypesString() {
  static const std::string names = [] {
    std::string s, last;
    for (ActFormat act : {ActFormat::kQ8, ActFormat::kQ8K}) {
      for (const WeightTypeTraits& t : kTypes) {
        if (t.act != act || !t.Packable()) continue;
        if (!last.empty()) s += (s.empty() ? "" : ", ") + last;
        last = t.name;
      }
    }
    return s.empty() ? last : s + " or " + last;
  }();
  return names;
}

}  // namespace kvshare::detail
