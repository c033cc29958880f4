// kvshare/vision/vision_encoder.h — the image encoders of the Gemma families,
// loaded from an mmproj GGUF as llama.cpp's converter writes it
// (convert_hf_to_gguf.py --mmproj; docs/architecture.md §6, docs/vision.md).
//
// VisionEncoder::Load reads `clip.projector_type` (Gemma 3) or
// `clip.vision.projector_type` (Gemma 3n, Gemma 4) and builds that encoder:
//   gemma3    SigLIP ViT (fixed 896 px, 14 px patches) + 4x4 average pool +
//             RMSNorm + projection: 256 tokens per image (crop)
//   gemma3nv  MobileNet-V5 (fixed 768 px) + multi-scale fusion + embedder:
//             256 tokens
//   gemma4v   Gemma 4 ViT (16 px patches, 2-D RoPE, variable resolution,
//             3x3 pooling): (H/48)(W/48) tokens, at most the soft-token budget
//   gemma4uv  Gemma 4 unified: per 48 px patch LayerNorm + dense + 2-D
//             position table: (H/48)(W/48) tokens
// Every hyperparameter comes from the file's keys and tensor shapes (several
// keys are dummies for these families; shapes win).
//
// Use: Preprocess(image) gives the pixel tensors the HF processor would give
// (Gemma 3 with pan-and-scan: the full image, then the crops); Encode(pixels)
// gives that tensor's soft tokens [tokens, n_embd_text] as the language
// model's first layer takes them (not scaled by sqrt(n_embd)).
//
// Precision (VisionEncoderOptions::precision; docs/vision.md "Precision"):
// the transformer encoders (gemma3, gemma4v) run their matrix products either
// in float32 (F16 / BF16 weights widened exactly; within 1e-5 of HF's float32
// forward) or with bf16 inputs and float32 accumulation: weights and
// activations rounded to bf16 (nearest even) for the linears and for
// attention's Q K^T and P V, everything else (norms, softmax, GELU, RoPE,
// residuals, pooling) float32. The released checkpoints are bf16, and
// llama.cpp itself rounds activations to f16 for F16 weights. gemma3nv and
// gemma4uv always run float32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvshare/common/encoder_precision.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/vision/image.h"

namespace kvshare {

class ThreadPool;

enum class ProjectorType { kGemma3, kGemma3nV, kGemma4V, kGemma4UV };
// "gemma3", "gemma3nv", "gemma4v", "gemma4uv".
const char* ProjectorTypeName(ProjectorType type);

// The encoder's geometry, from the mmproj's keys and shapes.
struct VisionConfig {
  ProjectorType projector = ProjectorType::kGemma3;
  int image_size = 0;  // fixed input side (Gemma 3: 896, Gemma 3n: 768); 0: variable (Gemma 4)
  int patch_size = 0;  // pixels per patch side (14 / 16; unified: 48; Gemma 3n: image_size / 16)
  int n_embd = 0;      // encoder width (Gemma 4 unified: its dense embedder's, mm_embed_dim)
  int n_ff = 0;        // 0 where the encoder has no MLP blocks
  int n_layer = 0;     // transformer blocks (0 for Gemma 3n's CNN and Gemma 4 unified)
  int n_head = 0;
  int head_dim = 0;
  int pool = 1;         // patches per token side (Gemma 3: 4, Gemma 4: 3, unified 1)
  int n_embd_text = 0;  // output width: the text model's n_embd
  float eps = 1e-6f;
  float image_mean[3] = {0.f, 0.f, 0.f};
  float image_std[3] = {1.f, 1.f, 1.f};
};

// Throws kvshare::Error naming both widths unless the mmproj's soft tokens
// (config.n_embd_text) have the text model's embedding width: a projector
// converted from another model (size) than the text GGUF.
void CheckMmprojFitsText(const VisionConfig& config, int text_n_embd);

// One preprocessed image (or crop): float32 [3, height, width] (CHW), the
// values the HF processor hands the model (resized, rescaled by 1/255 and,
// where the family does, normalized).
struct PixelTensor {
  int height = 0;
  int width = 0;
  std::vector<float> chw;
};

struct PreprocessOptions {
  // Gemma 4: the soft-token budget, one of 70, 140, 280, 560, 1120 (HF
  // Gemma4ImageProcessor max_soft_tokens); the image is resized, up or down,
  // aspect kept, to the largest multiple-of-48 size within it.
  int max_soft_tokens = 280;
  // Gemma 3: HF's pan-and-scan (off in the released processor config): images
  // with long/short >= 1.2 also give 2..4 crops along the long side.
  bool pan_and_scan = false;
};

struct VisionEncoderOptions {
  EncoderPrecision precision = EncoderPrecision::kAuto;
};

class VisionEncoder {
 public:
  // Opens and validates an mmproj file. Throws kvshare::Error for a file that
  // is not an mmproj (general.type / architecture), a projector type this
  // encoder does not run (naming it and the ones it runs), or missing or
  // ill-shaped tensors, or kBF16 on a CPU without AVX-512.
  static std::unique_ptr<VisionEncoder> Load(const std::string& path, const VisionEncoderOptions& options = {});
  virtual ~VisionEncoder() = default;

  virtual const VisionConfig& config() const = 0;
  virtual const GgufFile& gguf() const = 0;
  // The precision Encode runs at: kF32 or kBF16 (options.precision resolved).
  virtual EncoderPrecision precision() const { return EncoderPrecision::kF32; }

  // The pixel tensors of `image` (one, or with Gemma 3's pan-and-scan the
  // full image then its crops). Throws kvshare::Error on an empty image or a
  // budget outside the allowed set.
  virtual std::vector<PixelTensor> Preprocess(const Image& image, const PreprocessOptions& options = {}) const = 0;
  // Soft tokens of one pixel tensor: its token count (Encode's rows).
  virtual int TokensFor(const PixelTensor& pixels) const = 0;
  // Soft tokens of a height x width pixel tensor of this encoder's geometry
  // (one per patch_size * pool cell), without the tensor: what TokensFor
  // gives for it.
  int TokensForSize(int height, int width) const {
    const int cell = config().patch_size * config().pool;
    return (height / cell) * (width / cell);
  }
  // [TokensFor(pixels), n_embd_text] row-major. Throws kvshare::Error on a
  // tensor of the wrong geometry (fixed-size encoders: image_size square;
  // Gemma 4: sides multiples of 48). Results do not depend on the thread
  // count of `pool` (null: the calling thread).
  virtual std::vector<float> Encode(const PixelTensor& pixels, ThreadPool* pool) const = 0;
  // Gemma 3n only (HF Gemma3nMultimodalEmbedder's token path, which embeds
  // the ids of the vision vocabulary, e.g. <end_of_image>): one row per
  // vision-vocabulary entry, [rows of mm.embedding, n_embd_text] row-major:
  // RMSNorm(mm.embedding[i], mm.hard_emb_norm), mm.input_projection, RMSNorm
  // without weight. Empty for the other families.
  virtual std::vector<float> HardTokenRows(ThreadPool* pool) const {
    (void)pool;
    return {};
  }
};

}  // namespace kvshare
