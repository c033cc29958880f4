// NumPy <-> kvshare tensor views for the Python bindings (the only place that
// knows both). dtype rules:
//   float32 -> kFloat32, float16 -> kFloat16, int32 -> kInt32, int64 -> kInt64;
//   bfloat16: an ml_dtypes.bfloat16 array, or a uint16 array holding bf16 bits
//   when the call says bfloat16=True (NumPy has no bf16 dtype of its own).
// Anything else (float64, uint16 without the flag, ...) is a ValueError.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "kvshare/common/tensor.h"

namespace kvshare::python {

namespace py = pybind11;

// The kvshare dtype of a NumPy array; throws kvshare::Error naming `name`.
DType DTypeOf(const py::array& a, const std::string& name, bool bf16_bits);

// The kvshare shape of a NumPy array (rank <= 4).
Shape ShapeOf(const py::array& a, const std::string& name);

// Keeps converted input arrays alive for the duration of a call.
class ArrayKeeper {
 public:
  // A read-only view of `obj` (any array-like); non-contiguous arrays are
  // copied to C order first, dtypes are never converted.
  ConstTensorView Const(const py::handle& obj, const std::string& name, bool bf16_bits);

 private:
  std::vector<py::array> keep_;
};

// A writable view of `obj`, which must be a C-contiguous, writable ndarray
// (the op writes into it in place).
TensorView Mutable(const py::handle& obj, const std::string& name, bool bf16_bits);

// A NumPy dtype for a kvshare dtype; bfloat16 becomes uint16 (bits).
py::dtype NumpyDType(DType dtype);

}  // namespace kvshare::python
