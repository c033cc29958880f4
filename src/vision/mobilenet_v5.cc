// Gemma 3n's MobileNet-V5 image encoder and vision embedder (mobilenet_v5.h).
//
// Tower (timm MobileNetV5Encoder): stem 3x3 stride 2 conv (+ bias) + norm +
// GELU; stages v.blk.{s}.{i} whose first block has stride 2; the fusion
// adapter over the outputs of the last two stages. Embedder (HF
// Gemma3nModel.get_image_features + Gemma3nMultimodalEmbedder): tokens in
// row-major grid order, x sqrt(n_embd), RMSNorm (soft_emb_norm), projection
// to the text width, RMSNorm without weight. docs/vision_mobilenet_v5.md has the details.
#include "vision/mobilenet_v5.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/str.h"
#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "vision/mobilenet_v5_blocks.h"
#include "vision/preprocess_calls.h"

namespace kvshare::detail {

namespace {

// timm's msfa_output_resolution, used when the keys do not give the token count.
constexpr int kDefaultGrid = 16;

// The token grid side: image_size / patch_size tokens (the converter writes
// patch_size = image_size / image_seq_length), when that is a square.
int TokenGrid(int image_size, int patch_size) {
  if (image_size > 0 && patch_size > 0 && image_size % patch_size == 0) {
    const int tokens = image_size / patch_size;
    const int g = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tokens))));
    if (g * g == tokens) return g;
  }
  return kDefaultGrid;
}

class MobileNetV5Encoder final : public VisionEncoder {
 public:
  MobileNetV5Encoder(GgufFile file, const VisionConfig& config) : file_(std::move(file)), config_(config) {
    if (config_.image_size <= 0) config_.image_size = static_cast<int>(file_.GetU32Or("clip.vision.image_size", 768));
    if (config_.patch_size <= 0) config_.patch_size = static_cast<int>(file_.GetU32Or("clip.vision.patch_size", 0));
    const Mnv5Weights w(file_);
    // Stem.
    stem_.emplace(w.Conv("v.conv_stem.conv.weight", 3, 2, /*with_bias=*/true));
    int ch = stem_->spec().out_channels;
    stem_norm_ = w.Vec("v.conv_stem.bn.weight", ch);
    int side = ComputeSamePad(config_.image_size, 3, 2).out;
    // Stages and blocks, probed by name.
    for (int s = 0;; ++s) {
      std::vector<Mnv5Block> blocks;
      for (int i = 0;; ++i) {
        std::optional<Mnv5Block> b = LoadMnv5Block(w, Str("v.blk.", s, ".", i, "."), ch, i == 0 ? 2 : 1);
        if (!b) break;
        ch = Mnv5BlockOutChannels(*b);
        blocks.push_back(std::move(*b));
      }
      if (blocks.empty()) break;
      stages_.push_back(std::move(blocks));
      stage_channels_.push_back(ch);
      side = (side + 1) / 2;
      stage_sides_.push_back(side);
    }
    if (stages_.size() < 2) {
      throw Error(Str("gemma3nv mmproj '", file_.name(), "': found ", stages_.size(),
                      " stages of blocks v.blk.{stage}.{i}, the multi-scale fusion needs at least 2"));
    }
    const std::size_t n = stages_.size();
    const int fused = stage_channels_[n - 2] + stage_channels_[n - 1];
    // The converter's dummy clip.vision.patch_size (image_size / tokens), not
    // config_.patch_size: ReadVisionConfig sets that to the token cell.
    grid_ = TokenGrid(config_.image_size, static_cast<int>(file_.GetU32Or("clip.vision.patch_size", 0)));
    config_.patch_size = config_.image_size / grid_;
    msfa_ = LoadMultiScaleFusion(w, fused, grid_);
    if (stage_sides_[n - 2] % grid_ != 0) {
      throw Error(Str("gemma3nv mmproj '", file_.name(), "': image_size ", config_.image_size, " gives a ",
                      stage_sides_[n - 2], "x", stage_sides_[n - 2], " fusion map, which does not pool to the ", grid_,
                      "x", grid_, " token grid"));
    }
    // Embedder.
    const int d = msfa_.out_channels;
    soft_norm_ = w.Vec("mm.soft_emb_norm.weight", d);
    proj_ = w.Pointwise("mm.input_projection.weight", d);
    if (config_.n_embd_text != 0 && config_.n_embd_text != proj_.out()) {
      throw Error(Str("gemma3nv mmproj '", file_.name(), "': mm.input_projection gives ", proj_.out(),
                      " features per token, the configuration expects n_embd_text ", config_.n_embd_text));
    }
    if (w.Has("mm.embedding.weight")) {
      const GgufTensor& t = file_.Tensor("mm.embedding.weight");
      if (t.n_dims != 2 || t.ne[0] != d) {
        throw Error(Str("gemma3nv mmproj '", file_.name(), "': mm.embedding is ", t.DimsString(), ", expected [", d,
                        ", vision vocabulary]"));
      }
      hard_table_ = w.Vec("mm.embedding.weight", t.NumElements());
      hard_norm_ = w.Vec("mm.hard_emb_norm.weight", d);
    }
    config_.projector = ProjectorType::kGemma3nV;
    config_.n_embd = d;
    config_.n_embd_text = proj_.out();
    config_.n_layer = 0;
    ones_.assign(static_cast<std::size_t>(config_.n_embd_text), 1.0f);
  }

