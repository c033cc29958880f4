// Registration functions of the kvshare._core extension module, one per area.
#pragma once

#include <pybind11/pybind11.h>

namespace kvshare::python {

void BindOp(pybind11::module_& m);     // op.cc: GroupQueryAttention
void BindCache(pybind11::module_& m);  // cache.cc: KvCache, layer plans, memory reports
void BindModel(pybind11::module_& m);  // model.cc: Model, tokenizer, generation

}  // namespace kvshare::python
