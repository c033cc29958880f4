// Reference attention: plain loops, double accumulation, obviously correct.
// The oracle every optimized kernel is tested against.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/attend.h"
#include "common/float_convert.h"

namespace kvshare::detail {
namespace {

double KvAt(const KvSource& src, std::int64_t b, std::int64_t n, std::int64_t j, std::int64_t h) {
  const std::int64_t slot = src.ring_capacity > 0 ? j % src.ring_capacity : j;
  return LoadAsFloat(src.data, src.dtype, b * src.batch_stride + n * src.head_stride + slot * src.row_stride + h);
}

// The bidirectional span [start, end) of row b that holds position pos, or
// the empty [0, 0) (gqa.h: padding pairs (0, 0) hold nothing).
struct Span {
  std::int64_t start = 0, end = 0;
};
Span SpanAt(const AttendParams& p, std::int64_t b, std::int64_t pos) {
  for (std::int64_t k = 0; p.spans != nullptr && k < p.spans_per_row; ++k) {
    const std::int64_t* pair = p.spans + (b * p.spans_per_row + k) * 2;
    if (pair[0] <= pos && pos < pair[1]) return {pair[0], pair[1]};
  }
  return {};
}

}  // namespace

void AttendReference(const AttendParams& p) {
  const std::int64_t B = p.batch, S = p.q_len, N = p.num_heads, H = p.head_size;
  const std::int64_t group = N / p.kv_heads;
  std::vector<double> x;
  std::vector<char> visible;
  std::vector<double> acc(static_cast<std::size_t>(H));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t T = p.kv_len[b];
    x.assign(static_cast<std::size_t>(std::max<std::int64_t>(T, 0)), 0.0);
    visible.assign(x.size(), 0);
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t pos = p.q_offset[b] + s;
      const bool valid = s < p.valid_q[b];
      const Span span = SpanAt(p, b, pos);
      for (std::int64_t h = 0; h < N; ++h) {
        const std::int64_t n = h / group;
        const float* q = p.q + ((b * S + s) * N + h) * H;
        double m = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (std::int64_t j = 0; j < T; ++j) {
          bool vis = valid;
          const bool same_span = span.start <= j && j < span.end;
          if (p.causal && j > pos && !same_span) vis = false;
          if (p.window > 0 && pos - j >= p.window) vis = false;
          if (!p.causal && p.window > 0 && j - pos >= p.window) vis = false;
          visible[static_cast<std::size_t>(j)] = vis;
          if (!vis) continue;
          double dot = 0.0;
          for (std::int64_t d = 0; d < H; ++d) dot += static_cast<double>(q[d]) * KvAt(p.k, b, n, j, d);
          double v = static_cast<double>(p.scale) * dot;
          if (p.softcap > 0.0f) v = p.softcap * std::tanh(v / p.softcap);
          if (p.bias.data != nullptr) {
            v += LoadAsFloat(p.bias.data, p.bias.dtype,
                             b * p.bias.b_stride + h * p.bias.h_stride + s * p.bias.s_stride + j);
          }
          x[static_cast<std::size_t>(j)] = v;
          m = std::max(m, v);
          any = true;
        }
        double denom = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        if (any) {
          const bool has_sink = p.sink != nullptr;
          const double sink = has_sink ? static_cast<double>(p.sink[h]) : 0.0;
          if (has_sink) m = std::max(m, sink);
          for (std::int64_t j = 0; j < T; ++j) {
            if (!visible[static_cast<std::size_t>(j)]) continue;
            const double e = std::exp(x[static_cast<std::size_t>(j)] - m);
            denom += e;
            for (std::int64_t d = 0; d < H; ++d) acc[static_cast<std::size_t>(d)] += e * KvAt(p.v, b, n, j, d);
          }
          if (has_sink) denom += std::exp(sink - m);
        }
        const std::int64_t out_base = ((b * S + s) * N + h) * H;
        for (std::int64_t d = 0; d < H; ++d) {
          StoreFromFloat(p.out, p.out_dtype, out_base + d,
                         any ? static_cast<float>(acc[static_cast<std::size_t>(d)] / denom) : 0.0f);
        }
        if (p.qk != nullptr && p.qk_mode != 0) {
          const std::int64_t qk_base = ((b * N + h) * S + s) * p.qk_cols;
          for (std::int64_t j = 0; j < p.qk_cols; ++j) {
            double val = 0.0;
            if (j < T && visible[static_cast<std::size_t>(j)]) {
              val = p.qk_mode == 1 ? x[static_cast<std::size_t>(j)]
                                   : std::exp(x[static_cast<std::size_t>(j)] - m) / denom;
            }
            StoreFromFloat(p.qk, p.qk_dtype, qk_base + j, static_cast<float>(val));
          }
        }
      }
    }
  }
}

}  // namespace kvshare::detail
