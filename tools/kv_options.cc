#include "kv_options.h"

#include "kvshare/common/error.h"
#include "kvshare/model/model.h"

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

namespace {

// An f32 | bf16 product-precision flag.
void AddPrecisionOption(CLI::App& cmd, const char* name, std::string& precision, const char* help) {
  cmd.add_option(name, precision, help)->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
}

}  // namespace

void AddAttentionPrecisionOption(CLI::App& cmd, std::string& precision) {
  AddPrecisionOption(cmd, "--attention-precision", precision,
                     "Attention's score and value products: f32, or bf16 (rounded to bf16, f32 sums, on Intel AMX "
                     "tiles: faster long prompts; error bound in kvshare/attention/gqa.h; needs AMX-BF16 and a KV "
                     "dtype other than q8_0)");
}

GqaMatMulPrecision ParseAttentionPrecision(const std::string& name, DType kv_dtype) {
  if (name != "bf16") return GqaMatMulPrecision::kF32;
  if (!GqaBf16CoversCausal()) {
    throw Error(
        "--attention-precision bf16 runs on Intel AMX tiles (AMX-BF16), and this process has none usable (no "
        "AMX or AVX512-BF16 on this CPU, no Linux tile permission, or KVSHARE_KERNEL set below amx); use "
        "--attention-precision f32");
  }
  if (kv_dtype == DType::kQ8_0) {
    throw Error("--attention-precision bf16 reads f32, f16 or bf16 KV caches, not q8_0; use --kv-dtype f16 or bf16");
  }
  return GqaMatMulPrecision::kBf16;
}

void AddWeightPrecisionOption(CLI::App& cmd, std::string& precision) {
  AddPrecisionOption(cmd, "--weight-precision", precision,
                     "Products with F32 / F16 / BF16 weight matrices (quantized ones keep int8): f32 (exact), or bf16 "
                     "(weights and activations rounded to bf16, f32 sums, on Intel AMX tiles: faster F16 / BF16 "
                     "GGUFs; bound in kvshare/model/model.h, ModelLoadOptions; needs AMX-BF16)");
}

GqaMatMulPrecision ParseWeightPrecision(const std::string& name) {
  if (name != "bf16") return GqaMatMulPrecision::kF32;
  if (const std::string why = Bf16WeightsUnavailableReason(); !why.empty()) {
    throw Error("--weight-precision bf16 runs on Intel AMX tiles (AMX-BF16), and this process has none usable (" + why +
                "); use --weight-precision f32");
  }
  return GqaMatMulPrecision::kBf16;
}

}  // namespace kvshare::cli
