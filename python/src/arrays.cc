#include "arrays.h"

#include "kvshare/common/error.h"

namespace kvshare::python {

DType DTypeOf(const py::array& a, const std::string& name, bool bf16_bits) {
  const py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  const std::string dname = py::str(dt.attr("name"));
  if (dname == "bfloat16") return DType::kBFloat16;
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'u' && size == 2) {
    if (bf16_bits) return DType::kBFloat16;
    throw Error("'" + name + "' is a uint16 array: pass bfloat16=True to read uint16 arrays as bfloat16 bits");
  }
  throw Error("'" + name + "' has dtype " + dname +
              "; kvshare takes float32, float16, bfloat16 (ml_dtypes.bfloat16, or uint16 bits with "
              "bfloat16=True), int32 and int64 arrays");
}

Shape ShapeOf(const py::array& a, const std::string& name) {
  if (a.ndim() > kMaxRank) {
    throw Error("'" + name + "' has rank " + std::to_string(a.ndim()) + "; at most " + std::to_string(kMaxRank) +
                " dimensions are supported");
  }
  Shape s;
  s.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < s.rank; ++i) s.dims[static_cast<std::size_t>(i)] = a.shape(i);
  return s;
}

namespace {
py::array AsArray(const py::handle& obj, const std::string& name) {
  if (!py::isinstance<py::array>(obj)) {
    throw Error("'" + name + "' must be a numpy.ndarray, got " +
                std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  return py::reinterpret_borrow<py::array>(obj);
}
}  // namespace

ConstTensorView ArrayKeeper::Const(const py::handle& obj, const std::string& name, bool bf16_bits) {
  py::array a = AsArray(obj, name);
  const DType dt = DTypeOf(a, name, bf16_bits);
  if (!(a.flags() & py::array::c_style)) {
    a = py::module_::import("numpy").attr("ascontiguousarray")(a).cast<py::array>();
  }
  keep_.push_back(a);
  return ConstTensorView{a.data(), dt, ShapeOf(a, name)};
}

TensorView Mutable(const py::handle& obj, const std::string& name, bool bf16_bits) {
  py::array a = AsArray(obj, name);
  const DType dt = DTypeOf(a, name, bf16_bits);
  if (!(a.flags() & py::array::c_style)) throw Error("'" + name + "' must be C-contiguous (it is written in place)");
  if (!a.writeable()) throw Error("'" + name + "' must be writable (it is written in place)");
  return TensorView{a.mutable_data(), dt, ShapeOf(a, name)};
}

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return py::dtype("float32");
    case DType::kFloat16: return py::dtype("float16");
    case DType::kBFloat16: return py::dtype("uint16");
    case DType::kInt32: return py::dtype("int32");
    case DType::kInt64: return py::dtype("int64");
    case DType::kQ8_0: return py::dtype("uint8");  // raw 34-byte blocks (see ViewOf in cache.cc)
  }
  throw Error("unknown dtype");
}

}  // namespace kvshare::python
