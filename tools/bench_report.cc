// The bench subcommands' shared reporting (bench_report.h).
#include "bench_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace kvshare::cli {

Stat Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::array<double, 3> LoadAverage() {
  std::array<double, 3> la{-1, -1, -1};
  if (getloadavg(la.data(), 3) != 3) la = {-1, -1, -1};
  return la;
}

std::string Revision() {
  const std::string cmd = std::string("git -C '") + KVSHARE_SOURCE_DIR + "' rev-parse --short HEAD 2>/dev/null";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "unknown";
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, p) != nullptr;
  const int rc = pclose(p);
  std::string rev = ok && rc == 0 ? std::string(buf) : "unknown";
  while (!rev.empty() && (rev.back() == '\n' || rev.back() == '\r')) rev.pop_back();
  return rev.empty() ? "unknown" : rev;
}

}  // namespace kvshare::cli
