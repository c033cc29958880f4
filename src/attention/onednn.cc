// The oneDNN engine, the OpenMP guard (onednn.h) and the bf16 matmul
// support query (bf16_support.h).
#include "attention/onednn.h"

#include <omp.h>

#include "attention/bf16_support.h"

namespace kvshare::detail {

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

OmpOneThread::OmpOneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
OmpOneThread::~OmpOneThread() { omp_set_num_threads(saved_); }

bool Bf16MatMulSupported() { return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core; }

bool Bf16MatMulNative() { return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16; }

}  // namespace kvshare::detail
