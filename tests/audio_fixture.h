// The speech clips of tests/fixtures/audio/ (tests/tools/audio_fixtures.py):
// the encoded files and what transformers 5.23 computes from them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common_source_path.h"

namespace kvshare::testing {

inline std::string AudioDir() { return SourcePath("tests/fixtures/audio/"); }

inline std::vector<std::uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<float> ReadF32(const std::string& path) {
  const std::vector<std::uint8_t> bytes = ReadBytes(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  // An empty file (a clip too short for any frame) has no data pointer to copy from.
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// audio.json: per clip its file, rate, channels, 16 kHz sample count and
// each extractor's frames and mask ("0101..." per frame).
inline nlohmann::json AudioClips() {
  std::ifstream in(AudioDir() + "audio.json");
  EXPECT_TRUE(in) << AudioDir() << "audio.json";
  return nlohmann::json::parse(in)["clips"];
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace kvshare::testing
