// kvshare/runtime/device_support.h — what the runtime and the front ends may
// ask of a model by the device its states live on (runtime layer;
// docs/serving.md "On the GPU"), and how a front end puts a loaded model
// there. One table, so that the scheduler, the drafter factory, the server
// and the CLI refuse the same things with the same words, up front, instead
// of failing inside a step.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvshare/common/tensor.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/speculative.h"

namespace kvshare {

// What runs on a device above the Model interface. Batched steps, prompt
// caching by rewinds, n > 1 choices, grammars, logprobs and prompt lookup or
// draft-model speculation run everywhere and are not listed: their device
// limits are the model's own (a ForwardBatch it refuses fails that step's
// rows with its message; ModelState::CopyRow returning false makes choices
// prefill instead of copying a row).
struct DeviceSupport {
  Device device = Device::kCpu;
  // Images and audio: rows spliced into a prompt (EmbeddingSpan) and Gemma
  // 3n's hard-token rows (Model::SetHardTokenRows).
  bool media_inputs = true;
  // Sentence embeddings (Model::Embed: /v1/embeddings, Python embed()).
  bool embeddings = true;
  // Gemma 4's assistant drafter: it attends over the target's KV cache and
  // reads the target's hidden states (ModelState::hidden()), on the target's
  // device (Model::AssistantOnDevice: the GPU model's twin of it). Every
  // device kvshare has supports it; a device without would be refused up front.
  bool assistant_drafter = true;
  // A verify step's logits are bitwise those of one-token steps, so greedy
  // speculative output is bitwise plain greedy output (docs/speculative.md).
  // Where false, speculation still runs and keeps the target's distribution
  // up to the device's rounding: greedy output can differ from plain greedy
  // where two tokens' logits are within that rounding of each other.
  bool bitwise_verify = true;
};

// The table: the CPU supports everything; CUDA (the GPU model of
// include/kvshare/cuda_model/model_cuda.h) media_inputs (the vision and
// audio towers run on the CPU, their rows go to the device), embeddings
// (the layers on the device) and the assistant drafter (on the device, next
// to the target's cache); not bitwise_verify.
DeviceSupport SupportOn(Device device);

// "<what> runs on the CPU only so far, and this model runs on device <d>; <fix>"
// — the one wording of a refusal by device.
std::string DeviceRefusal(Device device, std::string_view what, std::string_view fix);

// Throws kvshare::Error (DeviceRefusal, suggesting another drafter) when
// `drafter` reads the target's hidden states and cache (needs_target_hidden)
// and `device` does not support that; nothing for a null drafter.
void CheckDrafterOn(const Drafter* drafter, Device device);

// Where a front end runs a model, and how it gets there: `move` takes the
// model Model::Load made (on the CPU) and returns it on `device` (the CLI's
// MoveModelToCuda, which the runtime layer cannot call); null when device is
// kCpu.
struct ModelPlacement {
  Device device = Device::kCpu;
  std::function<std::unique_ptr<Model>(std::unique_ptr<Model>)> move;

  // The model on `device`: `model` itself when move is null. Throws what
  // move throws (kvshare::Error: no GPU, a build without CUDA, an
  // architecture the device has no forward pass for), and kvshare::Error
  // for a device other than the CPU without a move.
  std::unique_ptr<Model> Apply(std::unique_ptr<Model> model) const;
};

}  // namespace kvshare
