// kvshare/common/tensor.h — non-owning tensor views that cross the public API.
//
// A view is (pointer, dtype, shape). Data is dense and row-major (the last
// dimension is contiguous); the caller owns the memory and keeps it alive for
// the duration of the call. Ranks 0..4 are supported.
//
// Block-quantized dtypes. A q8_0 view (DType::kQ8_0, llama.cpp's GGML_TYPE_Q8_0
// block layout) still has a shape in *elements*; its last dimension must be a
// multiple of 32, and each run of 32 consecutive elements along it is one
// 34-byte block {uint16 d (IEEE fp16 bits), int8 q[32]} holding the values
// d * q[i]. Blocks are packed with no padding, so a row of H elements takes
// H / 32 * 34 bytes and a view takes NumElements() / 32 * 34 bytes
// (DTypeBytes). q8_0 is a KV-cache storage dtype only (caches and past /
// present of the GQA op); element-wise stores do not exist for it: values are
// written a row at a time, quantized per block (d = max|x| / 127 rounded to
// fp16, q = round(x / d)).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace kvshare {

enum class DType : std::uint8_t { kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kQ8_0 };

// q8_0: elements per block and bytes per block (fp16 scale + 32 int8 codes).
inline constexpr int kQ8_0BlockSize = 32;
inline constexpr int kQ8_0BlockBytes = 34;

// Bytes per element: 4, 2, 2, 4, 8. Throws kvshare::Error for q8_0, whose
// elements have no byte size of their own (use DTypeBytes).
std::size_t DTypeSize(DType dtype);
// Elements per storage block: 32 for q8_0, 1 for every other dtype.
std::int64_t DTypeBlockSize(DType dtype);
// Bytes of n consecutive elements (along the last dimension): n * DTypeSize,
// or n / 32 * 34 for q8_0. Throws kvshare::Error when n < 0 or, for q8_0, when
// n is not a multiple of 32 (the message names both).
std::size_t DTypeBytes(DType dtype, std::int64_t n);
// "float32", "float16", "bfloat16", "int32", "int64", "q8_0".
const char* DTypeName(DType dtype);
// True for float32, float16 and bfloat16.
bool IsFloatingPoint(DType dtype);
// True for block-quantized dtypes (q8_0).
bool IsQuantized(DType dtype);
// True for the dtypes a KV cache (and the GQA op's past / present) may be
// stored in: float32, float16, bfloat16 and q8_0.
bool IsKvCacheDType(DType dtype);
// The KV cache dtype a name spells, for every front end's option (`kvshare
// --kv-dtype`, the Python module's KvCache dtype= and Model kv_dtype=), so all
// accept one vocabulary: DTypeName's "float32", "float16", "bfloat16", "q8_0"
// and llama.cpp's "f32", "f16", "bf16" (exact, case-sensitive). Throws
// kvshare::Error for any other name, naming `what` (the option) and listing
// the accepted names: "kv_dtype 'int8' is not one of float32 (f32), float16
// (f16), bfloat16 (bf16), q8_0".
DType KvCacheDTypeFromName(std::string_view name, std::string_view what = "KV cache dtype");

// Where a view's memory lives and an op runs: host memory and the CPU kernels,
// or CUDA device memory (cudaMalloc / cudaMallocManaged) and the CUDA kernels
// (built when KVSHARE_CUDA is ON; each op's header says which of its inputs
// stay on the host).
enum class Device : std::uint8_t { kCpu, kCuda };
// "cpu", "cuda".
const char* DeviceName(Device device);

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
// NumBytes() throws kvshare::Error for a q8_0 view whose element count is not a
// multiple of 32.
struct ConstTensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;

  std::int64_t NumElements() const { return shape.NumElements(); }
  std::size_t NumBytes() const { return DTypeBytes(dtype, NumElements()); }
  template <typename T>
  const T* As() const {
    return static_cast<const T*>(data);
  }
};

// Writable view.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Shape shape;

  std::int64_t NumElements() const { return shape.NumElements(); }
  std::size_t NumBytes() const { return DTypeBytes(dtype, NumElements()); }
  template <typename T>
  T* As() const {
    return static_cast<T*>(data);
  }
  ConstTensorView AsConst() const { return ConstTensorView{data, dtype, shape}; }
};

}  // namespace kvshare
