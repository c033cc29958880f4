// The single main() of kvshare_bench (bench/CMakeLists.txt links benchmark::benchmark, not benchmark_main).
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
