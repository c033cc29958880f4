// kvshare/runtime/drafter_factory.h — which drafter speculative decoding uses
// (runtime layer; docs/speculative.md). The one place that turns what a front
// end was asked (the CLI's --spec / --draft-model flags, the server's options,
// Python's generate(draft=...)) into a Drafter and its SpeculativeOptions:
// the choice between prompt lookup, a Gemma 4 assistant and a draft model,
// and the checks of the combination.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvshare/common/tensor.h"
#include "kvshare/model/gemma4_assistant.h"
#include "kvshare/model/model.h"
#include "kvshare/runtime/device_support.h"
#include "kvshare/runtime/speculative.h"

namespace kvshare {

// How the front end names the options of a SpeculationRequest, so that its
// errors name what the user typed ("--draft-model" on the CLI, "draft" in
// Python). The defaults are the request's own field names.
struct SpeculationNames {
  std::string method = "method";     // the option naming a method ("ngram")
  std::string draft = "draft_path";  // the option naming a draft model or an assistant
  std::string ngram_min = "ngram.ngram_min";
  std::string ngram_max = "ngram.ngram_max";
  std::string device = "device";
  // What the method option accepts, for its error ("<method> must be <this>, got ...").
  std::string method_choices = "\"\" (none) or \"ngram\" (prompt lookup)";
};

// What speculative decoding a front end asks for. At most one drafter:
// `method`, or one of draft_path / draft_model / assistant. None of them:
// speculation is off.
struct SpeculationRequest {
  // "" (none) or "ngram": prompt lookup (NgramOptions below).
  std::string method;
  // A GGUF file: a Gemma 4 assistant (general.architecture
  // gemma4-assistant, IsAssistantGguf), which reads the target's KV cache, or
  // a draft model with the target's vocabulary (its own KV cache).
  // MakeSpeculation loads it and owns it.
  std::string draft_path;
  // An already loaded draft model or assistant (borrowed: it must outlive the
  // drafter MakeSpeculation returns).
  const Model* draft_model = nullptr;
  const AssistantModel* assistant = nullptr;
  NgramOptions ngram;
  SpeculativeOptions speculative;  // k per round and its adaptivity
  // The target's device (runtime/device_support.h). Prompt lookup and draft
  // models run on any; Gemma 4's assistant needs one with assistant_drafter
  // (the CPU and CUDA: it runs on the target's device). Where a verify step
  // is not bitwise a one-token step (DeviceSupport::bitwise_verify: CUDA),
  // greedy output equals plain greedy output up to the device's rounding
  // rather than bitwise (docs/speculative.md).
  Device device = Device::kCpu;
  // Moves a draft model loaded from draft_path to where it runs, its own
  // state and KV cache there (a front end's ModelPlacement::Apply); null:
  // it stays on the CPU. Not applied to draft_model.
  std::function<std::unique_ptr<Model>(std::unique_ptr<Model>)> place_draft;
  // Called with each warning of a draft model loaded from draft_path
  // (Model::warnings()); null: not reported.
  std::function<void(std::string_view)> on_warning;
  SpeculationNames names;

  bool enabled() const {
    return !method.empty() || !draft_path.empty() || draft_model != nullptr || assistant != nullptr;
  }
};

// What MakeSpeculation made: the drafter (null when the request asks for
// none), what it runs when loaded from draft_path (draft_model or
// assistant; they must outlive the drafter, hence the member order), and the
// checked options to give the Generator or Scheduler with it.
struct Speculation {
  std::unique_ptr<Model> draft_model;
  std::unique_ptr<AssistantModel> assistant;
  std::unique_ptr<Drafter> drafter;
  SpeculativeOptions options;
};

// The checks that need no model, cheap enough to run before loading one;
// nothing when the request is not enabled(). Throws kvshare::Error (worded
// with request.names) for a method other than "ngram", a method together
// with a draft (or two drafts), an assistant on a device that cannot serve
// it (naming the device and the drafters that run there; for draft_path on
// such a device, the existing file's header is read to tell), ngram_max
// below ngram_min, and speculative options out of range
// (CheckSpeculativeOptions).
void CheckSpeculation(const SpeculationRequest& request);

// The drafter `request` asks for, serving `target` on a state of the shape
// `state` gives (its max_batch rows of max_context positions, kv_dtype; a
// draft model gets a state of its own of that shape) and running on
// state.pool. Throws kvshare::Error as CheckSpeculation, then for a file that
// does not load, a draft model that place_draft cannot move, n-gram options out of range
// (MakeNgramDrafter), a draft model whose vocabulary is not the target's
// (MakeDraftModelDrafter) and an assistant that does not fit the target
// (MakeAssistantDrafter).
Speculation MakeSpeculation(const SpeculationRequest& request, const Model& target, const DraftModelOptions& state);

}  // namespace kvshare
