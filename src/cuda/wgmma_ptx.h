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
// not hang the GPU: after kStallNs of the global timer the thread traps and
// the launch fails ("unspecified launch failure" at the op's
// synchronization). A count of polls would not bound the time: try_wait
// suspends the thread for a system-dependent time per poll (PTX ISA,
// mbarrier.try_wait). Only the producer thread checks: the consumers' waits
// stay bare (a poll counter there made ptxas spill their accumulators).
inline constexpr std::uint64_t kStallNs = 4000000000ULL;  // legitimate waits last microseconds
__device__ inline std::uint64_t GlobalTimerNs() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
template <bool kTrap>
__device__ inline void MbarWait(std::uint32_t bar, std::uint32_t parity) {
  std::uint64_t since = 0;
  for (;;) {
    std::uint32_t done = 0;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    if (done != 0) return;
    if constexpr (kTrap) {
      const std::uint64_t now = GlobalTimerNs();
      if (since == 0) {
        since = now;
      } else if (now - since > kStallNs) {
        asm volatile("trap;\n");
      }
    }
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

// The accumulator operands of a wgmma, 16 at a time: "%0, ..., %15" and so
// on, and their constraints from d[o].
#define KVSHARE_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KVSHARE_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KVSHARE_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define KVSHARE_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KVSHARE_WG_D16(o)                                                                                         \
  "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]),          \
      "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15])
// The instruction for PTX type TY after the predicate p = (operand %P != 0).
#define KVSHARE_WG_HEAD(P, N, TY) \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " "
// Runs the statement macro M with the PTX type name of T.
#define KVSHARE_WG_TYPED(M)                  \
  if constexpr (std::is_same_v<T, __half>) { \
    M("f16");                                \
  } else {                                   \
    M("bf16");                               \
  }

// d = A (64 x 16, shared, K-major) * B (16 x N, shared, K-major), + d when
// scale_d; d holds N / 2 accumulators.
template <typename T>
__device__ inline void WgmmaSS32(float (&d)[16], std::uint64_t a, std::uint64_t b, int scale_d) {
#define KVSHARE_WG_SS32(TY)                                                                     \
  asm volatile(KVSHARE_WG_HEAD(18, 32, TY) "{" KVSHARE_WG_R0 "}, %16, %17, p, 1, 1, 0, 0;\n}\n" \
               : KVSHARE_WG_D16(0)                                                              \
               : "l"(a), "l"(b), "r"(scale_d))
  KVSHARE_WG_TYPED(KVSHARE_WG_SS32)
#undef KVSHARE_WG_SS32
}
template <typename T>
__device__ inline void WgmmaSS64(float (&d)[32], std::uint64_t a, std::uint64_t b, int scale_d) {
#define KVSHARE_WG_SS64(TY)                                                                                        \
  asm volatile(KVSHARE_WG_HEAD(34, 64, TY) "{" KVSHARE_WG_R0 ", " KVSHARE_WG_R1 "}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
               : KVSHARE_WG_D16(0), KVSHARE_WG_D16(16)                                                             \
               : "l"(a), "l"(b), "r"(scale_d))
  KVSHARE_WG_TYPED(KVSHARE_WG_SS64)
#undef KVSHARE_WG_SS64
}
template <typename T>
__device__ inline void WgmmaSS128(float (&d)[64], std::uint64_t a, std::uint64_t b, int scale_d) {
#define KVSHARE_WG_SS128(TY)                                                                                           \
  asm volatile(KVSHARE_WG_HEAD(66, 128, TY) "{" KVSHARE_WG_R0 ", " KVSHARE_WG_R1 ", " KVSHARE_WG_R2 ", " KVSHARE_WG_R3 \
                                            "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                         \
               : KVSHARE_WG_D16(0), KVSHARE_WG_D16(16), KVSHARE_WG_D16(32), KVSHARE_WG_D16(48)                         \
               : "l"(a), "l"(b), "r"(scale_d))
  KVSHARE_WG_TYPED(KVSHARE_WG_SS128)
#undef KVSHARE_WG_SS128
}

// d += A (64 x 16, registers: a wgmma A fragment) * B (16 x 128, shared,
// MN-major: read transposed); d holds 64 accumulators.
template <typename T>
__device__ inline void WgmmaRS128(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
#define KVSHARE_WG_RS128(TY)                                                                                           \
  asm volatile(KVSHARE_WG_HEAD(69, 128, TY) "{" KVSHARE_WG_R0 ", " KVSHARE_WG_R1 ", " KVSHARE_WG_R2 ", " KVSHARE_WG_R3 \
                                            "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                           \
               : KVSHARE_WG_D16(0), KVSHARE_WG_D16(16), KVSHARE_WG_D16(32), KVSHARE_WG_D16(48)                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
  KVSHARE_WG_TYPED(KVSHARE_WG_RS128)
#undef KVSHARE_WG_RS128
}
#undef KVSHARE_WG_TYPED
#undef KVSHARE_WG_HEAD
#undef KVSHARE_WG_D16
#undef KVSHARE_WG_R3
#undef KVSHARE_WG_R2
#undef KVSHARE_WG_R1
#undef KVSHARE_WG_R0

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
