// kvshare/quant/kernel_level.h — the matmul kernel level this process runs
// (quant layer, src/quant/quant_matmul.cc; `kvshare info` and `bench` print it).
#pragma once

#include <string>

namespace kvshare {

// The level as KVSHARE_KERNEL spells it: "scalar", "avx2", "avx512vnni",
// "amx" or "float" (the CPU's best int8 level, or KVSHARE_KERNEL when it names one this
// build and CPU can run). Never throws.
const char* MatMulKernelName();

// MatMulKernelName with what the level uses, and on an x86-64 CPU below the
// AMX level why the tiles are not used (the CPU, the OS or KVSHARE_KERNEL),
// e.g. "amx (AMX-INT8 tiles for prefill and batched steps of the packed
// types, AVX-512 VNNI for the rest)". For `kvshare info`; never throws.
std::string MatMulKernelDescription();

}  // namespace kvshare
