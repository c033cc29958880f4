#include "kvshare/common/tensor.h"

#include <string>

#include "kvshare/common/error.h"

namespace kvshare {

std::size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kQ8_0:
      throw Error(
          "DTypeSize: q8_0 is block-quantized (32 elements in 34 bytes) and has no per-element size; "
          "use DTypeBytes(dtype, n)");
  }
  return 0;
}

std::int64_t DTypeBlockSize(DType dtype) { return dtype == DType::kQ8_0 ? kQ8_0BlockSize : 1; }

std::size_t DTypeBytes(DType dtype, std::int64_t n) {
  if (n < 0) throw Error("DTypeBytes: element count must be >= 0, got " + std::to_string(n));
  if (dtype == DType::kQ8_0) {
    if (n % kQ8_0BlockSize != 0) {
      throw Error("DTypeBytes: q8_0 stores blocks of " + std::to_string(kQ8_0BlockSize) + " elements; " +
                  std::to_string(n) + " elements is not a multiple of " + std::to_string(kQ8_0BlockSize));
    }
    return static_cast<std::size_t>(n / kQ8_0BlockSize) * kQ8_0BlockBytes;
  }
  return static_cast<std::size_t>(n) * DTypeSize(dtype);
}
const char* DeviceName(Device device) {
  switch (device) {
    case Device::kCpu: return "cpu";
    case Device::kCuda: return "cuda";
  }
  return "unknown";
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kQ8_0: return "q8_0";
  }
  return "unknown";
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

bool IsQuantized(DType dtype) { return dtype == DType::kQ8_0; }

bool IsKvCacheDType(DType dtype) { return IsFloatingPoint(dtype) || dtype == DType::kQ8_0; }

namespace {

// The KV cache dtypes and their llama.cpp abbreviations (-ctk f16); the full
// names are DTypeName's, so the two vocabularies cannot drift apart.
struct KvDTypeSpelling {
  DType dtype;
  const char* short_name;  // null: the full name only
};
constexpr KvDTypeSpelling kKvDTypeSpellings[] = {
    {DType::kFloat32, "f32"}, {DType::kFloat16, "f16"}, {DType::kBFloat16, "bf16"}, {DType::kQ8_0, nullptr}};

}  // namespace

DType KvCacheDTypeFromName(std::string_view name, std::string_view what) {
  std::string accepted;
  for (const KvDTypeSpelling& s : kKvDTypeSpellings) {
    if (name == DTypeName(s.dtype) || (s.short_name != nullptr && name == s.short_name)) return s.dtype;
    if (!accepted.empty()) accepted += ", ";
    accepted += DTypeName(s.dtype);
    if (s.short_name != nullptr) accepted += std::string(" (") + s.short_name + ")";
  }
  throw Error(std::string(what) + " '" + std::string(name) + "' is not one of " + accepted);
}

Shape::Shape(std::initializer_list<std::int64_t> d) {
  if (d.size() > static_cast<std::size_t>(kMaxRank)) {
    throw Error("Shape: rank must be <= " + std::to_string(kMaxRank) + ", got " + std::to_string(d.size()));
  }
  for (std::int64_t v : d) dims[static_cast<std::size_t>(rank++)] = v;
}

std::int64_t Shape::NumElements() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
  return n;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[static_cast<std::size_t>(i)] != other.dims[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

}  // namespace kvshare
