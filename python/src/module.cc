// The kvshare._core extension module. kvshare::Error becomes kvshare.Error, a
// subclass of ValueError carrying the C++ message.
#include <pybind11/pybind11.h>

#include "bind.h"
#include "kvshare/error.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "kvshare C++ core (use the kvshare package, not this module)";
  pybind11::register_exception<kvshare::Error>(m, "Error", PyExc_ValueError);
  kvshare::python::BindOp(m);
  kvshare::python::BindCache(m);
  kvshare::python::BindModel(m);
}
