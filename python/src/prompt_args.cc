#include "prompt_args.h"

#include <string>

#include "kvshare/common/error.h"

namespace kvshare::python {

namespace py = pybind11;

namespace {

std::string TypeName(const py::handle& o) { return py::str(py::type::handle_of(o).attr("__name__")); }

}  // namespace

std::string Utf8Text(const py::handle& s, const char* what) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (p == nullptr) {
    const py::error_already_set e;  // takes and clears the UnicodeEncodeError
    throw Error(std::string(what) + " is not valid Unicode text (" + e.what() + ")");
  }
  return std::string(p, static_cast<std::size_t>(n));
}

std::vector<std::int32_t> TokenIdsArg(const py::handle& ids, const char* what, std::int64_t n_vocab) {
  const std::string expected = std::string(what) + " must be a str or a sequence of token ids (int)";
  if (py::isinstance<py::bytes>(ids) || py::isinstance<py::bytearray>(ids)) {
    throw py::type_error(expected + ", got " + TypeName(ids) + ": decode it to a str first");
  }
  if (py::isinstance<py::str>(ids) || !py::isinstance<py::iterable>(ids)) {
    throw py::type_error(expected + ", got " + TypeName(ids));
  }
  std::vector<std::int32_t> out;
  for (const py::handle item : ids) {
    const std::string at = std::string(what) + "[" + std::to_string(out.size()) + "]";
    // __index__: Python ints, NumPy integers and bools; not floats.
    if (PyIndex_Check(item.ptr()) == 0) {
      throw py::type_error(at + " is a " + TypeName(item) + ", not a token id (int)");
    }
    PyObject* as_int = PyNumber_Index(item.ptr());
    if (as_int == nullptr) throw py::error_already_set();
    const py::int_ index = py::reinterpret_steal<py::int_>(as_int);
    int overflow = 0;
    const long long id = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0 || id < 0 || id >= n_vocab) {
      throw Error("token id " + std::string(py::str(index)) + " (" + at + ") out of range [0, " +
                  std::to_string(n_vocab) + ")");
    }
    out.push_back(static_cast<std::int32_t>(id));
  }
  return out;
}

}  // namespace kvshare::python
