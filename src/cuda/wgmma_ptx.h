// PTX of Hopper (sm_90a) for attend_wgmma_cuda.cu: mbarriers, TMA tensor
// loads, warpgroup MMA (wgmma) and its shared-memory descriptors, register
// reallocation. Device code only; include from sm_90a translation units.
// Internal header.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kvshare::detail::sm90 {

__device__ inline std::uint32_t SmemAddr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers ----------------------------------------------------------

__device__ inline void MbarInit(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the other threads and to the
// async proxy (TMA's complete_tx) before the block's barrier.
__device__ inline void MbarInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ inline void MbarArrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also expects `bytes` of TMA writes before the phase ends.
__device__ inline void MbarArriveExpectTx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Spins until the phase of parity `parity` of bar has completed. With
// kTrap, a phase that never completes (a logic error in the pipeline) does
// not hang the GPU: after 2^26 polls (each suspends the thread for a while:
// seconds in all) the thread traps and the launch fails ("unspecified launch
// failure" at the op's synchronization). Only the producer thread counts: a
// counter in the consumers' waits makes ptxas spill their accumulators.
template <bool kTrap>
__device__ inline void MbarWait(std::uint32_t bar, std::uint32_t parity) {
  for (std::uint32_t polls = 0;; ++polls) {
    std::uint32_t done = 0;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    if (done != 0) return;
    if (kTrap && polls == (1u << 26)) asm volatile("trap;\n");
  }
}

// ---- TMA ----------------------------------------------------------------

// The box at coordinates (c0, c1, c2, c3) of the tensor map at `map` (a
// __grid_constant__ parameter) into shared memory at dst (1024-byte aligned
// for the 128-byte swizzle), completing `bytes` on bar.
__device__ inline void TmaLoad4(std::uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
__device__ inline void PrefetchTensorMap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// Shared memory written by ordinary stores, read next by wgmma or TMA (the
// async proxy): each writing thread fences before the barrier.
__device__ inline void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Barrier `id` (1-15; 0 is __syncthreads) over `threads` threads.
__device__ inline void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- register reallocation ----------------------------------------------

template <int N>
__device__ inline void RegAlloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void RegDealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- wgmma --------------------------------------------------------------

// Descriptor of a shared-memory operand in the 128-byte swizzle layout
// (rows of 128 bytes, 16-byte chunks permuted by row mod 8, 8-row atoms of
// 1024 bytes, 1024-byte aligned): start address, leading and stride byte
// offsets (16-byte units), swizzle mode 1 (128 B) in bits 62-63.
//  K-major (Q, K: the reduction axis along the 128-byte rows): lbo unused
//    (1), sbo = 1024 (the next 8 rows); a step of 16 along K is +32 bytes of
//    the start address within the atom.
//  MN-major (V: keys along the rows, dims along the 128 bytes): lbo = the
//    bytes from one 64-dim atom column to the next, sbo = 1024 (the next 8
//    keys).
__device__ inline std::uint64_t SmemDesc(std::uint32_t addr, std::uint32_t lbo, std::uint32_t sbo) {
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | static_cast<std::uint64_t>((lbo >> 4) & 0x3FFF) << 16 |
         static_cast<std::uint64_t>((sbo >> 4) & 0x3FFF) << 32 | 1ULL << 62;
}

__device__ inline void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of r across a wgmma wait (the
// asm statements above do not name the accumulators they complete).
template <int N>
__device__ inline void FenceRegs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

#define KVSHARE_WGMMA_SS32(TY)                                                                                      \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY                                                       \
      " "                                                                                                           \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "                                    \
      "%16, %17, p, 1, 1, 0, 0;\n}\n"                                                                               \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                    \
      : "l"(a), "l"(b), "r"(scale_d))

// d[16] = A (64 x 16, shared, K-major) * B (16 x 32, shared, K-major), + d when scale_d.
template <typename T>
__device__ inline void WgmmaSS32(float (&d)[16], std::uint64_t a, std::uint64_t b, int scale_d) {
  if constexpr (std::is_same_v<T, __half>) {
    KVSHARE_WGMMA_SS32("f16");
  } else {
    KVSHARE_WGMMA_SS32("bf16");
  }
}
#undef KVSHARE_WGMMA_SS32

#define KVSHARE_WGMMA_SS64(TY)                                                                                      \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY                                                       \
      " "                                                                                                           \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                           \
      "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                                               \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                   \
      : "l"(a), "l"(b), "r"(scale_d))

// d[32] = A (64 x 16, shared, K-major) * B (16 x 64, shared, K-major), + d when scale_d.
template <typename T>
__device__ inline void WgmmaSS64(float (&d)[32], std::uint64_t a, std::uint64_t b, int scale_d) {
  if constexpr (std::is_same_v<T, __half>) {
    KVSHARE_WGMMA_SS64("f16");
  } else {
    KVSHARE_WGMMA_SS64("bf16");
  }
}
#undef KVSHARE_WGMMA_SS64

#define KVSHARE_WGMMA_SS128(TY)                                                                                     \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY                                                      \
      " "                                                                                                           \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                            \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                            \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                           \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                                               \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                   \
      : "l"(a), "l"(b), "r"(scale_d))

// d[64] = A (64 x 16, shared, K-major) * B (16 x 128, shared, K-major), + d when scale_d.
template <typename T>
__device__ inline void WgmmaSS128(float (&d)[64], std::uint64_t a, std::uint64_t b, int scale_d) {
  if constexpr (std::is_same_v<T, __half>) {
    KVSHARE_WGMMA_SS128("f16");
  } else {
    KVSHARE_WGMMA_SS128("bf16");
  }
}
#undef KVSHARE_WGMMA_SS128

#define KVSHARE_WGMMA_RS128(TY)                                                                                     \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY                                                      \
      " "                                                                                                           \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                            \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                            \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                           \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                                 \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))

// d[64] += A (64 x 16, registers) * B (16 x 128, shared, MN-major: transposed).
template <typename T>
__device__ inline void WgmmaRS128(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
  if constexpr (std::is_same_v<T, __half>) {
    KVSHARE_WGMMA_RS128("f16");
  } else {
    KVSHARE_WGMMA_RS128("bf16");
  }
}
#undef KVSHARE_WGMMA_RS128

// d = A B (+ d when scale_d) over a 64 x KT score tile, K-major operands.
template <typename T, int KT>
__device__ inline void WgmmaSS(float (&d)[KT / 2], std::uint64_t a, std::uint64_t b, int scale_d) {
  static_assert(KT == 32 || KT == 64 || KT == 128, "score tile width");
  if constexpr (KT == 32) {
    WgmmaSS32<T>(d, a, b, scale_d);
  } else if constexpr (KT == 64) {
    WgmmaSS64<T>(d, a, b, scale_d);
  } else {
    WgmmaSS128<T>(d, a, b, scale_d);
  }
}

}  // namespace kvshare::detail::sm90
