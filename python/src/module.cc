// The kvshare._core extension module. kvshare::Error becomes kvshare.Error, a
// subclass of ValueError carrying the C++ message.
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <string>

#include "bind.h"
#include "kvshare/common/error.h"

namespace kvshare::python {

ThreadPool* CallPool(int num_threads) {
  if (num_threads < 1) throw Error("num_threads must be >= 1, got " + std::to_string(num_threads));
  if (num_threads == 1) return nullptr;
  // Per thread: a pool serves one caller at a time.
  thread_local std::map<int, std::unique_ptr<ThreadPool>> pools;
  std::unique_ptr<ThreadPool>& pool = pools[num_threads];
  if (!pool) pool = std::make_unique<ThreadPool>(num_threads);
  return pool.get();
}

}  // namespace kvshare::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "kvshare C++ core (use the kvshare package, not this module)";
  pybind11::register_exception<kvshare::Error>(m, "Error", PyExc_ValueError);
  kvshare::python::BindOp(m);
  kvshare::python::BindCache(m);
  kvshare::python::BindModel(m);
}
