// kvshare/quant/kernel_level.h — the matmul kernel level this process runs
// (quant layer, src/quant/quant_matmul.cc; `kvshare info` and `bench` print it).
#pragma once

namespace kvshare {

// The level as KVSHARE_KERNEL spells it: "scalar", "avx2", "avx512vnni",
// "amx" or "float" (the CPU's best int8 level, or KVSHARE_KERNEL when it names one this
// build and CPU can run). Never throws.
const char* MatMulKernelName();

}  // namespace kvshare
