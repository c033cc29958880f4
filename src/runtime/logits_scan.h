// One SIMD pass over a row of logits for the sampler: its maximum and whether
// it holds a NaN or +inf (which the sampler refuses), and the first index of a
// value (greedy argmax, lowest id on ties). Highway, run-time dispatch.
#pragma once

#include <cstdint>

namespace kvshare::detail {

struct LogitsScan {
  float max;                  // max over x (-inf when every value is -inf); meaningless when invalid >= 0
  std::int64_t invalid = -1;  // index of the first NaN or +inf, -1 if none
};

// x[0 .. n), n >= 1.
LogitsScan ScanLogits(const float* x, std::int64_t n);

// The lowest i with x[i] == v, or n if none.
std::int64_t FindFirstEqual(const float* x, std::int64_t n, float v);

}  // namespace kvshare::detail
