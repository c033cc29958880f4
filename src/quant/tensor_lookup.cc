// Weights of a GGUF file by name (tensor_lookup.h).
#include "quant/tensor_lookup.h"

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

namespace {
std::string Dims(std::int64_t a, std::int64_t b) { return Str("[", a, ", ", b, "]"); }
}  // namespace

std::optional<WeightMatrix> TensorLookup::MatOpt(const std::string& name, std::int64_t rows, std::int64_t cols) const {
  const GgufTensor* t = file_.FindTensor(name);
  if (t == nullptr) return std::nullopt;
  if (t->n_dims > 2) throw Error(Str("tensor '", name, "' is ", t->DimsString(), ", expected 2-D ", Dims(cols, rows)));
  WeightMatrix w = WeightMatrix::FromTensor(*t);
  if (w.rows != rows || w.cols != cols) {
    throw Error(Str("tensor '", name, "' is ", Dims(w.cols, w.rows), " (ne0, ne1), expected ", Dims(cols, rows)));
  }
  return w;
}

WeightMatrix TensorLookup::ForMatMul(WeightMatrix w) const {
  w = PackForMatMul(std::move(w), pack_);
  if (w.packed != nullptr || w.bf16_tiles != nullptr)
    file_.ReleasePages(w.data, static_cast<std::size_t>(w.rows) * w.row_bytes);
  return w;
}

WeightMatrix TensorLookup::Mat(const std::string& name, std::int64_t rows, std::int64_t cols) const {
  if (auto w = MatOpt(name, rows, cols)) return *w;
  file_.Tensor(name);  // throws "tensor 'x' not found in <file>"
  throw Error(Str("tensor '", name, "' not found"));
}

std::vector<WeightMatrix> TensorLookup::MatStack(const std::string& name, std::int64_t rows, std::int64_t cols,
                                                 std::int64_t count) const {
  const GgufTensor& t = file_.Tensor(name);
  if (t.n_dims != 3 || t.ne[0] != cols || t.ne[1] != rows || t.ne[2] != count) {
    throw Error(Str("tensor '", name, "' is ", t.DimsString(), ", expected [", cols, ", ", rows, ", ", count, "]"));
  }
  CheckWeightType(t);
  const std::size_t per = t.nbytes / static_cast<std::size_t>(count);
  std::vector<WeightMatrix> out;
  for (std::int64_t e = 0; e < count; ++e) out.push_back(WeightMatrix::Make(t.data + e * per, t.type, rows, cols));
  return out;
}

const float* TensorLookup::VecOpt(const std::string& name, std::int64_t n) const {
  const GgufTensor* t = file_.FindTensor(name);
  if (t == nullptr) return nullptr;
  if (t->type != GgmlType::kF32 || t->NumElements() != n) {
    throw Error(Str("tensor '", name, "' must be F32 with ", n, " elements, got ", GgmlTypeName(t->type), " ",
                    t->DimsString()));
  }
  return reinterpret_cast<const float*>(t->data);
}

const float* TensorLookup::Vec(const std::string& name, std::int64_t n) const {
  if (const float* p = VecOpt(name, n)) return p;
  file_.Tensor(name);
  throw Error(Str("tensor '", name, "' not found"));
}

}  // namespace kvshare::detail
