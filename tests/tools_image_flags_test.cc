// The image flags of `kvshare generate` (tools/image_flags.h) on the vision
// fixtures (tests/fixtures/vision/): parsing, the encoded images, and every
// error naming the flag and file at fault.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common_source_path.h"
#include "image_flags.h"
#include "kvshare/common/error.h"
#include "model_test_util.h"

namespace kvshare::cli {
namespace {

std::string Fixture(const std::string& name) { return testing::SourcePath("tests/fixtures/vision/") + name; }

std::string ImageDir() { return Fixture("images/"); }

ImageFlags Parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  ImageFlags flags;
  AddImageFlags(app, flags);
  std::vector<const char*> argv = {"kvshare"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return flags;
}

TEST(ImageFlags, EncodeTheImagesInOrder) {
  const auto model = Model::Load(Fixture("gemma4.f32.gguf"));
  const ImageFlags f = Parse(
      {"--mmproj", Fixture("gemma4.mmproj.f32.gguf"), "--image", Fixture("pre.gemma4_70.astronaut.0.png"), "--image",
       Fixture("pre.gemma3_896.astronaut.0.png"), "--image-max-soft-tokens", "70", "--image-attention", "sliding"});
  const EncodedImages e = EncodeImageFlags(f, *model, nullptr);
  ASSERT_EQ(e.images.size(), 2u);
  for (const PromptImage& im : e.images) {
    ASSERT_EQ(im.tokens.size(), 1u);
    EXPECT_GT(im.tokens[0], 0);
    EXPECT_LE(im.tokens[0], 70);
    EXPECT_EQ(im.rows.size(), static_cast<std::size_t>(im.tokens[0]) * model->config().n_embd);
  }
  EXPECT_NE(e.images[0].key, e.images[1].key);
  EXPECT_EQ(ImageAttentionFlag(f), ImageAttention::kSlidingLayers);
  EXPECT_EQ(ImageAttentionFlag(Parse({})), std::nullopt);
  EXPECT_THROW(Parse({"--image-max-soft-tokens", "100"}), CLI::ValidationError);
  EXPECT_EQ(Parse({}).vision_precision, "auto");
  EXPECT_EQ(Parse({"--vision-precision", "f32"}).vision_precision, "f32");
  EXPECT_THROW(Parse({"--vision-precision", "fp16"}), CLI::ValidationError);
}

TEST(ImageFlags, ErrorsNameTheFlagAndFile) {
  const auto model = Model::Load(Fixture("gemma4.f32.gguf"));
  const auto error = [&](std::vector<std::string> args) {
    return testing::ErrorOf([&] { EncodeImageFlags(Parse(args), *model, nullptr); });
  };
  EXPECT_NE(error({"--image", "x.png"}).find("--image needs --mmproj PATH"), std::string::npos);
  const std::string mm = Fixture("gemma4.mmproj.f32.gguf");
  EXPECT_NE(error({"--mmproj", mm, "--image", "/nonexistent/x.png"}).find("--image /nonexistent/x.png: cannot open"),
            std::string::npos);
  const std::string readme = Fixture("README.md");
  EXPECT_NE(error({"--mmproj", mm, "--image", readme}).find("unsupported image format"), std::string::npos);
  // An image over --image-max-pixels (rgb.png is 7 x 5), named before
  // decoding with the flag that raises the limit; a truncated file.
  const std::string rgb = ImageDir() + "rgb.png";
  EXPECT_NE(error({"--mmproj", mm, "--image", rgb, "--image-max-pixels", "34"})
                .find("--image " + rgb +
                      ": PNG image of 7x5 = 35 pixels is over the limit of 34 pixels; raise it "
                      "with --image-max-pixels"),
            std::string::npos);
  EXPECT_THROW(Parse({"--image-max-pixels", "0"}), CLI::ValidationError);
  const std::string cut = ::testing::TempDir() + "kvshare_cut.png";
  {
    std::ifstream in(rgb, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  EXPECT_NE(error({"--mmproj", mm, "--image", cut}).find("--image " + cut + ": truncated PNG image"),
            std::string::npos);
  // An error of the encoder itself names the file too (the tiny gemma4
  // tower's position table has 24 entries a side; rgb.png at 280 tokens
  // needs more). It used to read "gemma4v encoder: the image has ...".
  EXPECT_NE(error({"--mmproj", mm, "--image", rgb}).find("--image " + rgb + ": gemma4v encoder: the image has"),
            std::string::npos)
      << error({"--mmproj", mm, "--image", rgb});
  // The Gemma 3 encoder writes 64-wide tokens too, so it passes the width
  // check; a text model file as the mmproj does not.
  EXPECT_NE(error({"--mmproj", Fixture("gemma4.f32.gguf"), "--image", Fixture("pre.gemma4_70.astronaut.0.png")})
                .find("--mmproj "),
            std::string::npos);
}

// Without --image the vision encoder is not loaded: the mmproj may hold only
// an audio encoder (audio_flags.h).
TEST(ImageFlags, NoImagesLoadNothing) {
  const auto model = Model::Load(Fixture("gemma4.f32.gguf"));
  const EncodedImages e =
      EncodeImageFlags(Parse({"--mmproj", Fixture("../audio/gemma4a.mmproj.f32.gguf")}), *model, nullptr);
  EXPECT_EQ(e.encoder, nullptr);
  EXPECT_TRUE(e.images.empty());
}

}  // namespace
}  // namespace kvshare::cli
