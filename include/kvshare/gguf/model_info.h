// kvshare/gguf/model_info.h — a human-readable summary of a GGUF model, the
// `kvshare info MODEL` text (gguf layer, src/gguf/model_info.cc).
#pragma once

#include <ostream>

#include "kvshare/gguf/gguf.h"

namespace kvshare {

// Prints the file's version and size, architecture, the `<arch>.*`
// hyperparameters found in metadata, tokenizer summary, and a table of tensor
// types with tensor counts, element counts and byte sizes. Never throws on a
// valid GgufFile (missing keys are shown as absent).
void PrintModelInfo(const GgufFile& file, std::ostream& os);

}  // namespace kvshare
