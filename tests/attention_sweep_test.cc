// Optimized vs reference through the public op over a seeded randomized sweep
// of every KV mode, dtype and option; block sizes; thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "common/str.h"
#include "gqa_case.h"
#include "kvshare/thread_pool.h"

namespace kvshare::testing {
namespace {

struct Rng {
  std::mt19937_64 g;
  explicit Rng(std::uint64_t seed) : g(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
  template <typename T>
  T Pick(std::initializer_list<T> xs) { return *(xs.begin() + Int(0, static_cast<int>(xs.size()) - 1)); }
};

// Work budget per config (B*S*N*T*H multiply-adds for the double reference).
std::int64_t Budget() {
#if defined(__SANITIZE_ADDRESS__)
  return 1'000'000;
#else
  return 4'000'000;
#endif
}

// Builds a random valid case. Shapes are shrunk until the reference fits the budget.
GqaCase RandomCase(Rng& r, KvMode mode, std::string* desc) {
  GqaCase c;
  const auto heads = r.Pick<std::pair<int, int>>({{4, 1}, {8, 8}, {8, 2}, {16, 4}, {32, 8}});
  const int N = heads.first, Nkv = heads.second;
  const int H = r.Pick({32, 64, 80, 128, 256, 512});
  const DType dt = r.Pick({DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  DType cdt = r.Coin(0.6) ? dt : r.Pick({DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  if (H % kQ8_0BlockSize == 0 && r.Coin(0.25)) cdt = DType::kQ8_0;  // quantized past / present / cache
  int B = r.Int(1, 5);
  int S = r.Coin(0.4) ? 1 : r.Pick({r.Int(2, 8), r.Int(9, 64), r.Int(65, 300)});
  int maxT = r.Pick({r.Int(1, 64), r.Int(65, 512), r.Int(513, 4096)});
  bool first_prompt = (mode == KvMode::kAppend || mode == KvMode::kShareBuffer) && r.Coin(0.3);
  if (first_prompt) maxT = S;
  maxT = std::max(maxT, S);
  while (static_cast<std::int64_t>(B) * S * N * maxT * H > Budget()) {
    if (B > 1) {
      --B;
    } else if (maxT > S && maxT > 16) {
      maxT = std::max(S, maxT / 2);
    } else if (S > 1) {
      S = std::max(1, S / 2);
      maxT = first_prompt ? S : std::max(maxT, S);
    } else {
      break;
    }
  }
  std::vector<std::int64_t> T(static_cast<std::size_t>(B));
  for (auto& t : T) t = first_prompt ? r.Int(1, S) : r.Int(S, maxT);
  T[0] = first_prompt ? S : maxT;  // the longest row defines total_sequence_length
  const std::int64_t tsl = first_prompt ? S : maxT;

  GqaAttributes& a = c.attrs;
  a.num_heads = N;
  a.kv_num_heads = Nkv;
  const bool circular = mode == KvMode::kStaticScatter && r.Coin(0.3);
  a.causal = circular ? 1 : (r.Coin(0.8) ? 1 : 0);
  if (a.causal == 1 && (circular || r.Coin(0.4))) a.local_window_size = r.Int(1, static_cast<int>(maxT) + 3);
  if (r.Coin(0.3)) a.softcap = r.Pick({5.0f, 50.0f});
  if (r.Coin(0.2)) a.scale = 0.05f;
  if (r.Coin(0.3)) a.kv_block_size = r.Pick({1, 7, 16, 64, 1000});
  if (!circular && r.Coin(0.2)) a.qk_output = r.Int(1, 2);
  const bool sink = r.Coin(0.25);
  if (!sink && r.Coin(0.2)) a.smooth_softmax = 1;

  std::mt19937_64& g = r.g;
  const bool packed_ok = mode == KvMode::kAppend || mode == KvMode::kShareBuffer || mode == KvMode::kStaticScatter;
  const bool packed = packed_ok && r.Coin(0.25);
  c.query = RandomBuffer(dt, {B, S, static_cast<std::int64_t>(packed ? N + 2 * Nkv : N) * H}, g);
  const std::int64_t kvh = static_cast<std::int64_t>(Nkv) * H;
  std::int64_t cap = 0;  // past / cache capacity
  switch (mode) {
    case KvMode::kAppend:
    case KvMode::kShareBuffer: {
      if (!packed) {
        c.key = RandomBuffer(dt, {B, S, kvh}, g);
        c.value = RandomBuffer(dt, {B, S, kvh}, g);
        c.has_key = true;
      }
      const bool past = mode == KvMode::kShareBuffer || !first_prompt || r.Coin(0.5);
      cap = mode == KvMode::kShareBuffer ? tsl + r.Int(0, 5) : (first_prompt ? r.Int(0, 4) : maxT - S + r.Int(0, 3));
      if (past) {
        c.past_key = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
        c.past_value = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
        c.has_past = true;
      }
      if (mode == KvMode::kShareBuffer) {
        c.alias_present = true;
      } else if (!past || r.Coin(0.7)) {
        const std::int64_t pl = std::max(tsl, past ? cap : 0);
        c.present_key = Buffer(past ? cdt : dt, {B, Nkv, pl, H});
        c.present_value = Buffer(past ? cdt : dt, {B, Nkv, pl, H});
        c.has_present = true;
      }
      break;
    }
    case KvMode::kBorrowedEmptyKv:
    case KvMode::kBorrowedOmittedKv: {
      cap = maxT + r.Int(0, 3);
      c.past_key = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
      c.past_value = RandomBuffer(cdt, {B, Nkv, cap, H}, g);
      c.has_past = true;
      if (mode == KvMode::kBorrowedEmptyKv) {
        c.key = Buffer(dt, {B, 0, kvh});
        c.value = Buffer(dt, {B, 0, kvh});
        c.has_key = true;
      }
      if (r.Coin(0.3)) {
        c.present_key = Buffer(cdt, {B, Nkv, cap, H});
        c.present_value = Buffer(cdt, {B, Nkv, cap, H});
        c.has_present = true;
      }
      break;
    }
    case KvMode::kExternalKv: {
      cap = maxT + r.Int(0, 3);
      if (cap == S) ++cap;
      // The external cache in the query's dtype, or in q8_0.
      const DType edt = cdt == DType::kQ8_0 && r.Coin(0.7) ? DType::kQ8_0 : dt;
      c.key = RandomBuffer(edt, {B, cap, kvh}, g);
      c.value = RandomBuffer(edt, {B, cap, kvh}, g);
      c.has_key = true;
      if (edt == DType::kQ8_0 && r.Coin(0.5)) {  // a present copy: the same blocks
        c.present_key = Buffer(DType::kQ8_0, {B, Nkv, cap, H});
        c.present_value = Buffer(DType::kQ8_0, {B, Nkv, cap, H});
        c.has_present = true;
      }
      break;
    }
    case KvMode::kStaticScatter: {
      if (!packed) {
        c.key = RandomBuffer(dt, {B, S, kvh}, g);
        c.value = RandomBuffer(dt, {B, S, kvh}, g);
        c.has_key = true;
      }
      cap = circular ? a.local_window_size + S - 1 + r.Int(0, 3) : maxT + r.Int(0, 3);
      const bool bnsh = r.Coin(0.5);
      const Shape cs = bnsh ? Shape{B, Nkv, cap, H} : Shape{B, cap, kvh};
      c.present_key = RandomBuffer(cdt, cs, g);
      c.present_value = RandomBuffer(cdt, cs, g);
      c.has_present = true;
      if (circular) a.scatter_mode = GqaAttributes::ScatterMode::kCircular;
      std::vector<std::int64_t> n, end;
      for (int b = 0; b < B; ++b) {
        n.push_back(r.Coin(0.3) ? r.Int(0, S) : S);
        end.push_back(circular ? T[static_cast<std::size_t>(b)] + r.Int(0, 50) : T[static_cast<std::size_t>(b)]);
      }
      c.SetScatter(n, end);
      break;
    }
  }
  if (mode != KvMode::kStaticScatter) c.SetSeqlens(T, tsl);
  const std::int64_t cols = mode == KvMode::kStaticScatter ? cap : tsl;
  if (r.Coin(0.3) && !circular) {
    const std::int64_t d0 = r.Coin() ? B : 1, d1 = r.Coin() ? N : 1;
    c.bias = RandomBuffer(r.Coin() ? dt : DType::kFloat32, {d0, d1, S, cols}, g);
    c.has_bias = true;
  }
  if (sink) {
    c.sink = RandomBuffer(DType::kFloat32, {N}, g);
    c.has_sink = true;
  }
  if (a.qk_output != 0) {
    c.qk = Buffer(r.Coin() ? DType::kFloat32 : dt, {B, N, S, cols});
    c.has_qk = true;
  }
  if (r.Coin(0.4)) {
    a.do_rotary = 1;
    a.rotary_interleaved = r.Coin() ? 1 : 0;
    const int half = r.Coin(0.7) ? H / 2 : std::max(8, (H / 4) / 8 * 8);
    std::int64_t max_pos = tsl;
    if (mode == KvMode::kStaticScatter) {
      for (int b = 0; b < B; ++b) max_pos = std::max(max_pos, c.nonpad.As64(b));
    }
    max_pos += r.Int(0, 8);
    c.cos = Buffer(DType::kFloat32, {max_pos, half});
    c.sin = Buffer(DType::kFloat32, {max_pos, half});
    for (std::int64_t p = 0; p < max_pos; ++p)
      for (int i = 0; i < half; ++i) {
        const double ang = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / (2.0 * half));
        c.cos.Set(p * half + i, static_cast<float>(std::cos(ang)));
        c.sin.Set(p * half + i, static_cast<float>(std::sin(ang)));
      }
    c.has_rope = true;
  }
  c.output = Buffer(dt, {B, S, static_cast<std::int64_t>(N) * H});
  *desc = detail::Str(KvModeName(mode), " B=", B, " S=", S, " T=", maxT, " N=", N, "/", Nkv, " H=", H, " dt=", DTypeName(dt),
               " cache=", DTypeName(cdt), " causal=", a.causal, " W=", a.local_window_size, " softcap=", a.softcap,
               " bias=", c.has_bias, " sink=", sink, " smooth=", a.smooth_softmax, " qk=", a.qk_output, " rope=",
               a.do_rotary, " packed=", packed, " block=", a.kv_block_size, " circular=", circular, " first=", first_prompt);
  return c;
}

void ExpectClose(const Buffer& got, const Buffer& want, double tol, const std::string& what) {
  ASSERT_EQ(got.Size(), want.Size()) << what;
  EXPECT_LT(MaxRelDiff(got.ToFloat(), want.ToFloat()), tol) << what;
}

TEST(GqaSweep, OptimizedMatchesReferenceOverRandomConfigs) {
  const int configs = std::getenv("KVSHARE_SWEEP_CONFIGS") ? std::atoi(std::getenv("KVSHARE_SWEEP_CONFIGS")) : 540;
  Rng r(20261121);
  ThreadPool pool(2);
  const KvMode modes[] = {KvMode::kAppend, KvMode::kShareBuffer, KvMode::kBorrowedEmptyKv,
                          KvMode::kBorrowedOmittedKv, KvMode::kExternalKv, KvMode::kStaticScatter};
  int ran = 0;
  for (int i = 0; i < configs; ++i) {
    const KvMode mode = modes[i % 6];
    std::string desc;
    GqaCase ref = RandomCase(r, mode, &desc);
    GqaCase opt = ref;
    SCOPED_TRACE(desc);
    ASSERT_EQ(DetectKvMode(ref.attrs, ref.Inputs(), ref.Outputs()), mode);
    ref.Run(GqaKernel::kReference);
    opt.Run(GqaKernel::kOptimized, i % 2 ? &pool : nullptr);
    const double tol = ref.output.dtype == DType::kFloat32 ? 1e-5 : 1e-2;
    ExpectClose(opt.output, ref.output, tol, "output");
    if (ref.has_qk) ExpectClose(opt.qk, ref.qk, ref.qk.dtype == DType::kFloat32 && tol < 1e-4 ? 1e-5 : 1e-2, "output_qk");
    EXPECT_EQ(opt.present_key.bytes, ref.present_key.bytes);
    EXPECT_EQ(opt.past_key.bytes, ref.past_key.bytes);
    if (::testing::Test::HasFailure()) break;
    ++ran;
  }
  std::printf("GqaSweep: %d configurations compared\n", ran);
}

// Every block size equals the unblocked (block = T) result within 1e-6
// relative in fp32, including fully masked blocks (window + causal, long T).
TEST(GqaSweep, EveryBlockSizeMatchesUnblocked) {
  Rng r(7);
  for (int trial = 0; trial < 12; ++trial) {
    std::string desc;
    GqaCase base = RandomCase(r, trial % 2 ? KvMode::kBorrowedOmittedKv : KvMode::kAppend, &desc);
    if (base.query.dtype != DType::kFloat32) continue;
    base.attrs.kv_block_size = 0;
    base.attrs.num_kv_blocks = 1;  // one block spanning T
    GqaCase whole = base;
    whole.Run(GqaKernel::kOptimized);
    for (int block : {1, 7, 16, 64}) {
      GqaCase c = base;
      c.attrs.num_kv_blocks = 0;
      c.attrs.kv_block_size = block;
      c.Run(GqaKernel::kOptimized);
      SCOPED_TRACE(desc + " block=" + std::to_string(block));
      EXPECT_LT(MaxRelDiff(c.output.ToFloat(), whole.output.ToFloat()), 1e-6);
    }
  }
}

TEST(GqaSweep, OneAndTwoThreadsAreBitIdentical) {
  Rng r(99);
  ThreadPool one(1), two(2);
  for (int trial = 0; trial < 24; ++trial) {
    std::string desc;
    GqaCase a = RandomCase(r, static_cast<KvMode>(trial % 6), &desc);
    GqaCase b = a, c = a;
    a.Run(GqaKernel::kOptimized, &one);
    b.Run(GqaKernel::kOptimized, &two);
    c.Run(GqaKernel::kOptimized, nullptr);
    SCOPED_TRACE(desc);
    EXPECT_EQ(a.output.bytes, b.output.bytes);
    EXPECT_EQ(a.output.bytes, c.output.bytes);
    EXPECT_EQ(a.qk.bytes, b.qk.bytes);
  }
  // Long-context decode, where split-KV kicks in.
  for (int T : {4096, 32768}) {
    std::mt19937_64 g(T);
    GqaCase d;
    d.attrs.num_heads = 8;
    d.attrs.kv_num_heads = 1;
    d.query = RandomBuffer(DType::kFloat32, {1, 1, 8 * 256}, g);
    d.past_key = RandomBuffer(DType::kFloat16, {1, 1, T, 256}, g);
    d.past_value = RandomBuffer(DType::kFloat16, {1, 1, T, 256}, g);
    d.has_past = true;
    d.seqlens_k = Int32Buffer({T - 1}, {1});
    d.total_len = Int32Buffer({T}, {1});
    d.has_seqlens = true;
    d.output = Buffer(DType::kFloat32, {1, 1, 8 * 256});
    GqaCase e = d;
    d.Run(GqaKernel::kOptimized, &one);
    e.Run(GqaKernel::kOptimized, &two);
    EXPECT_EQ(d.output.bytes, e.output.bytes) << "T=" << T;
  }
}

}  // namespace
}  // namespace kvshare::testing