  const VisionConfig& config() const override { return config_; }
  const GgufFile& gguf() const override { return file_; }

  std::vector<PixelTensor> Preprocess(const Image& image, const PreprocessOptions& options) const override {
    return PreprocessImage(image, config_, options);
  }

  int TokensFor(const PixelTensor&) const override { return grid_ * grid_; }

  std::vector<float> Encode(const PixelTensor& pixels, ThreadPool* pool) const override {
    const int S = config_.image_size;
    if (pixels.height != S || pixels.width != S || pixels.chw.size() != 3u * S * S) {
      throw Error(Str("gemma3nv encoder takes a [3, ", S, ", ", S, "] pixel tensor, got [3, ", pixels.height, ", ",
                      pixels.width, "] with ", pixels.chw.size(), " values"));
    }
    FeatureMap x(S, S, 3);
    const std::size_t plane = static_cast<std::size_t>(S) * S;
    for (std::size_t p = 0; p < plane; ++p) {
      for (std::size_t c = 0; c < 3; ++c) x.data[p * 3 + c] = pixels.chw[c * plane + p];
    }
    x = stem_->Forward(x, pool);
    RmsNormPixels(x, stem_norm_.data(), kMnv5NormEps, /*gelu=*/true, pool);
    const std::size_t n = stages_.size();
    std::vector<FeatureMap> kept;  // the outputs of the last two stages
    for (std::size_t s = 0; s < n; ++s) {
      for (const Mnv5Block& b : stages_[s]) x = Mnv5BlockForward(b, x, pool);
      if (s + 2 >= n) kept.push_back(x);
    }
    FeatureMap f = MultiScaleFusionForward(msfa_, {&kept[0], &kept[1]}, pool);
    // Embedder: scale, soft norm, projection, norm without weight.
    const float scale = std::sqrt(static_cast<float>(f.c));
    for (float& v : f.data) v *= scale;
    RmsNormPixels(f, soft_norm_.data(), config_.eps, /*gelu=*/false, pool);
    FeatureMap out = proj_.Forward(f, pool);
    RmsNormPixels(out, ones_.data(), config_.eps, /*gelu=*/false, pool);
    return std::move(out.data);
  }

  std::vector<float> HardTokenRows(ThreadPool* pool) const override {
    const int d = msfa_.out_channels;
    const int rows = static_cast<int>(hard_table_.size()) / d;
    if (rows == 0) return {};
    FeatureMap x(1, rows, d);
    x.data = hard_table_;
    RmsNormPixels(x, hard_norm_.data(), config_.eps, /*gelu=*/false, pool);
    FeatureMap out = proj_.Forward(x, pool);
    RmsNormPixels(out, ones_.data(), config_.eps, /*gelu=*/false, pool);
    return std::move(out.data);
  }

 private:
  GgufFile file_;
  VisionConfig config_;
  std::optional<Conv2d> stem_;
  std::vector<float> stem_norm_;
  std::vector<std::vector<Mnv5Block>> stages_;
  std::vector<int> stage_channels_, stage_sides_;
  MultiScaleFusion msfa_;
  int grid_ = kDefaultGrid;
  std::vector<float> soft_norm_;
  std::vector<float> hard_table_, hard_norm_;  // mm.embedding [rows, n_embd], mm.hard_emb_norm [n_embd]
  PointwiseConv proj_;       // mm.input_projection [n_embd_text, n_embd]
  std::vector<float> ones_;  // [n_embd_text]: the weightless final norm
};

}  // namespace

std::unique_ptr<VisionEncoder> LoadMobileNetV5(GgufFile file, const VisionConfig& config) {
  return std::make_unique<MobileNetV5Encoder>(std::move(file), config);
}

}  // namespace kvshare::detail
