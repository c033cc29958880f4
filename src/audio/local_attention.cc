// LocalAttention (local_attention.h): per query frame and head, the two dot
// products of each slot as SIMD sums, the softcap and softmax in scalar
// float, then the weighted values as SIMD multiply-adds over the head's
// lanes. Queries are independent: ranges of them per pool thread.
#include "audio/local_attention.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "audio/local_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvshare::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// {q.k, q.r} over n values: lane-wise sums over the full vectors, reduced,
// then the tail in order.
HWY_INLINE void DotPair(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT r, int n,
                        float& qk, float& qr) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  auto ak = hn::Zero(df), ar = hn::Zero(df);
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto vq = hn::LoadU(df, q + i);
    ak = hn::MulAdd(vq, hn::LoadU(df, k + i), ak);
    ar = hn::MulAdd(vq, hn::LoadU(df, r + i), ar);
  }
  qk = i > 0 ? hn::GetLane(hn::SumOfLanes(df, ak)) : 0.0f;
  qr = i > 0 ? hn::GetLane(hn::SumOfLanes(df, ar)) : 0.0f;
  for (; i < n; ++i) {
    qk += q[i] * k[i];
    qr += q[i] * r[i];
  }
}

// Query frames t0 .. t1 - 1, every head.
void AttendRangeImpl(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                     const float* HWY_RESTRICT rel, const std::uint8_t* HWY_RESTRICT valid,
                     const LocalAttentionShape& s, std::int64_t t0, std::int64_t t1, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  const std::int64_t T = s.frames, d = std::int64_t{s.n_head} * s.head_dim;
  const int hd = s.head_dim;
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t first = t / kChunk * kChunk - kPast;
    for (int h = 0; h < s.n_head; ++h) {
      const float* qt = q + t * d + h * hd;
      float w[kSlots];
      for (int j = 0; j < kSlots; ++j) {
        const std::int64_t kp = first + j, dist = t - kp;
        if (!(kp >= 0 && kp < T && valid[kp] && dist >= 0 && dist <= s.max_distance)) {
          w[j] = s.hidden_logit;
          continue;
        }
        float ac, bd;
        DotPair(qt, k + kp * d + h * hd, rel + (kPast - dist) * d + h * hd, hd, ac, bd);
        w[j] = kSoftcap * std::tanh((ac + bd) / kSoftcap);
      }
      const float top = *std::max_element(w, w + kSlots);
      float sum = 0.0f;
      for (float& e : w) sum += (e = std::exp(e - top));
      // Slots outside the clip hold zeros: they count in the sum only.
      const int j0 = static_cast<int>(std::max<std::int64_t>(0, -first));
      const int j1 = static_cast<int>(std::min<std::int64_t>(kSlots, T - first));
      const float inv = 1.0f / sum;
      float* y = out + t * d + h * hd;
      const float* vh = v + h * hd;
      int i = 0;
      for (; i + N <= hd; i += N) {
        auto acc = hn::Zero(df);
        for (int j = j0; j < j1; ++j) acc = hn::MulAdd(hn::Set(df, w[j]), hn::LoadU(df, vh + (first + j) * d + i), acc);
        hn::StoreU(hn::Mul(acc, hn::Set(df, inv)), df, y + i);
      }
      for (; i < hd; ++i) {
        float acc = 0.0f;
        for (int j = j0; j < j1; ++j) acc += w[j] * vh[(first + j) * d + i];
        y[i] = acc * inv;
      }
    }
  }
}

}  // namespace kvshare::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kvshare/common/thread_pool.h"

namespace kvshare::detail {
HWY_EXPORT(AttendRangeImpl);

void LocalAttention(const float* q, const float* k, const float* v, const float* rel, const std::uint8_t* valid,
                    const LocalAttentionShape& shape, float* out, ThreadPool* pool) {
  const std::int64_t T = shape.frames, d = std::int64_t{shape.n_head} * shape.head_dim;
  ParallelForRanges(pool, T, RowGrain(pool, T, std::int64_t{kSlots} * d), [&](std::int64_t t0, std::int64_t t1) {
    HWY_DYNAMIC_DISPATCH(AttendRangeImpl)(q, k, v, rel, valid, shape, t0, t1, out);
  });
}

}  // namespace kvshare::detail
#endif  // HWY_ONCE
