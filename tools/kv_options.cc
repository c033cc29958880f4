#include "kv_options.h"

#include "kvshare/error.h"

namespace kvshare::cli {

void AddKvDtypeOption(CLI::App& cmd, std::string& dtype) {
  cmd.add_option("--kv-dtype", dtype, "KV cache storage: f32, f16 or bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
}

DType ParseKvDtype(const std::string& name) {
  if (name == "f32") return DType::kFloat32;
  if (name == "f16") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  throw Error("--kv-dtype '" + name + "' is not one of f32, f16, bf16");
}

}  // namespace kvshare::cli
