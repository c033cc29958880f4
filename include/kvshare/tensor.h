// kvshare/tensor.h — non-owning tensor views that cross the public API.
//
// A view is (pointer, dtype, shape). Data is dense and row-major (the last
// dimension is contiguous); the caller owns the memory and keeps it alive for
// the duration of the call. Ranks 0..4 are supported.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace kvshare {

enum class DType : std::uint8_t { kFloat32, kFloat16, kBFloat16, kInt32, kInt64 };

// Bytes per element: 4, 2, 2, 4, 8.
std::size_t DTypeSize(DType dtype);
// "float32", "float16", "bfloat16", "int32", "int64".
const char* DTypeName(DType dtype);
// True for float32, float16 and bfloat16.
bool IsFloatingPoint(DType dtype);

inline constexpr int kMaxRank = 4;

// A shape of rank 0..4. Dims are int64 element counts (>= 0).
struct Shape {
  std::array<std::int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d);  // throws kvshare::Error if rank > 4

  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t NumElements() const;
  // "[2, 3, 4]"
  std::string ToString() const;
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
};

// Read-only view. `data` may be null only when the shape has zero elements.
struct ConstTensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;

  std::int64_t NumElements() const { return shape.NumElements(); }
  std::size_t NumBytes() const { return static_cast<std::size_t>(NumElements()) * DTypeSize(dtype); }
  template <typename T>
  const T* As() const { return static_cast<const T*>(data); }
};

// Writable view.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;

  std::int64_t NumElements() const { return shape.NumElements(); }
  std::size_t NumBytes() const { return static_cast<std::size_t>(NumElements()) * DTypeSize(dtype); }
  template <typename T>
  T* As() const { return static_cast<T*>(data); }
  ConstTensorView AsConst() const { return ConstTensorView{data, dtype, shape}; }
};

}  // namespace kvshare
