// kvshare/quant/kernel_level.h — the matmul kernel level this process runs
// (quant layer, src/quant/quant_matmul.cc; `kvshare info` and `bench` print it).
#pragma once

#include <string>

namespace kvshare {

// The level as KVSHARE_KERNEL spells it: "scalar", "avx2", "avx512vnni",
// "amx" or "float" (the CPU's best int8 level, or KVSHARE_KERNEL when it names one this
// build and CPU can run, or the last SetMatMulKernel). Never throws.
const char* MatMulKernelName();

// MatMulKernelName with what the level uses, and on an x86-64 CPU below the
// AMX level why the tiles are not used (the CPU, the OS or KVSHARE_KERNEL),
// e.g. "amx (AMX-INT8 tiles for prefill and batched steps of the packed
// types, AVX-512 VNNI for the rest)". For `kvshare info`; never throws.
std::string MatMulKernelDescription();

// Makes `name` (KVSHARE_KERNEL's names; "avx512" is "avx512vnni") the level
// of this process's matrix products from the next product on: for comparing
// levels in one process (`kvshare bench --kernels`), where a shared host's
// speed drifts between processes. Call it between forward passes, never
// while a product runs. Weights keep their load-time packing (the int8
// levels share the packed layout; a level without a packed kernel for a type
// reads the GGUF layout), and attention and float weights keep the tile use
// chosen at start (KVSHARE_KERNEL below amx keeps them off the AMX tiles).
// Throws kvshare::Error for a name that is no level, or a level this build
// and CPU cannot run (the message lists those it can).
void SetMatMulKernel(const std::string& name);

}  // namespace kvshare
