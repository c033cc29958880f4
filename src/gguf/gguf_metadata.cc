// GGUF type names, typed metadata getters and tensor lookup (the ggml type
// table itself: kGgmlTypes in kvshare/gguf/gguf.h).
#include <cstring>
#include <limits>
#include <string>

#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"

namespace kvshare {

namespace {

bool IsInteger(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}
bool IsSigned(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 || t == GgufType::kInt64;
}

[[noreturn]] void Mismatch(const std::string& file, std::string_view key, const char* expected, const GgufValue& v) {
  std::string actual = GgufTypeName(v.type);
  if (v.type == GgufType::kArray) actual += " of " + GgufTypeName(v.elem_type);
  throw Error("GGUF " + file + ": metadata key '" + std::string(key) + "' has type " + actual + ", expected " +
              expected);
}

// Integer value of v, checked to lie in [lo, hi].
template <typename T>
T IntValue(const std::string& file, std::string_view key, const char* expected, const GgufValue& v) {
  if (!IsInteger(v.type)) Mismatch(file, key, expected, v);
  const bool neg = IsSigned(v.type) && v.i < 0;
  bool fits;
  if (neg) {
    fits = std::numeric_limits<T>::is_signed && v.i >= static_cast<std::int64_t>(std::numeric_limits<T>::min());
  } else {
    fits = v.u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  }
  if (!fits) {
    throw Error("GGUF " + file + ": metadata key '" + std::string(key) + "' value " +
                (neg ? std::to_string(v.i) : std::to_string(v.u)) + " does not fit in " + expected);
  }
  return neg ? static_cast<T>(v.i) : static_cast<T>(v.u);
}

// Reads element k of a numeric array as a scalar GgufValue.
GgufValue ArrayElement(const GgufValue& a, std::uint64_t k) {
  GgufValue v;
  v.type = a.elem_type;
  const std::uint8_t* p = a.raw;
  auto load = [&](auto tag) {
    decltype(tag) x;
    std::memcpy(&x, p + k * sizeof(x), sizeof(x));
    return x;
  };
  switch (a.elem_type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      v.u = load(std::uint8_t{});
      v.i = static_cast<std::int64_t>(v.u);
      break;
    case GgufType::kInt8:
      v.i = load(std::int8_t{});
      v.u = static_cast<std::uint64_t>(v.i);
      break;
    case GgufType::kUint16:
      v.u = load(std::uint16_t{});
      v.i = static_cast<std::int64_t>(v.u);
      break;
    case GgufType::kInt16:
      v.i = load(std::int16_t{});
      v.u = static_cast<std::uint64_t>(v.i);
      break;
    case GgufType::kUint32:
      v.u = load(std::uint32_t{});
      v.i = static_cast<std::int64_t>(v.u);
      break;
    case GgufType::kInt32:
      v.i = load(std::int32_t{});
      v.u = static_cast<std::uint64_t>(v.i);
      break;
    case GgufType::kUint64:
      v.u = load(std::uint64_t{});
      v.i = static_cast<std::int64_t>(v.u);
      break;
    case GgufType::kInt64:
      v.i = load(std::int64_t{});
      v.u = static_cast<std::uint64_t>(v.i);
      break;
    case GgufType::kFloat32: v.f = load(float{}); break;
    case GgufType::kFloat64: v.f = load(double{}); break;
    default: break;
  }
  return v;
}

}  // namespace

bool IsKnownGgmlType(std::uint32_t id) { return FindGgmlTypeInfo(static_cast<GgmlType>(id)) != nullptr; }

std::string GgmlTypeName(GgmlType type) {
  const GgmlTypeInfo* i = FindGgmlTypeInfo(type);
  return i ? i->name : "unknown(" + std::to_string(static_cast<std::uint32_t>(type)) + ")";
}
std::int64_t GgmlBlockSize(GgmlType type) {
  const GgmlTypeInfo* i = FindGgmlTypeInfo(type);
  return i ? i->block : 0;
}
std::int64_t GgmlBlockBytes(GgmlType type) {
  const GgmlTypeInfo* i = FindGgmlTypeInfo(type);
  return i ? i->bytes : 0;
}

std::string GgufTypeName(GgufType type) {
  static const char* kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                 "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto id = static_cast<std::uint32_t>(type);
  return id < 13 ? kNames[id] : "unknown(" + std::to_string(id) + ")";
}

std::string GgufTensor::DimsString() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += (d ? ", " : "") + std::to_string(ne[static_cast<std::size_t>(d)]);
  return s + "]";
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &values_[it->second];
}

