// The --kv-dtype option shared by the subcommands that size or run a KV cache,
// and --attention-precision of those that run the model.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvshare/attention/gqa.h"
#include "kvshare/common/tensor.h"

namespace kvshare::cli {

// Adds `--kv-dtype f32|f16|bf16|q8_0` (or float32 / float16 / bfloat16;
// default: the value `dtype` holds) to cmd; other names are refused at parse.
void AddKvDtypeOption(CLI::App& cmd, std::string& dtype);
// The option's value as a DType (KvCacheDTypeFromName); throws kvshare::Error
// naming --kv-dtype and the accepted names.
DType ParseKvDtype(const std::string& name);

// Adds `--attention-precision f32|bf16` (ModelStateOptions::attention_precision;
// default: the value `precision` holds) to cmd.
void AddAttentionPrecisionOption(CLI::App& cmd, std::string& precision);
// The option's value for a KV cache of kv_dtype; throws kvshare::Error when
// bf16 cannot run here (no AMX tile form: GqaBf16CoversCausal(), or a q8_0
// cache), saying why and what to use instead.
GqaMatMulPrecision ParseAttentionPrecision(const std::string& name, DType kv_dtype);

// Adds `--weight-precision f32|bf16` (ModelLoadOptions::weight_precision;
// default: the value `precision` holds) to cmd.
void AddWeightPrecisionOption(CLI::App& cmd, std::string& precision);
// The option's value; throws kvshare::Error when bf16 cannot run here (no
// usable AMX-BF16 tiles), saying why and what to use instead.
GqaMatMulPrecision ParseWeightPrecision(const std::string& name);

}  // namespace kvshare::cli
