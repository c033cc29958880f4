// Seeded random GroupQueryAttention cases over every KV mode, dtype and option
// (tests/attention_sweep_test.cc, and the CUDA sweep against the CPU).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention_gqa_case.h"
#include "common/str.h"

namespace kvshare::testing {

struct Rng {
  std::mt19937_64 g;
  explicit Rng(std::uint64_t seed) : g(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  bool Coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
  template <typename T>
  T Pick(std::initializer_list<T> xs) {
    return *(xs.begin() + Int(0, static_cast<int>(xs.size()) - 1));
  }
};

// Work budget per config (B*S*N*T*H multiply-adds for the double reference).
inline std::int64_t Budget() {
#if defined(__SANITIZE_ADDRESS__)
  return 1'000'000;
#else
  return 4'000'000;
#endif
}

// The static scatter cache of a random case (c.attrs set) and its rows:
// capacity maxT + 0..3 (linear) or W + S - 1 + 0..3 (circular, a ring), BNSH
// or 3-D [B, C, kv_hidden] in cdt with random contents; row b writes S new
// rows (or 0..S, 30%) ending at T[b] (a ring: up to 50 later). Returns C.
inline std::int64_t RandomScatterCache(Rng& r, GqaCase& c, DType cdt, const std::vector<std::int64_t>& T, int S,
                                       int maxT, int H, bool circular) {
  GqaAttributes& a = c.attrs;
  const auto B = static_cast<std::int64_t>(T.size());
  const std::int64_t Nkv = a.kv_num_heads, kvh = Nkv * H;
  const std::int64_t cap = circular ? a.local_window_size + S - 1 + r.Int(0, 3) : maxT + r.Int(0, 3);
  const Shape cs = r.Coin(0.5) ? Shape{B, Nkv, cap, H} : Shape{B, cap, kvh};
  c.present_key = RandomBuffer(cdt, cs, r.g);
  c.present_value = RandomBuffer(cdt, cs, r.g);
  c.has_present = true;
  if (circular) a.scatter_mode = GqaAttributes::ScatterMode::kCircular;
  std::vector<std::int64_t> n, end;
  for (const std::int64_t t : T) {
    n.push_back(r.Coin(0.3) ? r.Int(0, S) : S);
    end.push_back(circular ? t + r.Int(0, 50) : t);
  }
  c.SetScatter(n, end);
  return cap;
}

// Builds a random valid case. Shapes are shrunk until the reference fits the budget.
inline GqaCase RandomCase(Rng& r, KvMode mode, std::string* desc) {
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
      cap = RandomScatterCache(r, c, cdt, T, S, maxT, H, circular);
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
  *desc = detail::Str(KvModeName(mode), " B=", B, " S=", S, " T=", maxT, " N=", N, "/", Nkv, " H=", H,
                      " dt=", DTypeName(dt), " cache=", DTypeName(cdt), " causal=", a.causal,
                      " W=", a.local_window_size, " softcap=", a.softcap, " bias=", c.has_bias, " sink=", sink,
                      " smooth=", a.smooth_softmax, " qk=", a.qk_output, " rope=", a.do_rotary, " packed=", packed,
                      " block=", a.kv_block_size, " circular=", circular, " first=", first_prompt);
  return c;
}

}  // namespace kvshare::testing
