// What the bench subcommands (`kvshare bench`, `kvshare bench-image`) report
// besides their timings: median / min / max of repeated runs, and the machine
// and source revision they ran on.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace kvshare::cli {

struct Stat {
  double median = 0, min = 0, max = 0;
};

// Median (mean of the middle two for an even count), min and max; `v` non-empty.
Stat Summarize(std::vector<double> v);

// /proc/cpuinfo's first "model name", or "unknown".
std::string CpuModel();

// The 1, 5 and 15 minute load averages, or -1s.
std::array<double, 3> LoadAverage();

// `git rev-parse --short HEAD` of the source tree, or "unknown".
std::string Revision();

}  // namespace kvshare::cli
