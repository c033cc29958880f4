// The score (Q K^T) and value (P V) products of the blocked CPU kernel
// (cpu_attend.cc) in bf16 on Intel AMX tiles, for GqaMatMulPrecision::kBf16
// (gqa.h). Internal header; the definitions are compiled with the AMX flags
// and entered only when AmxAttendUsable().
//
// Arithmetic (tdpbf16ps, Intel SDM): the scaled queries, the keys, the
// probabilities and the values are rounded to bf16 (nearest even); each
// product of two bf16 numbers is exact in f32 and is added to an f32
// accumulator in a fixed order (head dimensions, or a block's keys, in pairs
// from the first), with denormals flushed. A score or a block's P V sum of one
// query row depends only on that row and the keys: never on the other rows of
// a call, the row's place in a tile, or the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/attend.h"

namespace kvshare::detail {

// Whether the tiles serve kBf16 in this process: AMX usable (cpu_amx.h,
// AmxAllowed: the OS permission granted and KVSHARE_KERNEL not holding the
// kernels below amx) and AVX512-BF16 for the roundings.
bool AmxAttendUsable();

// The queries of one tile item, rounded to bf16 and laid out as the tiles'
// B operand (per 16 query rows and 32 head dimensions, 16 rows of 16 dim
// pairs), zero-padded to 16 rows and to a multiple of 32 dimensions.
struct AmxQueries {
  std::vector<std::uint16_t> packed;
  std::size_t rows = 0;  // query rows (rp of the kernel)
  std::size_t head_size = 0;
};

// Packs rows [0, rows) of qs ([rows, H] f32, already scaled) into q.
void AmxPackQueries(const float* qs, std::size_t rows, std::size_t H, AmxQueries* q);

// Scores of nk keys (K rows at element offsets koff[0, nk) of k; float32,
// float16 or bfloat16) against the packed queries: x[r * ldx + j] for rows
// r < q.rows and j < RoundUp(nk, 16) (keys past nk score 0). Row groups of
// group_rows rows whose active[g] is 0 may be skipped.
void AmxScoreBlock(const AmxQueries& q, const KvSource& k, const std::int64_t* koff, std::size_t nk,
                   const char* active, std::size_t group_rows, float* x, std::size_t ldx);

// acc[r] = alpha[r] * acc[r] + sum_{j < nk} p[r * ldp + j] * v_j (fma, the
// sum in bf16 products as above) over the H columns, for the rows r < rows of
// the row groups (group_rows rows each) with active[g]; v_j is the V row at
// element offset voff[j] of v. Other rows are not touched.
void AmxPvBlock(float* acc, std::size_t H, const float* alpha, const float* p, std::size_t ldp, const KvSource& v,
                const std::int64_t* voff, std::size_t nk, const char* active, std::size_t group_rows,
                std::size_t rows);

}  // namespace kvshare::detail
