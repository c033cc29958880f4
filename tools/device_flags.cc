#include "device_flags.h"

#include "kvshare/common/error.h"
#include "kvshare/cuda_model/model_cuda.h"

namespace kvshare::cli {

void AddDeviceOption(CLI::App& cmd, std::string& device, const std::string& flag, const std::string& what) {
  const std::string towers = flag == "--device" ? ". On cuda the image and audio towers run on the CPU" : "";
  cmd.add_option(flag, device,
                 "Where " + what +
                     " runs: cpu, or cuda (an NVIDIA GPU, Gemma 3, 4, 3n and EmbeddingGemma: weights in bf16, the KV "
                     "cache in device memory; needs a CUDA build)" +
                     towers)
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

Device DeviceFromFlag(const std::string& device) {
  if (device == "cpu") return Device::kCpu;
  if (device == "cuda") return Device::kCuda;
  throw Error("--device must be cpu or cuda, got '" + device + "'");
}

ModelPlacement Placement(const std::string& device) {
  const Device d = DeviceFromFlag(device);
  if (d == Device::kCpu) return {};
  return {.device = d, .move = [](std::unique_ptr<Model> m) { return MoveModelToCuda(std::move(m)); }};
}

}  // namespace kvshare::cli
