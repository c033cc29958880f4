#include "spec_flags.h"

#include "kvshare/common/error.h"
#include "model_path.h"

namespace kvshare::cli {

void AddSpecFlags(CLI::App& cmd, SpecFlags& f) {
  cmd.add_option("--spec", f.spec,
                 "Speculative decoding without a draft model: ngram (prompt lookup: drafts the tokens that followed "
                 "the longest recent n-gram of the text earlier in it). Greedy output is bitwise the same as without")
      ->check(CLI::IsMember({"ngram"}));
  cmd.add_option("--draft-model", f.draft_model,
                 "Speculative decoding with a draft model GGUF of the target's vocabulary (its own KV cache), or a "
                 "Gemma 4 assistant GGUF (gemma4-assistant: reads the target's KV cache); drafts are verified by the "
                 "target several tokens per step, and greedy output is bitwise the same as without");
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
}

void CheckSpecFlags(const SpecFlags& f, const std::string& device) {
  if (!f.enabled()) return;
  if (!f.spec.empty() && !f.draft_model.empty()) {
    throw Error("--spec " + f.spec + " and --draft-model are exclusive: choose one drafter");
  }
  if (device != "cpu") {
    throw Error("speculative decoding (--spec / --draft-model) runs on the CPU only: on --device " + device +
                " a verify step's logits are not bitwise those of one-token steps, so greedy output would not be "
                "lossless; drop --device or the speculation flags");
  }
  if (f.ngram_max < f.ngram_min) {
    throw Error("--ngram-max " + std::to_string(f.ngram_max) + " is below --ngram-min " + std::to_string(f.ngram_min));
  }
  CheckSpeculativeOptions({.draft_max = f.draft_max, .adaptive = !f.draft_fixed});
}

Speculation MakeSpeculation(const SpecFlags& f, const Model& target, const SpecTarget& where) {
  Speculation s;
  CheckSpecFlags(f, where.device);
  if (!f.enabled()) return s;
  s.options = {.draft_max = f.draft_max, .adaptive = !f.draft_fixed};
  if (f.spec == "ngram") {
    s.drafter = MakeNgramDrafter({.ngram_min = f.ngram_min, .ngram_max = f.ngram_max});
    return s;
  }
  const std::string path = ResolveModel(f.draft_model);
  if (IsAssistantGguf(path)) {
    s.assistant = AssistantModel::Load(path);
    s.drafter = MakeAssistantDrafter(*s.assistant, target, where.pool);
    return s;
  }
  s.draft_model = LoadModel(path);
  s.drafter = MakeDraftModelDrafter(*s.draft_model, target,
                                    {.max_batch = where.max_batch,
                                     .max_context = where.max_context,
                                     .kv_dtype = where.kv_dtype,
                                     .pool = where.pool});
  return s;
}

}  // namespace kvshare::cli
