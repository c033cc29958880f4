// Test helper: decodes an image file and runs one family's preprocessing
// (src/vision/preprocess.h), for tests/tools/vision_preprocess_check.py.
//   vision_preprocess_dump IMAGE OUT gemma3  SIZE [--pan-and-scan]
//   vision_preprocess_dump IMAGE OUT gemma3n SIZE
//   vision_preprocess_dump IMAGE OUT gemma4  BUDGET
// Gemma 3 uses mean = std = 0.5 (the released processor config). Writes
// OUT.<i>.f32 per pixel tensor (little-endian float32 [3, height, width])
// and prints one line "tensor <i> <height> <width>" for each.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/vision/image.h"
#include "vision/preprocess.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: vision_preprocess_dump IMAGE OUT (gemma3 SIZE [--pan-and-scan] | gemma3n SIZE | gemma4 "
               "BUDGET)\n");
  return 2;
}

void Write(const std::string& path, const std::vector<float>& data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data.data(), sizeof(float), data.size(), f) != data.size()) {
    throw kvshare::Error("cannot write " + path);
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return Usage();
  try {
    using namespace kvshare::detail;
    const kvshare::Image image = kvshare::LoadImageFile(argv[1]);
    const std::string out = argv[2], family = argv[3];
    const int n = std::atoi(argv[4]);
    std::vector<kvshare::PixelTensor> tensors;
    if (family == "gemma3") {
      const bool pan_and_scan = argc > 5 && std::string(argv[5]) == "--pan-and-scan";
      const PanAndScanParams pas;
      tensors = PreprocessGemma3(image, {.size = n}, pan_and_scan ? &pas : nullptr);
    } else if (family == "gemma3n") {
      tensors.push_back(PreprocessFixed(image, {.size = n, .normalize = false}));
    } else if (family == "gemma4") {
      tensors.push_back(PreprocessGemma4(image, n));
    } else {
      return Usage();
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      Write(out + "." + std::to_string(i) + ".f32", tensors[i].chw);
      std::printf("tensor %zu %d %d\n", i, tensors[i].height, tensors[i].width);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vision_preprocess_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
