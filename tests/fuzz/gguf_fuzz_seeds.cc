// Writes a small seed corpus for gguf_fuzz: the test helper's valid file, a
// version-2 copy, one with each metadata kind, and a few truncations.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gguf_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::filesystem::create_directories(argv[1]);
  int n = 0;
  auto write = [&](const std::vector<std::uint8_t>& b) {
    std::ofstream(std::string(argv[1]) + "/seed" + std::to_string(n++) + ".gguf", std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  };
  using namespace kvshare::testing;
  GgufSpec s = ValidSpec();
  write(s.Build());
  const auto full = s.Build();
  for (std::size_t cut : {16u, 40u, 100u, 200u}) {
    if (cut < full.size()) write(std::vector<std::uint8_t>(full.begin(), full.begin() + cut));
  }
  s.version = 2;
  write(s.Build());
  GgufSpec k = ValidSpec();
  k.kvs.push_back(GgufKv::U32("general.alignment", 64));
  k.alignment = 64;
  k.tensors.push_back({"q4k", {256, 2}, 12, std::vector<std::uint8_t>(288, 0x11), std::nullopt});
  k.tensors.push_back({"q6k", {256, 1}, 14, std::vector<std::uint8_t>(210, 0x22), std::nullopt});
  k.tensors.push_back({"q5_0", {64, 1}, 6, std::vector<std::uint8_t>(44, 0x33), std::nullopt});
  k.tensors.push_back({"q4_0", {32, 1}, 2, std::vector<std::uint8_t>(18, 0x44), std::nullopt});
  k.tensors.push_back({"f16", {4, 1, 1, 2}, 1, std::vector<std::uint8_t>(16, 0x3c), std::nullopt});
  k.tensors.push_back({"bf16", {4}, 30, std::vector<std::uint8_t>(8, 0x3f), std::nullopt});
  write(k.Build());
  std::printf("wrote %d seeds to %s\n", n, argv[1]);
  return 0;
}
