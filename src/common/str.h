// Str(a, b, c...) concatenates its arguments with operator<< — for error messages.
#pragma once

#include <sstream>
#include <string>

namespace kvshare::detail {

template <typename... Args>
std::string Str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace kvshare::detail
