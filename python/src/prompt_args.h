// Model.generate()'s prompt argument, checked: pybind11's own casts fail with
// "Unable to cast Python instance ... to C++ type '?'", which names neither
// the argument nor what it takes.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvshare::python {

// The UTF-8 bytes of a str. Throws kvshare::Error naming `what` when the str
// cannot be encoded (a lone surrogate, e.g. from surrogateescape decoding).
std::string Utf8Text(const pybind11::handle& s, const char* what);

// Token ids from any iterable of integers (a list, a tuple, a NumPy integer
// array). Throws pybind11::type_error for a str, bytes, a non-iterable or a
// non-integer element, and kvshare::Error for an id outside [0, n_vocab).
std::vector<std::int32_t> TokenIdsArg(const pybind11::handle& ids, const char* what, std::int64_t n_vocab);

}  // namespace kvshare::python