namespace {
const GgufValue& Require(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) throw Error("GGUF " + f.name() + ": metadata key '" + std::string(key) + "' is missing");
  return *v;
}
}  // namespace

std::uint32_t GgufFile::GetU32(std::string_view key) const {
  return IntValue<std::uint32_t>(name_, key, "uint32", Require(*this, key));
}
std::int32_t GgufFile::GetI32(std::string_view key) const {
  return IntValue<std::int32_t>(name_, key, "int32", Require(*this, key));
}
std::uint64_t GgufFile::GetU64(std::string_view key) const {
  return IntValue<std::uint64_t>(name_, key, "uint64", Require(*this, key));
}

float GgufFile::GetF32(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kFloat32 && v.type != GgufType::kFloat64) Mismatch(name_, key, "float32", v);
  return static_cast<float>(v.f);
}
bool GgufFile::GetBool(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kBool) Mismatch(name_, key, "bool", v);
  return v.u != 0;
}
std::string_view GgufFile::GetString(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kString) Mismatch(name_, key, "string", v);
  return v.str;
}
std::vector<std::string_view> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kArray || v.elem_type != GgufType::kString) Mismatch(name_, key, "array of string", v);
  return v.strings;
}
std::vector<float> GgufFile::GetF32Array(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kArray || (v.elem_type != GgufType::kFloat32 && v.elem_type != GgufType::kFloat64)) {
    Mismatch(name_, key, "array of float32", v);
  }
  std::vector<float> out(static_cast<std::size_t>(v.count));
  for (std::uint64_t k = 0; k < v.count; ++k) out[k] = static_cast<float>(ArrayElement(v, k).f);
  return out;
}
std::vector<std::int32_t> GgufFile::GetI32Array(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kArray || !IsInteger(v.elem_type)) Mismatch(name_, key, "array of int32", v);
  std::vector<std::int32_t> out(static_cast<std::size_t>(v.count));
  const std::string k_name(key);
  for (std::uint64_t k = 0; k < v.count; ++k) {
    out[k] = IntValue<std::int32_t>(name_, k_name + "[" + std::to_string(k) + "]", "int32", ArrayElement(v, k));
  }
  return out;
}

std::vector<bool> GgufFile::GetBoolArray(std::string_view key) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kArray || v.elem_type != GgufType::kBool) Mismatch(name_, key, "array of bool", v);
  std::vector<bool> out(static_cast<std::size_t>(v.count));
  for (std::uint64_t k = 0; k < v.count; ++k) out[k] = ArrayElement(v, k).u != 0;
  return out;
}
std::vector<std::int32_t> GgufFile::GetI32OrArray(std::string_view key, std::size_t n) const {
  const GgufValue& v = Require(*this, key);
  if (v.type != GgufType::kArray) return std::vector<std::int32_t>(n, GetI32(key));
  std::vector<std::int32_t> out = GetI32Array(key);
  if (out.size() != n) {
    throw Error("GGUF " + name_ + ": metadata key '" + std::string(key) + "' is an array of " +
                std::to_string(out.size()) + " values, expected " + std::to_string(n) + " (one per layer) or a scalar");
  }
  return out;
}

std::optional<std::uint32_t> GgufFile::GetU32Opt(std::string_view key) const {
  return Has(key) ? std::optional<std::uint32_t>(GetU32(key)) : std::nullopt;
}
std::optional<std::int32_t> GgufFile::GetI32Opt(std::string_view key) const {
  return Has(key) ? std::optional<std::int32_t>(GetI32(key)) : std::nullopt;
}
std::optional<float> GgufFile::GetF32Opt(std::string_view key) const {
  return Has(key) ? std::optional<float>(GetF32(key)) : std::nullopt;
}
std::optional<bool> GgufFile::GetBoolOpt(std::string_view key) const {
  return Has(key) ? std::optional<bool>(GetBool(key)) : std::nullopt;
}
std::optional<std::string_view> GgufFile::GetStringOpt(std::string_view key) const {
  return Has(key) ? std::optional<std::string_view>(GetString(key)) : std::nullopt;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}
const GgufTensor& GgufFile::Tensor(std::string_view name) const {
  const GgufTensor* t = FindTensor(name);
  if (t == nullptr) throw Error("GGUF " + name_ + ": tensor '" + std::string(name) + "' not found");
  return *t;
}

}  // namespace kvshare
