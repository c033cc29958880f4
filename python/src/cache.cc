#include "bind.h"

namespace kvshare::python {
void BindCache(pybind11::module_&) {}
}  // namespace kvshare::python
