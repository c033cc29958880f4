// MoveModelToCuda in builds without the CUDA backend (model_cuda.h); CUDA
// builds define it in src/cuda_model/ instead.
#include "kvshare/common/error.h"
#include "kvshare/cuda_model/gemma3_cuda.h"

#if !KVSHARE_HAVE_CUDA_MODEL
namespace kvshare {

std::unique_ptr<Model> MoveModelToCuda(std::unique_ptr<Model>) {
  throw Error(
      "device cuda: this kvshare was built without CUDA (no nvcc at configure, or -DKVSHARE_CUDA=OFF); "
      "rebuild with the CUDA toolkit on PATH, or use device cpu");
}

}  // namespace kvshare
#endif
