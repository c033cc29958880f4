// kvshare/model_info.h — a human-readable summary of a GGUF model (the
// `kvshare info MODEL` text) and the name of the matmul kernel level the
// process runs (model layer; `kvshare info` / `bench` print both).
#pragma once

#include <ostream>

#include "kvshare/gguf.h"

namespace kvshare {

// Prints the file's version and size, architecture, the `<arch>.*`
// hyperparameters found in metadata, tokenizer summary, and a table of tensor
// types with tensor counts, element counts and byte sizes. Never throws on a
// valid GgufFile (missing keys are shown as absent).
void PrintModelInfo(const GgufFile& file, std::ostream& os);

// The matmul kernel level this process runs, as KVSHARE_KERNEL spells it:
// "scalar", "avx2", "avx512vnni" or "float" (the CPU's best int8 level, or
// KVSHARE_KERNEL when it names one this build and CPU can run). Never throws.
const char* MatMulKernelName();

}  // namespace kvshare
