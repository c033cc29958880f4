// The --device option of the subcommands that run a model (generate, serve,
// bench) and --draft-device of their draft models: one definition, and the
// one function that puts a loaded model there (docs/serving.md "On the GPU").
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvshare/common/tensor.h"
#include "kvshare/runtime/device_support.h"

namespace kvshare::cli {

// Adds `flag` (--device, --draft-device) taking cpu or cuda to cmd; other
// values are refused at parse with the valid ones listed. `what` names the
// model it places in the help text.
void AddDeviceOption(CLI::App& cmd, std::string& device, const std::string& flag = "--device",
                     const std::string& what = "the model");

// The option's value ("cpu", "cuda") as a Device; throws kvshare::Error
// naming the valid values for anything else.
Device DeviceFromFlag(const std::string& device);

// Where a model loaded on the CPU goes for `device`: cuda moves it with
// MoveModelToCuda (kvshare/cuda_model/model_cuda.h), whose errors name the
// missing GPU, a build without CUDA, or an architecture without a GPU
// forward pass; cpu leaves it.
ModelPlacement Placement(const std::string& device);

}  // namespace kvshare::cli
