// Test helper: dequantizes GGUF tensors with kvshare's reference dequantizer.
//   gguf_dequant_dump --types                      -> "id name block_size block_bytes supported"
//                                                     for every ggml type id the reader knows
//   gguf_dequant_dump MODEL --list                 -> "name type ne0 nrows" lines
//   gguf_dequant_dump MODEL TENSOR OUT [MAX_ROWS]  -> raw little-endian float32
//                                                     of the first MAX_ROWS rows
// A tensor of a type kvshare does not compute with fails (exit 1) with the
// model loader's error, naming the tensor and the type.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "quant/quant.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--types") {
    for (std::uint32_t id = 0; id < 256; ++id) {
      if (!kvshare::IsKnownGgmlType(id)) continue;
      const auto t = static_cast<kvshare::GgmlType>(id);
      std::printf("%u %s %lld %lld %d\n", id, kvshare::GgmlTypeName(t).c_str(),
                  static_cast<long long>(kvshare::GgmlBlockSize(t)), static_cast<long long>(kvshare::GgmlBlockBytes(t)),
                  kvshare::IsSupportedWeightType(t) ? 1 : 0);
    }
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s --types | MODEL --list | MODEL TENSOR OUT.f32 [MAX_ROWS]\n", argv[0]);
    return 2;
  }
  try {
    const kvshare::GgufFile f = kvshare::GgufFile::Open(argv[1]);
    if (std::string(argv[2]) == "--list") {
      for (const auto& t : f.tensors()) {
        std::printf("%s %s %lld %lld\n", t.name.c_str(), kvshare::GgmlTypeName(t.type).c_str(),
                    static_cast<long long>(t.ne[0]), static_cast<long long>(t.NumRows()));
      }
      return 0;
    }
    if (argc < 4) throw kvshare::Error("missing OUT path");
    const kvshare::GgufTensor& t = f.Tensor(argv[2]);
    kvshare::CheckWeightType(t);
    std::int64_t rows = t.NumRows();
    if (argc > 4) rows = std::min<std::int64_t>(rows, std::atoll(argv[4]));
    std::vector<float> row(static_cast<std::size_t>(t.ne[0]));
    std::FILE* out = std::fopen(argv[3], "wb");
    if (out == nullptr) throw kvshare::Error(std::string("cannot write ") + argv[3]);
    for (std::int64_t r = 0; r < rows; ++r) {
      kvshare::DequantizeRow(t.type, t.data + static_cast<std::size_t>(r) * t.RowBytes(), row.data(), t.ne[0]);
      std::fwrite(row.data(), sizeof(float), row.size(), out);
    }
    std::fclose(out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
