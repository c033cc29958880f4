// kvshare/gguf/gguf.h — a validating, memory-mapped GGUF (v2, v3) reader.
//
// GgufFile::Open maps the file read-only and validates the whole header before
// returning: magic, version, counts, every string length, metadata value type
// (arrays and nested arrays included), tensor names, rank, dims, ggml types,
// the data-section alignment and every tensor's offset and extent. A malformed
// or truncated file raises kvshare::Error naming the field and its byte offset
// (e.g. "GGUF model.gguf: tensor[3] 'blk.0.attn_q.weight' n_dims at byte 4711:
// 5 exceeds the maximum of 4"); nothing is mapped or allocated afterwards.
//
// Tensor data stays in the mapping (weights are never copied); pointers
// returned by a GgufFile are valid while it (or a moved-to object) lives.
// A GgufFile is immutable and safe to read from many threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvshare {

// ggml tensor element types (ids as stored in GGUF). The reader knows every
// one of them (name, block size and bytes: kGgmlTypes below, so it can
// validate a file that holds them); the quant layer computes with a subset
// (its weight-type table, src/quant/weight_types.cc) and model loaders refuse
// the rest.
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
  kQ2_0 = 42,
};

// One row of ggml's type table: facts of the GGUF file format (ggml-common.h's
// block structs), known for every type above, also those kvshare does not
// compute with. tests/python/test_gguf_dequant.py checks the table against the
// PyPI gguf package's GGML_QUANT_SIZES; the weight types kvshare computes with
// (src/quant/weight_types.cc) check their block structs against it.
struct GgmlTypeInfo {
  GgmlType type;
  const char* name;    // "F32", "Q4_K", ...
  std::int64_t block;  // elements per block (1 for plain types)
  std::int64_t bytes;  // bytes per block
};
inline constexpr GgmlTypeInfo kGgmlTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},
    {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},
    {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},
    {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},
    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},
    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    {GgmlType::kMXFP4, "MXFP4", 32, 17},
    {GgmlType::kNVFP4, "NVFP4", 64, 36},
    {GgmlType::kQ1_0, "Q1_0", 128, 18},
    {GgmlType::kQ2_0, "Q2_0", 64, 18},
};
// The row of `type`; null for ids outside the table.
constexpr const GgmlTypeInfo* FindGgmlTypeInfo(GgmlType type) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

// True for the ids above.
bool IsKnownGgmlType(std::uint32_t id);
// "F32", "Q4_K", ...; "unknown(<id>)" for other ids.
std::string GgmlTypeName(GgmlType type);
// Elements per block (1 for plain types, 32 or 256 for quantized ones).
std::int64_t GgmlBlockSize(GgmlType type);
// Bytes per block.
std::int64_t GgmlBlockBytes(GgmlType type);

// GGUF metadata value types (ids as stored).
enum class GgufType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
// "uint32", "string", "array", ...
std::string GgufTypeName(GgufType type);

// One metadata value. Scalars are decoded; strings and arrays point into the
// file's bytes.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  // Integer scalars (and bool): value as signed/unsigned 64-bit; is_signed says
  // which of u/i is authoritative.
  std::uint64_t u = 0;
  std::int64_t i = 0;
  double f = 0.0;        // float32 / float64 scalars
  std::string_view str;  // kString
  // kArray: element type and count; `raw` points at the first element for
  // numeric/bool arrays (little-endian, packed); `strings` holds string
  // elements; `items` holds nested arrays.
  GgufType elem_type = GgufType::kUint8;
  std::uint64_t count = 0;
  const std::uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> items;
  std::uint64_t file_offset = 0;  // byte offset of the value in the file
};

