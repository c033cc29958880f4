// The --kv-dtype option shared by the subcommands that size or run a KV cache.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvshare/common/tensor.h"

namespace kvshare::cli {

// Adds `--kv-dtype f32|f16|bf16|q8_0` (or float32 / float16 / bfloat16;
// default: the value `dtype` holds) to cmd; other names are refused at parse.
void AddKvDtypeOption(CLI::App& cmd, std::string& dtype);
// The option's value as a DType (KvCacheDTypeFromName); throws kvshare::Error
// naming --kv-dtype and the accepted names.
DType ParseKvDtype(const std::string& name);

}  // namespace kvshare::cli
