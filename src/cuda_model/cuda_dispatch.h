// Which GPU forward pass runs an architecture (MoveModelToCuda's dispatch,
// model_cuda.h): a plain function, compiled in every build and tested on the
// CPU. Internal to src/cuda_model.
#pragma once

#include <memory>
#include <string>

#include "kvshare/cuda_model/model_cuda.h"
#include "kvshare/model/model.h"

namespace kvshare::detail {

enum class CudaFamily { kNone, kGemma3, kGemma4, kGemma3n };

// gemma3 and gemma-embedding -> kGemma3, gemma4 -> kGemma4, gemma3n -> kGemma3n, anything else kNone.
CudaFamily CudaFamilyOf(const std::string& architecture);

// MoveModelToCuda's error for an architecture without a GPU forward pass: it
// names the architecture, the ones that run on the GPU, and device cpu.
std::string NoCudaFamilyMessage(const std::string& architecture);

// The GPU models (CUDA builds only; gemma3_cuda.cc, gemma4_cuda.cc,
// gemma3n_cuda.cc). Each checks for a usable device before uploading anything.
std::unique_ptr<Model> MakeCudaGemma3(std::unique_ptr<Model> cpu, const CudaModelOptions& options);
std::unique_ptr<Model> MakeCudaGemma4(std::unique_ptr<Model> cpu, const CudaModelOptions& options);
std::unique_ptr<Model> MakeCudaGemma3n(std::unique_ptr<Model> cpu, const CudaModelOptions& options);

}  // namespace kvshare::detail
