// What runs on each device (kvshare/runtime/device_support.h).
#include "kvshare/runtime/device_support.h"

#include <string>
#include <utility>

#include "kvshare/common/error.h"

namespace kvshare {

DeviceSupport SupportOn(Device device) {
  if (device == Device::kCpu) return {};
  // The GPU model takes embedding spans and hard-token rows (the towers run
  // on the CPU, their rows are uploaded), runs Gemma 4's assistant on the
  // device next to its cache (Model::AssistantOnDevice), embeds (its layers
  // on the device, the pooling and dense head on the host), and its cuBLAS
  // projections round an M-row step differently from M one-row steps. Not
  // yet run on a GPU.
  return {.device = device,
          .media_inputs = true,
          .embeddings = true,
          .assistant_drafter = true,
          .bitwise_verify = false};
}

std::string DeviceRefusal(Device device, std::string_view what, std::string_view fix) {
  return std::string(what) + " runs on the CPU only so far, and this model runs on device " + DeviceName(device) +
         "; " + std::string(fix);
}

void CheckDrafterOn(const Drafter* drafter, Device device) {
  if (drafter == nullptr || !drafter->needs_target_hidden() || SupportOn(device).assistant_drafter) return;
  throw Error(DeviceRefusal(device,
                            "the " + drafter->name() + " drafter (it reads the target's hidden states and KV cache)",
                            "use prompt lookup or a draft model, or run the target on the CPU"));
}

std::unique_ptr<Model> ModelPlacement::Apply(std::unique_ptr<Model> model) const {
  if (!move) {
    if (device != Device::kCpu) {
      throw Error(std::string("ModelPlacement: device ") + DeviceName(device) + " needs a move function");
    }
    return model;
  }
  return move(std::move(model));
}

}  // namespace kvshare
