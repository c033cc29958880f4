// MoveModelToCuda (model_cuda.h): the dispatch by architecture, and in builds
// without the CUDA backend the error that says so.
#include "kvshare/cuda_model/model_cuda.h"

#include <utility>

#include "cuda_model/cuda_dispatch.h"
#include "kvshare/common/error.h"

namespace kvshare {
namespace detail {

CudaFamily CudaFamilyOf(const std::string& architecture) {
  // EmbeddingGemma: Gemma 3's layers, run bidirectionally (ModelConfig::causal).
  if (architecture == "gemma3" || architecture == "gemma-embedding") return CudaFamily::kGemma3;
  if (architecture == "gemma4") return CudaFamily::kGemma4;
  if (architecture == "gemma3n") return CudaFamily::kGemma3n;
  return CudaFamily::kNone;
}

std::string NoCudaFamilyMessage(const std::string& architecture) {
  return "MoveModelToCuda: architecture '" + architecture +
         "' has no GPU forward pass (gemma3, gemma3n, gemma4 and gemma-embedding have; the Gemma 4 assistant "
         "drafter runs on the GPU next to a GPU target, not as a model of its own); use device cpu";
}

}  // namespace detail

std::unique_ptr<Model> MoveModelToCuda(std::unique_ptr<Model> model, const CudaModelOptions& options) {
  if (model == nullptr) throw Error("MoveModelToCuda: no model");
#if KVSHARE_HAVE_CUDA_MODEL
  switch (detail::CudaFamilyOf(model->config().architecture)) {
    case detail::CudaFamily::kGemma3: return detail::MakeCudaGemma3(std::move(model), options);
    case detail::CudaFamily::kGemma4: return detail::MakeCudaGemma4(std::move(model), options);
    case detail::CudaFamily::kGemma3n: return detail::MakeCudaGemma3n(std::move(model), options);
    case detail::CudaFamily::kNone: break;
  }
  throw Error(detail::NoCudaFamilyMessage(model->config().architecture));
#else
  (void)options;
  throw Error(
      "device cuda: this kvshare was built without CUDA (no nvcc at configure, or -DKVSHARE_CUDA=OFF); "
      "rebuild with the CUDA toolkit on PATH, or use device cpu");
#endif
}

#if !KVSHARE_HAVE_CUDA_MODEL
CudaGraphStats CudaGraphStatsOf(const ModelState&) { return {}; }
void FailCudaGraphCaptures(ModelState&, int) {}
#endif  // otherwise in cuda_decoder.cc

}  // namespace kvshare