// One tensor's description. dims are in GGUF order: ne[0] is the contiguous
// (fastest-varying) row length, so a weight [rows, k] has ne = {k, rows}.
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  int n_dims = 0;
  std::array<std::int64_t, 4> ne{1, 1, 1, 1};  // unused dims are 1
  std::uint64_t offset = 0;                    // relative to the data section
  const std::uint8_t* data = nullptr;          // into the mapping
  std::size_t nbytes = 0;

  std::int64_t NumElements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // ne[1]*ne[2]*ne[3]: rows of ne[0] elements.
  std::int64_t NumRows() const { return ne[1] * ne[2] * ne[3]; }
  std::size_t RowBytes() const { return nbytes / static_cast<std::size_t>(NumRows()); }
  // "[640, 262144]"
  std::string DimsString() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and validates it. Throws kvshare::Error if the file
  // cannot be opened or is malformed.
  static GgufFile Open(const std::string& path);
  // Parses `size` bytes at `data` (not copied: the caller keeps them alive and
  // unchanged while the GgufFile is used). `name` labels errors.
  static GgufFile Parse(const std::uint8_t* data, std::size_t size, std::string name = "<memory>");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  std::uint32_t version() const { return version_; }
  std::uint32_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // start of the data section
  std::size_t file_size() const { return size_; }
  const std::string& name() const { return name_; }

  // ---- metadata ----
  // Keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }
  // Null if absent.
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters. Absent key -> Error "metadata key 'k' is missing"; wrong type
  // -> Error naming the key, the expected and the actual type. Integer getters
  // accept any integer type whose value fits; GetF32 accepts float32/float64.
  std::uint32_t GetU32(std::string_view key) const;
  std::int32_t GetI32(std::string_view key) const;
  std::uint64_t GetU64(std::string_view key) const;
  float GetF32(std::string_view key) const;
  bool GetBool(std::string_view key) const;
  std::string_view GetString(std::string_view key) const;
  std::vector<std::string_view> GetStringArray(std::string_view key) const;
  std::vector<float> GetF32Array(std::string_view key) const;         // float32/float64 elements
  std::vector<std::int32_t> GetI32Array(std::string_view key) const;  // integer elements that fit
  std::vector<bool> GetBoolArray(std::string_view key) const;
  // n values from a key that is either an integer scalar (repeated n times) or an
  // integer array of exactly n elements (llama.cpp's get_key_or_arr: per-layer
  // `head_count_kv`, `feed_forward_length`); another length is an Error naming it.
  std::vector<std::int32_t> GetI32OrArray(std::string_view key, std::size_t n) const;

  // Optional variants: nullopt if absent; still throw on a type mismatch.
  std::optional<std::uint32_t> GetU32Opt(std::string_view key) const;
  std::optional<std::int32_t> GetI32Opt(std::string_view key) const;
  std::optional<float> GetF32Opt(std::string_view key) const;
  std::optional<bool> GetBoolOpt(std::string_view key) const;
  std::optional<std::string_view> GetStringOpt(std::string_view key) const;

  // Defaulted variants: `def` if absent; throw on a type mismatch.
  std::uint32_t GetU32Or(std::string_view key, std::uint32_t def) const { return GetU32Opt(key).value_or(def); }
  float GetF32Or(std::string_view key, float def) const { return GetF32Opt(key).value_or(def); }
  bool GetBoolOr(std::string_view key, bool def) const { return GetBoolOpt(key).value_or(def); }

  // ---- tensors ----
  std::span<const GgufTensor> tensors() const { return tensors_; }
  // Null if absent.
  const GgufTensor* FindTensor(std::string_view name) const;
  // Throws kvshare::Error "tensor 'x' not found in <file>" if absent.
  const GgufTensor& Tensor(std::string_view name) const;

  // Tells the OS that the mapped bytes [data, data + size) are not needed for
  // now (a tensor a model has copied, e.g. repacked weights): the whole pages
  // inside the range leave the process's resident set and are read from the
  // file again if touched, so the bytes stay valid. A no-op for a file made by
  // Parse (memory the GgufFile does not own) and outside the mapping.
  void ReleasePages(const void* data, std::size_t size) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::shared_ptr<void> mapping_;  // owns the mmap (Open) or null (Parse)
  const std::uint8_t* base_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::vector<GgufValue> values_;
  std::unordered_map<std::string_view, std::size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
};

// Fuzzing / in-memory entry point: same as GgufFile::Parse.
GgufFile ParseGguf(const std::uint8_t* data, std::size_t size);

}  // namespace kvshare
