// libFuzzer target for the GGUF reader: any input must either parse or raise
// kvshare::Error; a parsed file must then be safe to query and dequantize.
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DKVSHARE_FUZZ=ON
//   cmake --build build-fuzz --target gguf_fuzz gguf_fuzz_seeds
//   build-fuzz/tests/fuzz/gguf_fuzz_seeds corpus && build-fuzz/tests/fuzz/gguf_fuzz corpus -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/gguf/model_info.h"
#include "quant/quant.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const kvshare::GgufFile f = kvshare::ParseGguf(data, size);
    for (const std::string& k : f.keys()) {
      try {
        (void)f.GetU32(k);
      } catch (const kvshare::Error&) {
      }
      try {
        (void)f.GetF32(k);
      } catch (const kvshare::Error&) {
      }
      try {
        (void)f.GetString(k);
      } catch (const kvshare::Error&) {
      }
      try {
        (void)f.GetStringArray(k);
      } catch (const kvshare::Error&) {
      }
      try {
        (void)f.GetF32Array(k);
      } catch (const kvshare::Error&) {
      }
      try {
        (void)f.GetI32Array(k);
      } catch (const kvshare::Error&) {
      }
    }
    std::ostringstream os;
    kvshare::PrintModelInfo(f, os);
    std::vector<float> row;
    for (const kvshare::GgufTensor& t : f.tensors()) {
      if (!kvshare::IsSupportedWeightType(t.type) || t.ne[0] > 4096) continue;
      row.resize(static_cast<std::size_t>(t.ne[0]));
      kvshare::DequantizeRow(t.type, t.data, row.data(), t.ne[0]);  // first row lies inside the file
      (void)f.FindTensor(t.name);
    }
  } catch (const kvshare::Error&) {
  }
  return 0;
}
