#include "kv_options.h"

#include "kvshare/common/error.h"

namespace kvshare::cli {

void AddKvDtypeOption(CLI::App& cmd, std::string& dtype) {
  // Checked by the parser itself, so the command line takes exactly the names
  // the Python module does (KvCacheDTypeFromName, kvshare/common/tensor.h). CLI11
  // puts "--kv-dtype: " before the message, so it names the value's kind.
  const CLI::Validator kv_dtype_name(
      [](std::string& name) -> std::string {
        try {
          KvCacheDTypeFromName(name, "KV cache dtype");
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      },
      "{f32,f16,bf16,q8_0,float32,float16,bfloat16}", "KV cache dtype");
  cmd.add_option("--kv-dtype", dtype,
                 "KV cache storage: f32, f16, bf16 (or float32, float16, bfloat16) or q8_0 (32 int8 values along "
                 "the head dimension per fp16 scale, as llama.cpp's -ctk q8_0 -ctv q8_0)")
      ->check(kv_dtype_name)
      ->capture_default_str();
}

DType ParseKvDtype(const std::string& name) { return KvCacheDTypeFromName(name, "--kv-dtype"); }

}  // namespace kvshare::cli
