#include "kvshare/tensor.h"

#include <string>

#include "kvshare/error.h"

namespace kvshare {

std::size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
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
