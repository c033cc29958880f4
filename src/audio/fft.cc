// RealFft (fft.h) over FFTW's r2c transform.
#include "audio/fft.h"

#include <fftw3.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {
namespace {

std::mutex& PlannerLock() {
  static std::mutex lock;
  return lock;
}

struct FftwFree {
  void operator()(void* p) const { fftw_free(p); }
};

}  // namespace

RealFft::RealFft(int n) : n_(n), plan_(nullptr) {
  if (n <= 0) throw Error(Str("FFT size ", n, " must be positive"));
  // fftw_malloc'd arrays for the plan: the calls' own arrays, also from
  // fftw_malloc, then have the alignment the plan assumes.
  std::unique_ptr<double, FftwFree> in(fftw_alloc_real(static_cast<std::size_t>(n)));
  std::unique_ptr<fftw_complex, FftwFree> out(fftw_alloc_complex(static_cast<std::size_t>(n / 2 + 1)));
  std::lock_guard<std::mutex> guard(PlannerLock());
  plan_ = fftw_plan_dft_r2c_1d(n, in.get(), out.get(), FFTW_ESTIMATE);
  if (plan_ == nullptr) throw Error(Str("FFTW could not plan a real FFT of size ", n));
}

RealFft::~RealFft() {
  std::lock_guard<std::mutex> guard(PlannerLock());
  fftw_destroy_plan(static_cast<fftw_plan>(plan_));
}

void RealFft::Magnitude(const double* in, int count, double* out) const {
  const std::size_t n = static_cast<std::size_t>(n_), bins = n / 2 + 1;
  std::unique_ptr<double, FftwFree> buf(fftw_alloc_real(n));
  std::unique_ptr<fftw_complex, FftwFree> spec(fftw_alloc_complex(bins));
  for (int f = 0; f < count; ++f) {
    std::memcpy(buf.get(), in + f * n, sizeof(double) * n);  // r2c may overwrite its input
    fftw_execute_dft_r2c(static_cast<fftw_plan>(plan_), buf.get(), spec.get());
    for (std::size_t k = 0; k < bins; ++k) out[f * bins + k] = std::hypot(spec.get()[k][0], spec.get()[k][1]);
  }
}

}  // namespace kvshare::detail
