// The machine's peak int8 / bf16 multiply-accumulate rates, measured: the
// compute roof that the AMX matmul kernels (quant layer, kernels/amx/) set
// their MAC/s against (issue 48), as fma_peak.h is attention_bench.cc's.
#pragma once

namespace kvshare::bench {

// MACs per second summed over the threads of one measurement (wall time); 0 where the
// instruction cannot run here (no AMX, or no permission: AmxUsable, cpu_amx.h;
// no AVX-512 VNNI for vnni).
struct AmxPeakRates {
  double ssd = 0.0;   // tdpbssd: s8 x s8 -> s32, 16 x 16 x 64 MACs an instruction
  double usd = 0.0;   // tdpbusd: u8 x s8 -> s32, the same shape
  double bf16 = 0.0;  // tdpbf16ps: bf16 x bf16 -> fp32, 16 x 16 x 32
  double vnni = 0.0;  // vpdpbusd zmm: 64 MACs an instruction
  // The same MACs over the threads' summed CPU time (CLOCK_THREAD_CPUTIME_ID):
  // one thread's rate while it holds a core, which a shared host's other load
  // does not lower as it lowers the wall-time rates above.
  double ssd_core = 0.0, usd_core = 0.0, bf16_core = 0.0, vnni_core = 0.0;
  // The roofs of the int8 tile kernels whose outputs stay bitwise the
  // AVX-512 level's (src/quant/kernels/amx/), in the MACs those kernels
  // count: a 32-element type's block sums leave the tiles per block (per 16
  // x 16 x 32 MACs: A and B loads, a zeroed C, the product, a 1 KiB store;
  // two tile sets alternating as in packed_q32.cc), and a K-quant
  // super-block's scaled weights take two byte planes (per 16 x 16 x 256
  // MACs: 4 A and 8 B loads, 8 products, 2 zeroed C, 2 stores: packed_k.cc).
  // Only the tile instructions, on buffers in L1: no decode, no scale step.
  double q32_roof = 0.0, kquant_roof = 0.0;
  double q32_roof_core = 0.0, kquant_roof_core = 0.0;
  // The number of independent accumulators (C tiles, 1-6) that gave ssd,
  // usd and bf16: the best of 1-6, which covers the tile latency.
  int ssd_chains = 0, usd_chains = 0, bf16_chains = 0;
};

// Best of `reps` timed runs (after one warm-up) of independent accumulator
// chains on `threads` threads at once, each thread running its own chains.
// The threads are fresh std::threads, not a ThreadPool's workers, so the
// measurement leaves no tile state on threads the kernels run on (they read
// the configuration back anyway: UseTiles, common/amx_tiles.h).
AmxPeakRates MeasureAmxPeak(int threads, int reps);

}  // namespace kvshare::bench
