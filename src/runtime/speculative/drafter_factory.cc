// The drafter factory (kvshare/runtime/drafter_factory.h): the checks of a
// SpeculationRequest and the choice of its drafter.
#include "kvshare/runtime/drafter_factory.h"

#include <filesystem>
#include <string>
#include <utility>

#include "kvshare/common/error.h"

namespace kvshare {
namespace {

// Gemma 4's assistant attends over the target's cache and reads its hidden
// states on the target's device: refused up front on a device that cannot
// (none so far: the CPU and CUDA both run it).
void RefuseAssistantOnDevice(const SpeculationRequest& r) {
  if (SupportOn(r.device).assistant_drafter) return;
  const SpeculationNames& n = r.names;
  throw Error(DeviceRefusal(
      r.device, "a Gemma 4 assistant (" + n.draft + ", which reads the target's KV cache and hidden states)",
      "use " + n.method + " ngram or a draft model of the target's vocabulary, or drop " + n.device));
}

}  // namespace

void CheckSpeculation(const SpeculationRequest& r) {
  if (!r.enabled()) return;
  const SpeculationNames& n = r.names;
  if (!r.method.empty() && r.method != "ngram") {
    throw Error(n.method + " must be " + n.method_choices + ", got \"" + r.method + "\"");
  }
  const int drafts = (r.draft_path.empty() ? 0 : 1) + (r.draft_model != nullptr) + (r.assistant != nullptr);
  if (!r.method.empty() && drafts > 0) {
    throw Error(n.method + " " + r.method + " and " + n.draft + " are exclusive: choose one drafter");
  }
  if (drafts > 1) throw Error("give one draft model or assistant (" + n.draft + "), not " + std::to_string(drafts));
  // An assistant file is refused before anything loads (its header only is read).
  const bool assistant_file = !r.draft_path.empty() && !SupportOn(r.device).assistant_drafter &&
                              std::filesystem::exists(r.draft_path) && IsAssistantGguf(r.draft_path);
  if (r.assistant != nullptr || assistant_file) RefuseAssistantOnDevice(r);
  if (r.ngram.ngram_max < r.ngram.ngram_min) {
    throw Error(n.ngram_max + " " + std::to_string(r.ngram.ngram_max) + " is below " + n.ngram_min + " " +
                std::to_string(r.ngram.ngram_min));
  }
  CheckSpeculativeOptions(r.speculative);
}

Speculation MakeSpeculation(const SpeculationRequest& r, const Model& target, const DraftModelOptions& state) {
  CheckSpeculation(r);
  Speculation s;
  s.options = r.speculative;
  if (!r.enabled()) return s;
  if (r.method == "ngram") {
    s.drafter = MakeNgramDrafter(r.ngram);
    return s;
  }
  const AssistantModel* assistant = r.assistant;
  const Model* draft = r.draft_model;
  if (!r.draft_path.empty() && IsAssistantGguf(r.draft_path)) {
    s.assistant = AssistantModel::Load(r.draft_path);
    assistant = s.assistant.get();
  } else if (!r.draft_path.empty()) {
    s.draft_model = Model::Load(r.draft_path);
    if (r.on_warning) {
      for (const std::string& w : s.draft_model->warnings()) r.on_warning(w);
    }
    if (r.place_draft) s.draft_model = r.place_draft(std::move(s.draft_model));
    draft = s.draft_model.get();
  }
  s.drafter = assistant != nullptr ? MakeAssistantDrafter(*assistant, target, state.pool)
                                   : MakeDraftModelDrafter(*draft, target, state);
  return s;
}

}  // namespace kvshare
