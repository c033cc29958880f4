// Weights of a GGUF file by name, with their expected shapes: the lookup every
// forward pass (src/model) and encoder (src/vision) loads its tensors through.
// Internal to src/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvshare/gguf/gguf.h"
#include "quant/quant.h"

namespace kvshare::detail {

// Tensors of a GGUF file by name, with their expected shapes. Every error is a
// kvshare::Error naming the tensor, the expected and the actual shape / type.
class TensorLookup {
 public:
  // pack: how ForMatMul prepares the matrices (PackForMatMul's options).
  explicit TensorLookup(const GgufFile& file, PackOptions pack = {}) : file_(file), pack_(pack) {}
  // A 2-D weight [rows, cols] (GGUF ne = {cols, rows}) of a supported type.
  WeightMatrix Mat(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  std::optional<WeightMatrix> MatOpt(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // w prepared for MatMul: packed where this CPU has a kernel for its layout
  // (PackForMatMul with the lookup's options), and then its file pages
  // released (GgufFile::ReleasePages: MatMul reads the packed copy, so the
  // model does not hold both). For the
  // matrices of matrix products, not for tables that are only looked up.
  WeightMatrix ForMatMul(WeightMatrix w) const;
  // A 3-D stack of `count` weights [rows, cols] (GGUF ne = {cols, rows, count}),
  // one WeightMatrix per entry of the last dimension (MoE experts).
  std::vector<WeightMatrix> MatStack(const std::string& name, std::int64_t rows, std::int64_t cols,
                                     std::int64_t count) const;
  // An F32 vector of n elements (norm weights, scales).
  const float* Vec(const std::string& name, std::int64_t n) const;
  const float* VecOpt(const std::string& name, std::int64_t n) const;
  const GgufFile& file() const { return file_; }

 private:
  const GgufFile& file_;
  PackOptions pack_;
};

}  // namespace kvshare::detail
