// A model's forward pass on an NVIDIA GPU (src/cuda_model/; built when the
// CUDA backend is, KVSHARE_CUDA).
#pragma once

#include <memory>

#include "kvshare/model/model.h"

namespace kvshare {

// Moves a loaded Gemma 3 model to the GPU and returns it as a Model whose
// states keep their KV cache in device memory (KvCacheOptions::device = kCuda,
// the same layer plan, window rings and sharing) and whose Forward runs every
// layer there:
//  - weights dequantized at load to bfloat16 (the matrices, the embedding /
//    tied LM head; about 2 bytes per parameter of device memory), norm
//    weights float32;
//  - projections through cuBLAS (bf16 x bf16, fp32 accumulation and output);
//    activations are rounded to bf16 at each projection's input;
//  - RMSNorm, GeGLU, residuals in fp32; attention through
//    GroupQueryAttention on the device cache (its tensor-core kernel for fp16 /
//    bf16 caches);
//  - logits [num_logits, n_vocab] fp32, copied back to the host.
// The logits follow the CPU model's within bf16 rounding (tests/cuda_model_test.cc
// compares them on a random tiny Gemma 3). ForwardBatch takes one entry per call
// (any row); NewState takes the CPU model's options.
// Throws kvshare::Error for a build without CUDA, no usable GPU, an
// architecture other than gemma3, or device memory that runs out.
std::unique_ptr<Model> MoveModelToCuda(std::unique_ptr<Model> model);

}  // namespace kvshare
