// kvshare/common/error.h — the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>

namespace kvshare {

// Every invalid input, shape, dtype, range or combination raises kvshare::Error
// with a message naming the input, the expected value and the actual value.
// Errors are raised before any output or cache is written, unless a function's
// documentation says otherwise.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kvshare
