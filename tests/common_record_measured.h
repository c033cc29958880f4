// What a test measured on its way (how many cases ran, the worst error seen)
// goes into the test's XML record (--gtest_output=xml, ctest --output-junit)
// as measured_N properties, not onto stdout: the tests assert, benchmarks and
// docs report.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace kvshare::testing {

template <typename... Args>
void RecordMeasured(const char* format, Args... args) {
  char text[512];
  std::snprintf(text, sizeof(text), format, args...);
  std::string s(text);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  static int n = 0;
  ::testing::Test::RecordProperty("measured_" + std::to_string(++n), s);
}

}  // namespace kvshare::testing
