#include "spec_flags.h"

#include "device_flags.h"
#include "model_path.h"

namespace kvshare::cli {

void AddSpecFlags(CLI::App& cmd, SpecFlags& f) {
  cmd.add_option("--spec", f.spec,
                 "Speculative decoding without a draft model: ngram (prompt lookup: drafts the tokens that followed "
                 "the longest recent n-gram of the text earlier in it). Greedy output is bitwise the same as without "
                 "(on cuda: up to bf16 rounding)")
      ->check(CLI::IsMember({"ngram"}));
  cmd.add_option("--draft-model", f.draft_model,
                 "Speculative decoding with a draft model GGUF of the target's vocabulary (its own KV cache), or a "
                 "Gemma 4 assistant GGUF (gemma4-assistant: reads the target's KV cache); drafts are verified by the "
                 "target several tokens per step, and greedy output is bitwise the same as without (on cuda: up to "
                 "bf16 rounding)");
  cmd.add_option("--draft-max", f.draft_max, "Most tokens drafted per verify step")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd.add_flag("--draft-fixed", f.draft_fixed,
               "Always draft --draft-max tokens (default: fewer when the running acceptance rate is low)");
  cmd.add_option("--ngram-min", f.ngram_min, "--spec ngram: shortest n-gram matched")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd.add_option("--ngram-max", f.ngram_max, "--spec ngram: longest n-gram matched")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  AddDeviceOption(cmd, f.draft_device, "--draft-device", "a --draft-model draft model (default: as --device)");
}

SpeculationRequest SpecRequest(const SpecFlags& f, const std::string& device) {
  return {.method = f.spec,
          .draft_path = f.draft_model,
          .ngram = {.ngram_min = f.ngram_min, .ngram_max = f.ngram_max},
          .speculative = {.draft_max = f.draft_max, .adaptive = !f.draft_fixed},
          .device = DeviceFromFlag(device),
          .place_draft = Placement(f.draft_device.empty() ? device : f.draft_device).move,
          .names = {.method = "--spec",
                    .draft = "--draft-model",
                    .ngram_min = "--ngram-min",
                    .ngram_max = "--ngram-max",
                    .device = "--device",
                    .method_choices = "ngram"}};
}

void CheckSpecFlags(const SpecFlags& f, const std::string& device) { CheckSpeculation(SpecRequest(f, device)); }

Speculation MakeSpeculation(const SpecFlags& f, const Model& target, const DraftModelOptions& state,
                            const std::string& device) {
  SpeculationRequest r = SpecRequest(f, device);
  CheckSpeculation(r);
  if (!r.draft_path.empty()) r.draft_path = ResolveModel(r.draft_path);
  r.on_warning = PrintWarning;
  return kvshare::MakeSpeculation(r, target, state);
}

}  // namespace kvshare::cli
