#include "bind.h"

namespace kvshare::python {
void BindModel(pybind11::module_&) {}
}  // namespace kvshare::python
