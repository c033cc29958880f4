// The image flags of `kvshare generate` (image_flags.h).
#include "image_flags.h"

#include <chrono>

#include "kvshare/common/error.h"
#include "kvshare/vision/image.h"

namespace kvshare::cli {

void AddImageFlags(CLI::App& cmd, ImageFlags& f) {
  cmd.add_option("--mmproj", f.mmproj,
                 "The model's vision encoder: an mmproj GGUF as llama.cpp's converter writes it (Gemma 3, 3n, 4)");
  cmd.add_option("--image", f.images,
                 "An image (JPEG, PNG, GIF, BMP, WebP) put before the prompt text; repeat for several, in order. "
                 "Needs --mmproj");
  cmd.add_option("--image-max-soft-tokens", f.max_soft_tokens,
                 "Gemma 4: soft tokens per image; the image is resized (aspect kept) to fill this budget")
      ->check(CLI::IsMember({70, 140, 280, 560, 1120}))
      ->capture_default_str();
  cmd.add_option("--image-max-pixels", f.max_pixels,
                 "The largest image (width x height pixels) --image may name; larger ones are refused before decoding")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd.add_flag("--pan-and-scan", f.pan_and_scan,
               "Gemma 3: also encode 2-4 crops of a long image along its long side (HF's pan-and-scan)");
  cmd.add_option("--image-attention", f.image_attention,
                 "Layers where an image's tokens see each other: causal, all or sliding. Default: the model's "
                 "(Gemma 3 all; Gemma 4 26B-A4B / 31B sliding; Gemma 3n and Gemma 4 E-models causal)")
      ->check(CLI::IsMember({"causal", "all", "sliding"}));
  AddVisionPrecisionFlag(cmd, f.vision_precision);
}

void AddVisionPrecisionFlag(CLI::App& cmd, std::string& precision) {
  cmd.add_option("--vision-precision", precision,
                 "Matrix products of the Gemma 3 / Gemma 4 image encoders: f32, bf16 (bf16 inputs, f32 sums; "
                 "needs AVX-512) or auto (bf16 for F16 / BF16 mmproj matrices on CPUs with native bf16 dot "
                 "products, else f32); docs/vision.md")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}))
      ->capture_default_str();
}

EncodedImages PrepareImageFlags(const ImageFlags& f, const Model& model) {
  EncodedImages out;
  if (f.images.empty()) return out;  // --mmproj may carry only an audio encoder (audio_flags.h)
  if (f.mmproj.empty()) throw Error("--image needs --mmproj PATH: the model's vision encoder (an mmproj GGUF)");
  try {
    out.encoder = VisionEncoder::Load(f.mmproj, {.precision = EncoderPrecisionFromName(f.vision_precision, "vision")});
    CheckMmprojFitsText(out.encoder->config(), model.config().n_embd);
  } catch (const Error& e) {
    throw Error("--mmproj " + f.mmproj + ": " + e.what());
  }
  const PreprocessOptions po{.max_soft_tokens = f.max_soft_tokens, .pan_and_scan = f.pan_and_scan};
  const ImageLimits limits{.max_pixels = f.max_pixels, .max_pixels_hint = "raise it with --image-max-pixels"};
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& path : f.images) {
    try {
      const std::vector<std::uint8_t> bytes = ReadImageFile(path, limits);
      out.paths.push_back(path);
      PromptImage& im = out.images.emplace_back();
      im.key = ImageKey(bytes, po);
      out.pixels.push_back(out.encoder->Preprocess(DecodeImage(bytes, limits), po));
      for (const PixelTensor& p : out.pixels.back()) im.tokens.push_back(out.encoder->TokensFor(p));
    } catch (const Error& e) {
      throw Error("--image " + path + ": " + e.what());
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void EncodeImages(EncodedImages& e, ThreadPool* pool) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < e.pixels.size(); ++i) {
    try {
      for (const PixelTensor& p : e.pixels[i]) {
        const std::vector<float> rows = e.encoder->Encode(p, pool);
        e.images[i].rows.insert(e.images[i].rows.end(), rows.begin(), rows.end());
      }
    } catch (const Error& err) {
      throw Error("--image " + (i < e.paths.size() ? e.paths[i] : std::to_string(i)) + ": " + err.what());
    }
  }
  e.pixels.clear();
  e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

EncodedImages EncodeImageFlags(const ImageFlags& f, const Model& model, ThreadPool* pool) {
  EncodedImages out = PrepareImageFlags(f, model);
  EncodeImages(out, pool);
  return out;
}

std::optional<ImageAttention> ImageAttentionFlag(const ImageFlags& f) {
  if (f.image_attention.empty()) return std::nullopt;
  return ImageAttentionFromName(f.image_attention);
}

}  // namespace kvshare::cli
