// Tokenizer: vocabulary validation, special-token partitioning, BPE through the
// sentencepiece library (model built in memory from the GGUF arrays; "llama") or
// by merge rank (runtime/merge_bpe; "gemma4"), decoding.
#include "kvshare/tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/utf8.h"
#include "kvshare/common/error.h"
#include "tokenizer/merge_bpe.h"
#include "tokenizer/spm_model_proto.h"

namespace kvshare {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581 "▁"

// "<0xNN>" with upper-case hex → the byte, else -1.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    out.append(s.substr(pos, hit - pos));
    if (hit == std::string_view::npos) break;
    out.append(to);
    pos = hit + from.size();
  }
  return out;
}

void CheckId(int32_t id, int32_t n, const char* what) {
  if (id < -1 || id >= n) {
    throw Error(std::string("VocabData.") + what + " must be -1 or in [0, " + std::to_string(n) + "), got " +
                std::to_string(id));
  }
}

}  // namespace

struct Tokenizer::Impl {
  VocabData vocab;
  std::vector<TokenType> types;
  std::vector<std::string> bytes;  // [n] decoded bytes of each token (specials: "")
  std::unordered_map<std::string_view, int32_t> piece_to_id;
  // Special-token matcher: text → (id, needs parse_special), and per first byte
  // the distinct lengths of special texts, longest first.
  std::unordered_map<std::string_view, std::pair<int32_t, bool>> specials;
  std::array<std::vector<uint32_t>, 256> special_lengths;
  int32_t start_of_turn = -1, end_of_turn = -1;
  sentencepiece::SentencePieceProcessor spm;  // model "llama"
  std::unique_ptr<runtime::MergeBpe> bpe;     // model "gemma4"

  int32_t n() const { return static_cast<int32_t>(vocab.tokens.size()); }

  void Validate() const;
  void Build();
  // Appends the ids of a fragment with no special-token text in it.
  void EncodePlain(std::string_view text, std::vector<int32_t>* ids) const;
};

void Tokenizer::Impl::Validate() const {
  const size_t nt = vocab.tokens.size();
  if (nt == 0) throw Error("VocabData.tokens must not be empty");
  if (nt > static_cast<size_t>(INT32_MAX)) throw Error("VocabData.tokens has too many entries");
  if (vocab.scores.size() != nt) {
    throw Error("VocabData.scores must have one entry per token (" + std::to_string(nt) + "), got " +
                std::to_string(vocab.scores.size()));
  }
  if (vocab.token_types.size() != nt) {
    throw Error("VocabData.token_types must have one entry per token (" + std::to_string(nt) + "), got " +
                std::to_string(vocab.token_types.size()));
  }
  for (size_t i = 0; i < nt; ++i) {
    const int32_t t = vocab.token_types[i];
    if (t < 1 || t > 6) {
      throw Error("VocabData.token_types[" + std::to_string(i) + "] must be in [1, 6], got " + std::to_string(t));
    }
    if (vocab.tokens[i].empty()) {
      throw Error("VocabData.tokens[" + std::to_string(i) + "] must not be empty");
    }
    if (t == static_cast<int32_t>(TokenType::kByte) && ParseByteToken(vocab.tokens[i]) < 0) {
      throw Error("VocabData.tokens[" + std::to_string(i) +
                  "] has type BYTE and must be \"<0xNN>\" (upper-case hex), got \"" + vocab.tokens[i] + "\"");
    }
  }
  CheckId(vocab.bos, n(), "bos");
  CheckId(vocab.eos, n(), "eos");
  CheckId(vocab.pad, n(), "pad");
  CheckId(vocab.unk, n(), "unk");
  if (vocab.unk < 0) throw Error("VocabData.unk must name the unknown token, got -1");
  if (vocab.model != "llama" && vocab.model != "gemma4") {
    throw Error("VocabData.model must be \"llama\" or \"gemma4\", got \"" + vocab.model + "\"");
  }
  if (vocab.model == "gemma4" && vocab.merges.empty()) {
    throw Error("VocabData.merges must not be empty for model \"gemma4\" (tokenizer.ggml.merges)");
  }
}

