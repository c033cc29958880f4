#include "tokenizer/spm_model_proto.h"

#include <bit>
#include <string_view>

namespace kvshare::runtime {
namespace {

enum WireType : uint32_t { kVarint = 0, kLengthDelimited = 2, kFixed32 = 5 };

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(uint32_t field, WireType wire, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | wire, out);
}

// int32 fields are varints of the sign-extended 64-bit value (-1 → 10 bytes).
void PutInt32(uint32_t field, int32_t v, std::string* out) {
  PutKey(field, kVarint, out);
  PutVarint(static_cast<uint64_t>(static_cast<int64_t>(v)), out);
}

void PutBool(uint32_t field, bool v, std::string* out) {
  PutKey(field, kVarint, out);
  PutVarint(v ? 1 : 0, out);
}

void PutFloat(uint32_t field, float v, std::string* out) {
  PutKey(field, kFixed32, out);
  const auto bits = std::bit_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void PutBytes(uint32_t field, std::string_view bytes, std::string* out) {
  PutKey(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes);
}

}  // namespace

std::string SerializeSpmBpeModel(const SpmModelSpec& spec) {
  std::string out;
  size_t total = 0;
  for (const auto& p : spec.pieces) total += p.size() + 12;
  out.reserve(total + 64);

  std::string piece;
  for (size_t i = 0; i < spec.pieces.size(); ++i) {
    piece.clear();
    PutBytes(1, spec.pieces[i], &piece);
    PutFloat(2, spec.scores[i], &piece);
    PutInt32(3, spec.types[i], &piece);
    PutBytes(1, piece, &out);  // ModelProto.pieces
  }

  std::string trainer;
  PutInt32(3, 2, &trainer);  // model_type = BPE
  PutInt32(4, static_cast<int32_t>(spec.pieces.size()), &trainer);
  PutBool(35, spec.byte_fallback, &trainer);
  PutInt32(40, spec.unk_id, &trainer);
  PutInt32(41, spec.bos_id, &trainer);
  PutInt32(42, spec.eos_id, &trainer);
  PutInt32(43, spec.pad_id, &trainer);
  PutBytes(2, trainer, &out);

  std::string normalizer;
  PutBytes(1, "identity", &normalizer);
  PutBool(3, false, &normalizer);  // add_dummy_prefix (handled by the Tokenizer)
  PutBool(4, false, &normalizer);  // remove_extra_whitespaces
  PutBool(5, true, &normalizer);   // escape_whitespaces: ' ' → U+2581
  PutBytes(3, normalizer, &out);
  return out;
}

}  // namespace kvshare::runtime
