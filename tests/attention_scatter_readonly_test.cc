// Read-only static scatter (the KV-shared layer's form): key/value absent,
// unpacked query. Nothing is written; queries sit at write_indices[b] + s with
// Q-only RoPE; keys j < nonpad_kv_seqlen[b]; linear and circular; 3-D and BNSH.
#include <gtest/gtest.h>

#include <cmath>

#include "attention_gqa_case.h"

namespace kvshare::testing {
namespace {

constexpr int B = 3, S = 4, N = 8, Nkv = 2, H = 32, W = 6;

// A scatter case over `cache_k/v` with the given write indices and row counts.
GqaCase ScatterCase(const Buffer& q, const Buffer& cache_k, const Buffer& cache_v, const std::vector<std::int64_t>& wi,
                    const std::vector<std::int64_t>& n, bool circular, const Buffer& cos, const Buffer& sin) {
  GqaCase c;
  c.attrs.num_heads = N;
  c.attrs.kv_num_heads = Nkv;
  c.attrs.local_window_size = W;
  c.attrs.do_rotary = 1;
  c.attrs.scatter_mode = circular ? GqaAttributes::ScatterMode::kCircular : GqaAttributes::ScatterMode::kLinear;
  c.query = q;
  std::vector<std::int64_t> np;
  for (int b = 0; b < B; ++b) np.push_back(wi[static_cast<std::size_t>(b)] + n[static_cast<std::size_t>(b)]);
  c.write_indices = Int64Buffer(wi, {B});
  c.nonpad = Int64Buffer(np, {B});
  c.has_scatter = true;
  c.present_key = cache_k;
  c.present_value = cache_v;
  c.has_present = true;
  c.cos = cos;
  c.sin = sin;
  c.has_rope = true;
  c.output = Buffer(DType::kFloat32, {B, S, N * H});
  return c;
}

TEST(GqaScatterReadOnly, EqualsWritingCallAndWritesNothing) {
  std::mt19937_64 rng(31);
  const Buffer cos = RandomBuffer(DType::kFloat32, {64, H / 2}, rng),
               sin = RandomBuffer(DType::kFloat32, {64, H / 2}, rng);
  const std::vector<std::int64_t> wi = {0, 13, 7}, n = {4, 1, 3};  // ragged; rows 1, 2 have padding queries
  for (bool circular : {false, true}) {
    for (bool bnsh : {false, true}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        const std::int64_t C = circular ? W + S - 1 : 20;
        const Shape cs = bnsh ? Shape{B, Nkv, C, H} : Shape{B, C, Nkv * H};
        const Buffer k0 = RandomBuffer(dt, cs, rng), v0 = RandomBuffer(dt, cs, rng);
        const Buffer q = RandomBuffer(DType::kFloat32, {B, S, N * H}, rng);
        // The source layer's call: writes K/V and attends.
        GqaCase src = ScatterCase(q, k0, v0, wi, n, circular, cos, sin);
        src.key = RandomBuffer(DType::kFloat32, {B, S, Nkv * H}, rng);
        src.value = RandomBuffer(DType::kFloat32, {B, S, Nkv * H}, rng);
        src.has_key = true;
        src.Run();
        // The shared layer's call on the written cache: same query => same output.
        GqaCase rd = ScatterCase(q, src.present_key, src.present_value, wi, n, circular, cos, sin);
        EXPECT_EQ(DetectKvMode(rd.attrs, rd.Inputs(), rd.Outputs()), KvMode::kStaticScatter);
        for (GqaKernel kernel : {GqaKernel::kReference, GqaKernel::kOptimized}) {
          rd.Run(kernel);
          EXPECT_EQ(rd.present_key.bytes, src.present_key.bytes) << "read-only call wrote K";
          EXPECT_EQ(rd.present_value.bytes, src.present_value.bytes) << "read-only call wrote V";
          EXPECT_LT(MaxRelDiff(rd.output.ToFloat(), src.output.ToFloat()), 1e-6)
              << "circular " << circular << " bnsh " << bnsh << " dtype " << DTypeName(dt);
          const auto out = rd.output.ToFloat();
          for (int b = 0; b < B; ++b)
            for (std::int64_t s = n[static_cast<std::size_t>(b)]; s < S; ++s)
              for (int i = 0; i < N * H; ++i) EXPECT_EQ(out[static_cast<std::size_t>((b * S + s) * N * H + i)], 0.f);
        }
      }
    }
  }
}

TEST(GqaScatterReadOnly, MatchesNaiveOverCacheRows) {
  // Without RoPE: query s of row b at p = wi[b] + s over keys j < nonpad[b], p - j < W.
  std::mt19937_64 rng(32);
  const std::vector<std::int64_t> wi = {5, 0, 9}, n = {2, 4, 1};
  const std::int64_t C = 16;
  Buffer k = RandomBuffer(DType::kFloat32, {B, Nkv, C, H}, rng), v = RandomBuffer(DType::kFloat32, {B, Nkv, C, H}, rng);
  const Buffer q = RandomBuffer(DType::kFloat32, {B, S, N * H}, rng);
  GqaCase c = ScatterCase(q, k, v, wi, n, false, Buffer(), Buffer());
  c.has_rope = false;
  c.attrs.do_rotary = 0;
  c.Run(GqaKernel::kReference);
  const auto got = c.output.ToFloat();
  for (int b = 0; b < B; ++b) {
    NaiveRow r;
    r.S = static_cast<int>(n[static_cast<std::size_t>(b)]), r.N = N, r.Nkv = Nkv, r.H = H, r.window = W;
    r.scale = 1.0 / std::sqrt(static_cast<double>(H));
    const std::int64_t T = wi[static_cast<std::size_t>(b)] + n[static_cast<std::size_t>(b)];
    for (std::int64_t j = 0; j < T; ++j)
      for (int h = 0; h < Nkv; ++h)
        for (int e = 0; e < H; ++e) {
          r.k.push_back(k.Get(((b * Nkv + h) * C + j) * H + e));
          r.v.push_back(v.Get(((b * Nkv + h) * C + j) * H + e));
        }
    for (int s = 0; s < r.S; ++s) {
      r.qpos.push_back(wi[static_cast<std::size_t>(b)] + s);
      for (int i = 0; i < N * H; ++i) r.q.push_back(q.Get((b * S + s) * N * H + i));
    }
    const auto want = r.Run();
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[static_cast<std::size_t>(b) * S * N * H + i], want[i], 1e-5) << "row " << b;
  }
  EXPECT_EQ(c.present_key.bytes, k.bytes);
}

TEST(GqaScatterReadOnly, PackedQueryStillWrites) {
  // key/value absent with a packed (N + 2 N_kv) * H query keeps meaning packed QKV.
  std::mt19937_64 rng(33);
  const Buffer k0(DType::kFloat32, {1, 8, Nkv * H}), v0(DType::kFloat32, {1, 8, Nkv * H});
  GqaCase c;
  c.attrs.num_heads = N;
  c.attrs.kv_num_heads = Nkv;
  c.query = RandomBuffer(DType::kFloat32, {1, 2, (N + 2 * Nkv) * H}, rng);
  c.write_indices = Int64Buffer({0}, {1});
  c.nonpad = Int64Buffer({2}, {1});
  c.has_scatter = true;
  c.present_key = k0;
  c.present_value = v0;
  c.has_present = true;
  c.output = Buffer(DType::kFloat32, {1, 2, N * H});
  c.Run();
  EXPECT_NE(c.present_key.bytes, k0.bytes);
  EXPECT_EQ(c.present_key.Get(Nkv * H + 3), c.query.Get((N + 2 * Nkv) * H + N * H + 3));  // token 1, K head 0, dim 3
}

}  // namespace
}  // namespace kvshare::testing
