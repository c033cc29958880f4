#include "kv_options.h"

#include "kvshare/error.h"

namespace kvshare::cli {

void AddKvDtypeOption(CLI::App& cmd, std::string& dtype) {
  cmd.add_option("--kv-dtype", dtype,
                 "KV cache storage: f32, f16, bf16 or q8_0 (32 int8 values along the head dimension per fp16 "
                 "scale, as llama.cpp's -ctk q8_0 -ctv q8_0)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
}

DType ParseKvDtype(const std::string& name) {
  if (name == "f32") return DType::kFloat32;
  if (name == "f16") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  if (name == "q8_0") return DType::kQ8_0;
  throw Error("--kv-dtype '" + name + "' is not one of f32, f16, bf16, q8_0");
}

}  // namespace kvshare::cli