void Tokenizer::Impl::Build() {
  const int32_t nt = n();
  types.resize(nt);
  bytes.resize(nt);
  piece_to_id.reserve(nt);
  std::vector<int32_t> spm_types(nt);
  bool any_byte = false;
  for (int32_t i = 0; i < nt; ++i) {
    const std::string& text = vocab.tokens[i];
    const auto type = static_cast<TokenType>(vocab.token_types[i]);
    types[i] = type;
    if (!piece_to_id.emplace(text, i).second) {
      throw Error("VocabData.tokens[" + std::to_string(i) + "] = \"" + text + "\" duplicates token " +
                  std::to_string(piece_to_id[text]));
    }
    switch (type) {
      case TokenType::kNormal:
      case TokenType::kUndefined:
        bytes[i] = ReplaceAll(text, kSpaceSymbol, " ");
        spm_types[i] = runtime::kSpmNormal;
        break;
      case TokenType::kByte:
        bytes[i] = std::string(1, static_cast<char>(ParseByteToken(text)));
        spm_types[i] = runtime::kSpmByte;
        any_byte = true;
        break;
      case TokenType::kUserDefined:
        bytes[i] = text;
        // Cut out by the partitioner, never by the BPE: CONTROL keeps sentencepiece
        // from matching or merging into it.
        spm_types[i] = runtime::kSpmControl;
        specials.emplace(text, std::make_pair(i, false));
        break;
      case TokenType::kControl:
      case TokenType::kUnknown:
        spm_types[i] = runtime::kSpmControl;
        specials.emplace(text, std::make_pair(i, true));
        break;
      case TokenType::kUnused: spm_types[i] = runtime::kSpmControl; break;
    }
  }
  // sentencepiece needs exactly one UNKNOWN piece: the unk id (Gemma stores <unk>
  // as CONTROL).
  spm_types[vocab.unk] = runtime::kSpmUnknown;

  for (const auto& [text, entry] : specials) {
    auto& lengths = special_lengths[static_cast<uint8_t>(text[0])];
    if (std::find(lengths.begin(), lengths.end(), text.size()) == lengths.end()) {
      lengths.push_back(static_cast<uint32_t>(text.size()));
    }
  }
  for (auto& lengths : special_lengths) std::sort(lengths.rbegin(), lengths.rend());

  if (auto it = piece_to_id.find(vocab.start_of_turn_text);
      !vocab.start_of_turn_text.empty() && it != piece_to_id.end()) {
    start_of_turn = it->second;
  }
  if (auto it = piece_to_id.find(vocab.end_of_turn_text); !vocab.end_of_turn_text.empty() && it != piece_to_id.end()) {
    end_of_turn = it->second;
  }

  if (vocab.model == "gemma4") {
    std::array<int32_t, 256> byte_ids;
    byte_ids.fill(-1);
    for (int32_t i = 0; i < nt; ++i) {
      if (types[i] == TokenType::kByte) byte_ids[ParseByteToken(vocab.tokens[i])] = i;
    }
    bpe = std::make_unique<runtime::MergeBpe>(&piece_to_id, byte_ids, vocab.unk, vocab.merges);
    return;
  }

  const std::string proto = runtime::SerializeSpmBpeModel({
      .pieces = vocab.tokens,
      .scores = vocab.scores,
      .types = spm_types,
      .byte_fallback = any_byte,
      .unk_id = vocab.unk,
      .bos_id = vocab.bos,
      .eos_id = vocab.eos,
      .pad_id = vocab.pad,
  });
  const auto status = spm.LoadFromSerializedProto(proto);
  if (!status.ok()) {
    throw Error("Tokenizer: sentencepiece rejected the vocabulary: " + status.ToString());
  }
}

void Tokenizer::Impl::EncodePlain(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (bpe) {
    bpe->Encode(text, ids);
    return;
  }
  std::vector<int> out;
  const auto status = spm.Encode(text, &out);
  if (!status.ok()) throw Error("Tokenizer::Encode: sentencepiece failed: " + status.ToString());
  ids->insert(ids->end(), out.begin(), out.end());
}

