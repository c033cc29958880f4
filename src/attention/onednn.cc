// The oneDNN engine, the OpenMP guard (onednn.h) and the bf16 matmul
// support query (bf16_support.h).
#include "attention/onednn.h"

#include <omp.h>

#include "attention/bf16_support.h"

namespace kvshare::detail {

namespace {

// Before oneDNN's first call, oneDNN is held below AMX: Debian's oneDNN 2.6
// runs AMX kernels wherever CPUID reports AMX, and on this project's AMX
// hosts (Xeon, KVM) they die with SIGILL at their first tileloadd, with and
// without the Linux tile permission (AmxUsable grants it; tests
// AttentionBf16Test.*, 2026-11-28). kvshare's own AMX kernels are in
// src/quant/kernels/amx/.
void PrepareOneDnn() {
  static const bool once = [] {
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_bf16);
    } catch (const dnnl::error&) {
      // oneDNN chose its ISA already (a call outside this file): it keeps it.
    }
    return true;
  }();
  (void)once;
}

}  // namespace

const dnnl::engine& CpuEngine() {
  PrepareOneDnn();
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

OmpOneThread::OmpOneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
OmpOneThread::~OmpOneThread() { omp_set_num_threads(saved_); }

bool Bf16MatMulSupported() {
  PrepareOneDnn();
  return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
}

bool Bf16MatMulNative() {
  PrepareOneDnn();
  return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
}

}  // namespace kvshare::detail
