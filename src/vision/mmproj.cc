// The mmproj GGUF's projector type and geometry (mmproj.h).
#include "vision/mmproj.h"

#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include "common/str.h"
#include "gguf/mmproj_tensors.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

namespace {

constexpr const char* kSupported = "gemma3, gemma3nv, gemma4v, gemma4uv";

void ReadMeanStd(const GgufFile& f, VisionConfig& c) {
  for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
    if (!f.Has(key)) continue;
    const std::vector<float> v = f.GetF32Array(key);
    if (v.size() != 3) throw Error(Str("mmproj ", f.name(), ": ", key, " has ", v.size(), " values, expected 3"));
    float* dst = std::string_view(key).ends_with("mean") ? c.image_mean : c.image_std;
    for (int i = 0; i < 3; ++i) dst[i] = v[static_cast<std::size_t>(i)];
  }
  for (float s : c.image_std) {
    if (!(s > 0.0f) || !std::isfinite(s)) {
      throw Error(Str("mmproj ", f.name(), ": clip.vision.image_std holds ", s, ", expected finite and > 0"));
    }
  }
  for (float m : c.image_mean) {
    if (!std::isfinite(m))
      throw Error(Str("mmproj ", f.name(), ": clip.vision.image_mean holds ", m, ", expected finite"));
  }
}

// The patch kernel {p, p, 3, d}: p and d.
void ReadPatchKernel(const GgufFile& f, VisionConfig& c) {
  const GgufTensor& k = MmprojTensorUpTo(f, "v.patch_embd.weight", 4);
  if (k.n_dims != 4 || k.ne[0] != k.ne[1] || k.ne[2] != 3 || k.ne[0] <= 0) {
    ThrowTensorShape(f, "v.patch_embd.weight", k, "a conv kernel [patch, patch, 3, n_embd]");
  }
  c.patch_size = TensorDim(k, 0);
  c.n_embd = TensorDim(k, 3);
}

// mm.input_projection.weight: ne = {n_embd, text} (a Linear), or {text,
// n_embd} (Gemma 3's (in, out) layout, `in_out`).
void ReadProjection(const GgufFile& f, VisionConfig& c, bool in_out) {
  const GgufTensor& w = MmprojTensorUpTo(f, "mm.input_projection.weight", 2);
  const int in = TensorDim(w, in_out ? 1 : 0), out = TensorDim(w, in_out ? 0 : 1);
  if (in != c.n_embd || out <= 0) {
    ThrowTensorShape(f, "mm.input_projection.weight", w,
                     Str(in_out ? Str("[n_embd_text, ", c.n_embd, "]") : Str("[", c.n_embd, ", n_embd_text]"),
                         " (the encoder width is ", c.n_embd, ")"));
  }
  c.n_embd_text = out;
}

void CheckHeads(const GgufFile& f, const VisionConfig& c) {
  if (c.n_head <= 0 || c.n_embd % c.n_head != 0) {
    throw Error(
        Str("mmproj ", f.name(), ": ", c.n_head, " attention heads do not divide the encoder width ", c.n_embd));
  }
}

void ReadGemma3(const GgufFile& f, VisionConfig& c) {
  ReadPatchKernel(f, c);
  const GgufTensor& pos = MmprojTensorUpTo(f, "v.position_embd.weight", 2);
  const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(pos.ne[1]))));
  if (pos.ne[0] != c.n_embd || static_cast<std::int64_t>(side) * side != pos.ne[1]) {
    ThrowTensorShape(f, "v.position_embd.weight", pos,
                     Str("[", c.n_embd, ", side * side] (one row per patch of a square grid)"));
  }
  c.image_size = side * c.patch_size;
  c.n_layer = CountMmprojBlocks(f, "v.blk.", "ln1.weight", "encoder");
  c.n_ff = Gemma3FfnWidth(f, c.n_embd);
  c.n_head = static_cast<int>(f.GetU32("clip.vision.attention.head_count"));
  CheckHeads(f, c);
  c.head_dim = c.n_embd / c.n_head;
  c.pool = static_cast<int>(f.GetU32Or("clip.vision.projector.scale_factor", 4));
  if (c.pool <= 0 || side % c.pool != 0) {
    throw Error(Str("mmproj ", f.name(), ": clip.vision.projector.scale_factor ", c.pool,
                    " does not divide the patch grid side ", side));
  }
  ReadProjection(f, c, /*in_out=*/true);
}

void ReadGemma3nV(const GgufFile& f, VisionConfig& c) {
  // MobileNet-V5: the transformer keys are dummies; the output grid is 16 x 16
  // cells of image_size / 16 pixels (mobilenet_v5 refines what it needs).
  c.image_size = static_cast<int>(f.GetU32("clip.vision.image_size"));
  if (c.image_size <= 0 || c.image_size % 16 != 0) {
    throw Error(
        Str("mmproj ", f.name(), ": clip.vision.image_size ", c.image_size, " is not a positive multiple of 16"));
  }
  c.patch_size = c.image_size / 16;
  const GgufTensor& w = MmprojTensorUpTo(f, "mm.input_projection.weight", 2);
  c.n_embd = TensorDim(w, 0);
  ReadProjection(f, c, /*in_out=*/false);
}

