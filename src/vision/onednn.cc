// The oneDNN engine and the OpenMP guard (onednn.h).
#include "vision/onednn.h"

#include <omp.h>

namespace kvshare::detail {

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

OmpOneThread::OmpOneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
OmpOneThread::~OmpOneThread() { omp_set_num_threads(saved_); }

}  // namespace kvshare::detail