Tokenizer::Tokenizer(VocabData vocab) : impl_(std::make_unique<Impl>()) {
  impl_->vocab = std::move(vocab);
  impl_->Validate();
  impl_->Build();
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const Impl& im = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_bos.value_or(im.vocab.add_bos) && im.vocab.bos >= 0) ids.push_back(im.vocab.bos);

  // Cut out special-token text, longest match first at each position.
  bool prev_special = true;
  size_t start = 0;  // start of the pending plain fragment
  auto flush_plain = [&](size_t end) {
    if (end > start) {
      std::string_view frag = text.substr(start, end - start);
      if (im.vocab.add_space_prefix && prev_special) {
        std::string prefixed;
        prefixed.reserve(frag.size() + 1);
        prefixed.push_back(' ');
        prefixed.append(frag);
        im.EncodePlain(prefixed, &ids);
      } else {
        im.EncodePlain(frag, &ids);
      }
      prev_special = false;
    }
  };
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t match_id = -1;
    size_t match_len = 0;
    for (uint32_t len : im.special_lengths[static_cast<uint8_t>(text[pos])]) {
      if (pos + len > text.size()) continue;
      auto it = im.specials.find(text.substr(pos, len));
      if (it == im.specials.end()) continue;
      if (it->second.second && !options.parse_special) continue;
      match_id = it->second.first;
      match_len = len;
      break;
    }
    if (match_id < 0) {
      ++pos;
      continue;
    }
    flush_plain(pos);
    ids.push_back(match_id);
    prev_special = true;
    pos += match_len;
    start = pos;
  }
  flush_plain(text.size());

  if (options.add_eos.value_or(im.vocab.add_eos) && im.vocab.eos >= 0) ids.push_back(im.vocab.eos);
  return ids;
}

std::string_view Tokenizer::TokenBytes(int32_t id, bool render_special) const {
  if (id < 0 || id >= impl_->n()) {
    throw Error("token id must be in [0, " + std::to_string(impl_->n()) + "), got " + std::to_string(id));
  }
  const TokenType t = impl_->types[id];
  if (render_special && (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused)) {
    return impl_->vocab.tokens[id];
  }
  return impl_->bytes[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  const bool strip = options.strip_leading_space.value_or(impl_->vocab.add_space_prefix);
  std::string raw;
  bool at_start = true;
  for (int32_t id : ids) {
    std::string_view b = TokenBytes(id, options.render_special);
    if (b.empty()) continue;
    if (at_start && strip && b[0] == ' ') b.remove_prefix(1);
    at_start = false;
    raw.append(b);
  }
  std::string out;
  out.reserve(raw.size());
  runtime::AppendWellFormedUtf8(raw, /*final=*/true, &out);
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->n(); }

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= impl_->n()) {
    throw Error("token id must be in [0, " + std::to_string(impl_->n()) + "), got " + std::to_string(id));
  }
  return impl_->vocab.tokens[id];
}

TokenType Tokenizer::Type(int32_t id) const {
  if (id < 0 || id >= impl_->n()) {
    throw Error("token id must be in [0, " + std::to_string(impl_->n()) + "), got " + std::to_string(id));
  }
  return impl_->types[id];
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view text) const {
  auto it = impl_->piece_to_id.find(text);
  if (it == impl_->piece_to_id.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::bos_id() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos; }
int32_t Tokenizer::pad_id() const { return impl_->vocab.pad; }
int32_t Tokenizer::unk_id() const { return impl_->vocab.unk; }
int32_t Tokenizer::start_of_turn_id() const { return impl_->start_of_turn; }
int32_t Tokenizer::end_of_turn_id() const { return impl_->end_of_turn; }
bool Tokenizer::add_space_prefix() const { return impl_->vocab.add_space_prefix; }

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && (id == impl_->vocab.eos || id == impl_->end_of_turn);
}

// ---- TokenStreamDecoder ----

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, const DecodeOptions& options)
    : tokenizer_(&tokenizer),
      options_(options),
      strip_(options.strip_leading_space.value_or(tokenizer.add_space_prefix())) {}

std::string TokenStreamDecoder::Feed(int32_t id) {
  std::string_view b = tokenizer_->TokenBytes(id, options_.render_special);
  std::string out;
  if (b.empty()) return out;
  if (at_start_ && strip_ && b[0] == ' ') b.remove_prefix(1);
  at_start_ = false;
  pending_.append(b);
  const size_t used = runtime::AppendWellFormedUtf8(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string TokenStreamDecoder::Flush() {
  std::string out;
  runtime::AppendWellFormedUtf8(pending_, /*final=*/true, &out);
  Reset();
  return out;
}

void TokenStreamDecoder::Reset() {
  pending_.clear();
  at_start_ = true;
}

}  // namespace kvshare