void ReadGemma4V(const GgufFile& f, VisionConfig& c) {
  ReadPatchKernel(f, c);
  c.n_layer = CountMmprojBlocks(f, "v.blk.", "ln1.weight", "encoder");
  const GgufTensor& qn = MmprojTensorUpTo(f, "v.blk.0.attn_q_norm.weight", 1);
  c.head_dim = TensorDim(qn, 0);
  if (c.head_dim <= 0 || c.head_dim % 4 != 0 || c.n_embd % c.head_dim != 0) {
    ThrowTensorShape(f, "v.blk.0.attn_q_norm.weight", qn,
                     Str("[head_dim] with head_dim a multiple of 4 dividing the width ", c.n_embd));
  }
  c.n_head = c.n_embd / c.head_dim;
  const GgufTensor& up = MmprojTensorUpTo(f, "v.blk.0.ffn_up.weight", 2);
  if (up.ne[0] != c.n_embd) {
    ThrowTensorShape(f, "v.blk.0.ffn_up.weight", up, Str("[", c.n_embd, ", n_ff]"));
  }
  c.n_ff = TensorDim(up, 1);
  c.pool = 3;  // not stored; HF Gemma4VisionConfig pooling_kernel_size, hard-coded in llama.cpp too
  ReadProjection(f, c, /*in_out=*/false);
}

void ReadGemma4UV(const GgufFile& f, VisionConfig& c) {
  const GgufTensor& ln = MmprojTensorUpTo(f, "v.patch_norm.1.weight", 1);
  const int p = static_cast<int>(std::lround(std::sqrt(static_cast<double>(ln.ne[0]) / 3.0)));
  if (3LL * p * p != ln.ne[0] || p <= 0) {
    ThrowTensorShape(f, "v.patch_norm.1.weight", ln, "[3 * patch * patch]");
  }
  c.patch_size = p;
  const GgufTensor& dense = MmprojTensorUpTo(f, "v.patch_embd.weight", 2);
  if (dense.ne[0] != ln.ne[0]) {
    ThrowTensorShape(f, "v.patch_embd.weight", dense, Str("[", ln.ne[0], ", n_embd]"));
  }
  c.n_embd = TensorDim(dense, 1);
  ReadProjection(f, c, /*in_out=*/false);
}

}  // namespace

int Gemma3FfnWidth(const GgufFile& f, int n_embd) {
  const GgufTensor& down = MmprojTensorUpTo(f, "v.blk.0.ffn_down.weight", 2);
  const bool swapped = Gemma3FfnSwapped(f, n_embd);
  const int ff = TensorDim(down, swapped ? 1 : 0);
  if (down.ne[swapped ? 0 : 1] != n_embd) {
    ThrowTensorShape(f, "v.blk.0.ffn_down.weight", down, Str("[n_ff, ", n_embd, "]"));
  }
  return ff;
}

bool Gemma3FfnSwapped(const GgufFile& f, int n_embd) {
  const GgufTensor& down = MmprojTensorUpTo(f, "v.blk.0.ffn_down.weight", 2);
  return down.ne[0] == n_embd && down.ne[1] != n_embd;
}

ProjectorType ReadProjectorType(const GgufFile& f) {
  CheckMmprojFile(f);
  std::optional<std::string_view> name = f.GetStringOpt("clip.vision.projector_type");
  if (!name) name = f.GetStringOpt("clip.projector_type");
  const bool has_vision = f.GetBoolOr("clip.has_vision_encoder", name.has_value());
  if (!has_vision || !name) {
    throw Error(Str("mmproj ", f.name(),
                    " has no vision encoder (clip.has_vision_encoder is false or no "
                    "clip.vision.projector_type / clip.projector_type key; an audio-only mmproj?): images need one of ",
                    kSupported));
  }
  if (*name == "gemma3") return ProjectorType::kGemma3;
  if (*name == "gemma3nv") return ProjectorType::kGemma3nV;
  if (*name == "gemma4v") return ProjectorType::kGemma4V;
  if (*name == "gemma4uv") return ProjectorType::kGemma4UV;
  throw Error(
      Str("mmproj ", f.name(), ": vision projector type '", *name, "' is not supported (supported: ", kSupported, ")"));
}

VisionConfig ReadVisionConfig(const GgufFile& f) {
  VisionConfig c;
  c.projector = ReadProjectorType(f);
  c.eps = f.GetF32Or("clip.vision.attention.layer_norm_epsilon", 1e-6f);
  if (!std::isfinite(c.eps) || c.eps < 0) {
    throw Error(Str("mmproj ", f.name(), ": clip.vision.attention.layer_norm_epsilon is ", c.eps,
                    ", expected finite and >= 0"));
  }
  ReadMeanStd(f, c);
  switch (c.projector) {
    case ProjectorType::kGemma3: ReadGemma3(f, c); break;
    case ProjectorType::kGemma3nV: ReadGemma3nV(f, c); break;
    case ProjectorType::kGemma4V: ReadGemma4V(f, c); break;
    case ProjectorType::kGemma4UV: ReadGemma4UV(f, c); break;
  }
  return c;
}

}  // namespace kvshare::detail

namespace kvshare {

void CheckMmprojFitsText(const VisionConfig& config, int text_n_embd) {
  if (config.n_embd_text != text_n_embd) {
    throw Error(detail::Str("the mmproj (", ProjectorTypeName(config.projector), ") writes soft tokens of width ",
                            config.n_embd_text, " but the text model's embedding width is ", text_n_embd,
                            ": pass the mmproj converted from the same model"));
  }
}

}  // namespace kvshare
