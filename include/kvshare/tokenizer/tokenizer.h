// kvshare/tokenizer/tokenizer.h — SentencePiece-style BPE tokenizer built from GGUF vocabulary
// arrays and a streaming detokenizer (chat formats: kvshare/runtime/chat_template.h).
//
// The vocabulary comes in as plain vectors (the GGUF reader lives in model/):
// `tokenizer.ggml.tokens`, `.scores`, `.token_type`, `.merges` and the special ids.
// Two encoders, chosen by VocabData::model ("tokenizer.ggml.model"):
//  - "llama" (Gemma 3): SentencePiece BPE. Text → ' ' replaced by U+2581 "▁" →
//    UTF-8 characters → adjacent pairs merged greedily by the score of the merged
//    piece (highest first, leftmost on ties) → characters missing from the
//    vocabulary emitted as byte tokens `<0xNN>` (byte fallback).
//  - "gemma4": BPE with explicit merges, HF `tokenizers`' BPE model as Gemma 4's
//    tokenizer.json configures it and llama.cpp runs it. Text → split into runs of
//    '\n' and runs of other characters (no merge crosses them; a newline run that
//    is itself a token is emitted whole) → ' ' replaced by "▁" → characters, those
//    missing from the vocabulary as `<0xNN>` byte tokens → adjacent pairs merged by
//    merge rank (VocabData::merges order, lowest first, leftmost on ties) until no
//    listed pair is left. Merges may produce a token of any type.
//
// Special tokens. USER_DEFINED tokens (e.g. Gemma's "\n\n", "  ") are always cut
// out of the input as whole tokens, longest match first, before BPE (llama.cpp's
// rule). CONTROL and UNKNOWN tokens (`<bos>`, `<start_of_turn>`, …) are cut out only
// with EncodeOptions::parse_special; otherwise their text is tokenized as plain
// characters. "llama" merges never produce a CONTROL, UNKNOWN, USER_DEFINED or UNUSED
// token.
//
// Thread safety: a Tokenizer is immutable after construction; Encode/Decode may be
// called from any number of threads. A TokenStreamDecoder is per stream.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvshare/gguf/vocab.h"

namespace kvshare {

struct EncodeOptions {
  // Prepend BOS. nullopt: follow VocabData::add_bos. (Same for EOS.)
  std::optional<bool> add_bos;
  std::optional<bool> add_eos;
  // Recognize CONTROL/UNKNOWN token text (e.g. "<start_of_turn>") in the input.
  bool parse_special = false;
};

struct DecodeOptions {
  // Emit the text of CONTROL/UNKNOWN/UNUSED tokens (e.g. "<end_of_turn>") instead
  // of nothing.
  bool render_special = false;
  // Drop one leading space from the first text produced (SentencePiece's
  // dummy-prefix removal). nullopt: follow VocabData::add_space_prefix.
  std::optional<bool> strip_leading_space;
};

class Tokenizer {
 public:
  // Validates the vocabulary and builds the encoder. Throws kvshare::Error naming
  // the offending field (sizes differ, empty or duplicate token text, bad type,
  // special id out of range, byte token with malformed text, no unk id, unknown
  // model; for "gemma4": no merges, or a merge that is not two tokens separated by
  // a space, whose concatenation is not a token, or that repeats an earlier one).
  explicit Tokenizer(VocabData vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // UTF-8 text → token ids. Invalid UTF-8 in the input is replaced by U+FFFD.
  // A literal "▁" in the input decodes back as a space (as in SentencePiece).
  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Token ids → text. Invalid or truncated UTF-8 produced by byte tokens is replaced
  // by U+FFFD, one per maximal ill-formed subsequence. Throws kvshare::Error for an
  // id outside [0, vocab_size()).
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

  // Raw bytes one token contributes to the decoded text (may be part of a UTF-8
  // character for byte tokens). Throws kvshare::Error for an id out of range.
  std::string_view TokenBytes(int32_t id, bool render_special = false) const;

  int32_t vocab_size() const;
  std::string_view TokenText(int32_t id) const;  // the piece as stored
  TokenType Type(int32_t id) const;
  std::optional<int32_t> TokenId(std::string_view text) const;  // exact piece lookup

  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t start_of_turn_id() const;  // -1 if the vocabulary has no such token
  int32_t end_of_turn_id() const;    // -1 if the vocabulary has no such token
  bool add_space_prefix() const;
  // True for eos and end_of_turn: generation should stop.
  bool IsEndOfGeneration(int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer. Feed ids one at a time; each call returns the text that
// became complete. Bytes of an unfinished UTF-8 character are held back until the
// character completes (or turns out ill-formed, then U+FFFD). For any id sequence,
// the concatenation of all Feed() results followed by Flush() equals
// Tokenizer::Decode(ids) with the same options. The tokenizer must outlive this.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, const DecodeOptions& options = {});
  // Throws kvshare::Error for an id out of range (state unchanged).
  std::string Feed(int32_t id);
  // Ends the stream: held bytes become U+FFFD. The decoder is then reset.
  std::string Flush();
  void Reset();
  // Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  bool strip_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace kvshare
