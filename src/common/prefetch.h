// PrefetchToL2: software prefetch of a byte range into L2 (prefetcht1), one
// request per 64-byte line — for the streams the hardware prefetchers do not
// run far enough ahead of: K / V rows in the attention kernel
// (cpu_attend.cc), packed weight blocks in the matmul kernels (src/quant/kernels/packed.h).
#pragma once

#include <cstddef>

namespace kvshare::detail {

inline void PrefetchToL2(const void* p, std::size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (std::size_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 2);
}

}  // namespace kvshare::detail
