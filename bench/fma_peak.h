// The machine's peak fp32 multiply-add rate, measured: the compute roof that
// attention_bench.cc sets its FLOPS against (as the triad is its memory roof).
#pragma once

#include "kvshare/common/thread_pool.h"

namespace kvshare::bench {

// Best of `reps` runs of independent fp32 FMA chains on every thread of
// `pool` (4 equal items per thread), with the widest SIMD target the CPU supports
// (Highway dynamic dispatch): flops per second, one FMA = 2 flops per lane.
double FmaPeakFlops(ThreadPool* pool, int reps);

}  // namespace kvshare::bench
