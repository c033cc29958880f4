// Model::Load (architecture dispatch) and ReadVocab.
#include "kvshare/model.h"

#include "kvshare/error.h"
#include "model/gemma3.h"

namespace kvshare {

std::unique_ptr<Model> Model::Load(const std::string& path) {
  GgufFile file = GgufFile::Open(path);
  const std::string arch(file.GetStringOpt("general.architecture").value_or(""));
  if (arch == "gemma3") return LoadGemma3(std::move(file));
  throw Error("model " + path + ": architecture '" + arch +
              "' is not supported (supported: gemma3)");
}

VocabData ReadVocab(const GgufFile& file) {
  VocabData v;
  for (std::string_view t : file.GetStringArray("tokenizer.ggml.tokens")) v.tokens.emplace_back(t);
  if (file.Has("tokenizer.ggml.scores")) {
    v.scores = file.GetF32Array("tokenizer.ggml.scores");
  } else {
    v.scores.assign(v.tokens.size(), 0.0f);
  }
  v.token_types = file.GetI32Array("tokenizer.ggml.token_type");
  auto id = [&](const char* key) { return file.GetI32Opt(key).value_or(-1); };
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  v.unk = id("tokenizer.ggml.unknown_token_id");
  v.add_bos = file.GetBoolOr("tokenizer.ggml.add_bos_token", true);
  v.add_eos = file.GetBoolOr("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = file.GetBoolOr("tokenizer.ggml.add_space_prefix", false);
  return v;
}

}  // namespace kvshare
