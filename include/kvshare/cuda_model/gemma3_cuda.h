// Renamed to kvshare/cuda_model/model_cuda.h (the GPU model runs more than
// Gemma 3); this forward keeps existing includes building. Include
// model_cuda.h in new code.
#pragma once

#include "kvshare/cuda_model/model_cuda.h"
