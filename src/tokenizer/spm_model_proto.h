// tokenizer/spm_model_proto.h — serializes a SentencePiece ModelProto (BPE) from
// vocabulary arrays, for sentencepiece::SentencePieceProcessor::LoadFromSerializedProto.
//
// Only the fields the BPE encoder reads are written (protobuf wire format, field
// numbers from sentencepiece_model.proto):
//   ModelProto     { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2;
//                    NormalizerSpec normalizer_spec = 3; }
//   SentencePiece  { string piece = 1; float score = 2; Type type = 3; }
//   TrainerSpec    { ModelType model_type = 3 (BPE = 2); int32 vocab_size = 4;
//                    bool byte_fallback = 35; int32 unk_id = 40; bos_id = 41;
//                    eos_id = 42; pad_id = 43; }
//   NormalizerSpec { string name = 1; bool add_dummy_prefix = 3;
//                    bool remove_extra_whitespaces = 4; bool escape_whitespaces = 5; }
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kvshare::runtime {

// SentencePiece's ModelProto.SentencePiece.Type numbering.
enum SpmPieceType : int32_t {
  kSpmNormal = 1,
  kSpmUnknown = 2,
  kSpmControl = 3,
  kSpmUserDefined = 4,
  kSpmUnused = 5,
  kSpmByte = 6,
};

struct SpmModelSpec {
  std::span<const std::string> pieces;  // [n] non-empty, unique
  std::span<const float> scores;        // [n]
  std::span<const int32_t> types;       // [n] SpmPieceType; exactly one kSpmUnknown
  bool byte_fallback = true;
  int32_t unk_id = 0, bos_id = -1, eos_id = -1, pad_id = -1;
};

// Identity normalizer except ' ' → U+2581; no dummy prefix; whitespace kept as is.
std::string SerializeSpmBpeModel(const SpmModelSpec& spec);

}  // namespace kvshare::runtime
