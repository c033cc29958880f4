// Where the tests find tests/fixtures/gemma4_assistant (the trained tiny
// target and its assistants; KVSHARE_SOURCE_DIR, as ctest sets it).
#pragma once

#include <cstdlib>
#include <string>

namespace kvshare::testing {

inline std::string AssistantFixtureDir() {
  const char* src = std::getenv("KVSHARE_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/tests/fixtures/gemma4_assistant/";
}

}  // namespace kvshare::testing
