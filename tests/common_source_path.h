// Where tests find the repository's files (fixtures, scripts): the root
// ctest names in KVSHARE_SOURCE_DIR, else the working directory.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace kvshare::testing {

inline std::string SourceDir() {
  const char* src = std::getenv("KVSHARE_SOURCE_DIR");
  return src != nullptr ? src : ".";
}

// SourceDir() + "/" + rel, e.g. SourcePath("tests/fixtures/gemma4/e2b.f32.gguf").
inline std::string SourcePath(std::string_view rel) { return SourceDir() + "/" + std::string(rel); }

}  // namespace kvshare::testing
