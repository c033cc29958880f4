// Registration functions of the kvshare._core extension module, one per area.
#pragma once

#include <pybind11/pybind11.h>

#include "kvshare/common/thread_pool.h"

namespace kvshare::python {

// The calling thread's pool of num_threads threads for an op call (null for
// 1: run inline), made on first use and kept for that thread's later calls,
// so a call does not pay for starting threads. Throws kvshare::Error if
// num_threads < 1.
ThreadPool* CallPool(int num_threads);

void BindOp(pybind11::module_& m);     // op.cc: GroupQueryAttention
void BindCache(pybind11::module_& m);  // cache.cc: KvCache, layer plans, memory reports
void BindModel(pybind11::module_& m);  // model.cc: Model, tokenizer, generation

}  // namespace kvshare::python
