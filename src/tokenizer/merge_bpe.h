// tokenizer/merge_bpe.h — BPE by merge rank, the `gemma4` tokenizer model: HF
// `tokenizers`' BPE model (byte_fallback) behind Gemma 4's normalizer and
// pre-tokenizer, as llama.cpp runs it for GGUF `tokenizer.ggml.model = "gemma4"`.
//
// Encoding one plain fragment (special-token text already cut out by the caller):
//  1. ill-formed UTF-8 → U+FFFD (maximal subparts);
//  2. split into runs of '\n' and runs of everything else (llama.cpp's GEMMA4
//     pre-tokenizer `[^\n]+|[\n]+`; no merge crosses a run boundary);
//  3. a newline run that is itself a token is emitted whole (llama.cpp's Gemma 4
//     rule, PR 21343; a trained merge list rebuilds such runs anyway);
//  4. ' ' → "▁" (U+2581), the normalizer Replace(" ", "▁");
//  5. each character becomes its token, or, if it is not one, its bytes become
//     `<0xNN>` tokens (byte fallback; unk if a byte token is missing);
//  6. adjacent pairs are merged by merge rank, lowest first, leftmost among equal
//     ranks, until no listed pair is left (HF `Word::merge_all`; a priority queue
//     over adjacent pairs, O(n log n) per run).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvshare::runtime {

class MergeBpe {
 public:
  using PieceIds = std::unordered_map<std::string_view, int32_t>;

  // `piece_to_id`: every token's text → id; kept by pointer, must outlive this.
  // `byte_ids[b]`: the `<0xNN>` token of byte b, -1 if none. `merges`: GGUF
  // `tokenizer.ggml.merges`, "left right", rank = index. Throws kvshare::Error
  // naming VocabData.merges[i] for a merge that is not two tokens separated by a
  // space, whose concatenation is not a token, or that repeats an earlier one.
  MergeBpe(const PieceIds* piece_to_id, const std::array<int32_t, 256>& byte_ids, int32_t unk,
           std::span<const std::string> merges);

  // Appends the ids of `text`, a fragment with no special-token text in it.
  void Encode(std::string_view text, std::vector<int32_t>* ids) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // id of left + right
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // Appends the ids of one run (already ▁-escaped, well-formed UTF-8).
  void EncodeRun(std::string_view run, std::vector<int32_t>* ids) const;

  const PieceIds* piece_to_id_;
  std::array<int32_t, 256> byte_ids_;
  int32_t unk_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) → rank, merged id
};

}  // namespace kvshare::runtime
