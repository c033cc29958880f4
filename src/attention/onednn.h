// What the oneDNN-backed kernels (the GQA op's bf16 products,
// cpu_attend_bf16.cc; src/vision's conv2d.h, pointwise.h, bf16_matmul.h)
// share: the CPU engine and the OpenMP guard. Debian's oneDNN runs on OpenMP; the
// kernels run each fixed chunk of work on one kvshare pool thread with
// OpenMP held to that thread, so the pool's size is the number of cores used
// and, the chunking not depending on it, every output comes from the same
// oneDNN call whatever the thread count. Internal header.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace kvshare::detail {

const dnnl::engine& CpuEngine();

// Limits OpenMP (oneDNN's threading) to the calling thread while alive.
class OmpOneThread {
 public:
  OmpOneThread();
  ~OmpOneThread();
  OmpOneThread(const OmpOneThread&) = delete;
  OmpOneThread& operator=(const OmpOneThread&) = delete;

 private:
  int saved_;
};

}  // namespace kvshare::detail
