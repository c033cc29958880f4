// Test helper: runs kvshare's model forward pass (any architecture Model::Load
// reads) and dumps logits, for the Python peers in tests/python/
// (test_gemma3_logits.py, test_gemma3_llamacpp.py, test_gemma4_fixtures.py).
//   logits_dump MODEL --tokenize TEXT
//       -> the token ids of TEXT (with <bos>, no special-token parsing), one
//          line, space-separated
//   logits_dump [--all] MODEL OUT.f32 PROMPT_IDS [DECODE_ID ...]
//       -> PROMPT_IDS (comma-separated) in one prefill Forward, then one decode
//          Forward per DECODE_ID; OUT gets the logits returned by each call,
//          row by row, little-endian float32 [rows, n_vocab]: the prefill's last
//          row (with --all: every prompt position's row), then one per decode id.
// Threads: 2 (results do not depend on the thread count).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvshare/common/error.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/model/model.h"
#include "kvshare/tokenizer/tokenizer.h"

namespace {

std::int32_t ParseId(const std::string& s) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') throw kvshare::Error("token id '" + s + "' is not an integer");
  return static_cast<std::int32_t>(v);
}

std::vector<std::int32_t> ParseIds(const std::string& list) {
  std::vector<std::int32_t> ids;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::size_t end = comma == std::string::npos ? list.size() : comma;
    ids.push_back(ParseId(list.substr(start, end - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

void Write(std::FILE* out, std::span<const float> logits) {
  if (std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size()) {
    throw kvshare::Error("short write of logits");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool all = argc > 1 && std::string(argv[1]) == "--all";
  if (all) {
    --argc;
    ++argv;
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL --tokenize TEXT | [--all] MODEL OUT.f32 ID,ID,... [DECODE_ID ...]\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::unique_ptr<kvshare::Model> model = kvshare::Model::Load(argv[1]);
    if (std::string(argv[2]) == "--tokenize") {
      const kvshare::Tokenizer tok(kvshare::ReadVocab(model->gguf()));
      const std::vector<std::int32_t> ids = tok.Encode(argv[3], kvshare::EncodeOptions{.add_bos = true});
      for (std::size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
      std::printf("\n");
      return 0;
    }
    const std::vector<std::int32_t> prompt = ParseIds(argv[3]);
    std::vector<std::int32_t> decode;
    for (int i = 4; i < argc; ++i) decode.push_back(ParseId(argv[i]));
    kvshare::ThreadPool pool(2);
    const int context = static_cast<int>(prompt.size() + decode.size());
    const std::unique_ptr<kvshare::ModelState> state = model->NewState({.max_context = context});
    std::FILE* out = std::fopen(argv[2], "wb");
    if (out == nullptr) throw kvshare::Error(std::string("cannot write ") + argv[2]);
    const std::int64_t rows = all ? static_cast<std::int64_t>(prompt.size()) : 1;
    Write(out, model->Forward(*state, prompt, &pool, {.num_logits = rows}));
    for (const std::int32_t id : decode) {
      const std::int32_t one[1] = {id};
      Write(out, model->Forward(*state, one, &pool));
    }
    if (std::fclose(out) != 0) throw kvshare::Error(std::string("cannot close ") + argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
