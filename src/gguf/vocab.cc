// ReadVocab: the tokenizer.ggml.* metadata of a GGUF file as a VocabData.
#include "kvshare/gguf/vocab.h"

#include <algorithm>

#include "kvshare/common/error.h"

namespace kvshare {

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
  if (v.unk < 0) {  // files whose converter left the key out: the "<unk>" piece, as llama.cpp's SPM default
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), "<unk>");
    if (it != v.tokens.end()) v.unk = static_cast<int32_t>(it - v.tokens.begin());
  }
  v.add_bos = file.GetBoolOr("tokenizer.ggml.add_bos_token", true);
  v.add_eos = file.GetBoolOr("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = file.GetBoolOr("tokenizer.ggml.add_space_prefix", false);
  v.model = std::string(file.GetStringOpt("tokenizer.ggml.model").value_or("llama"));
  if (v.model == "gemma4") {
    if (!file.Has("tokenizer.ggml.merges")) {
      throw Error(
          "tokenizer.ggml.merges is missing; it is required for tokenizer.ggml.model = "
          "\"gemma4\"");
    }
    for (std::string_view m : file.GetStringArray("tokenizer.ggml.merges")) v.merges.emplace_back(m);
    // As llama.cpp loads it: BOS always (PR 21500), no space prefix (BPE).
    v.add_bos = true;
    v.add_space_prefix = false;
  } else if (v.model != "llama") {
    throw Error("tokenizer.ggml.model = \"" + v.model + "\" is not supported (supported: \"llama\", \"gemma4\")");
  }
  // llama.cpp makes its end-of-generation tokens CONTROL whatever the file says,
  // for every tokenizer model: the Gemma 4 converter writes <|tool_response> as
  // USER_DEFINED, and some Gemma 3 converters (EmbeddingGemma's) write
  // <end_of_turn> as NORMAL. llama.cpp then parses their text only as special
  // text and hides them when decoding without special tokens.
  for (std::size_t i = 0; i < v.tokens.size() && i < v.token_types.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t == "<eos>" || t == "<end_of_turn>" || t == "<turn|>" || t == "<|tool_response>") {
      v.token_types[i] = static_cast<std::int32_t>(TokenType::kControl);
    }
  }
  return v;
}

}  // namespace kvshare
