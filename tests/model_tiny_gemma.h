// Test helpers: a tiny random gemma3-architecture GGUF file (written with
// gguf_writer.h) and an independent no-cache reference forward pass in
// double precision that reads the same file through the reference dequantizer.
//
// The file: n_layer layers with every `pattern`-th layer full and the others
// sliding (window W), q/k RMSNorm, GeGLU, four norms per layer, tied
// embeddings; `<arch>.attention.shared_kv_layers` when shared_kv_layers > 0.
// Weight types rotate through TinyGemmaSpec::types so one file mixes them.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/float_convert.h"
#include "gguf_writer.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/thread_pool.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/model/model.h"
#include "model_reference_ops.h"
#include "quant/quant.h"

namespace kvshare::testing {

struct TinyGemmaSpec {
  int n_layer = 6;
  int n_embd = 64;
  int n_ff = 96;
  int n_head = 2;
  int n_head_kv = 1;
  int head_dim = 16;
  int n_vocab = 50;
  int window = 5;
  int pattern = 3;                                 // layers 2, 5, ... are full
  int shared_kv_layers = 0;                        // written to the metadata when > 0
  std::vector<GgmlType> types = {GgmlType::kF32};  // matrix types, used in turn
  std::uint64_t seed = 1;
};

// One Q5_K super-block of x[256] at out (176 bytes): per sub-block j of 32,
// min_j = max(0, -min x) and step_j = (max x + min_j) / 31; d = max step / 63,
// dmin = max min / 63, 6-bit sc_j = round(step_j / d), m_j = round(min_j / dmin);
// codes round((x + dmin m_j) / (d sc_j)) in [0, 31].
inline void EncodeQ5K(const float* x, std::uint8_t* out) {
  float step[8], mn[8], max_step = 0, max_mn = 0;
  for (int j = 0; j < 8; ++j) {
    const float* v = x + 32 * j;
    mn[j] = std::max(0.0f, -*std::min_element(v, v + 32));
    step[j] = (*std::max_element(v, v + 32) + mn[j]) / 31.0f;
    max_step = std::max(max_step, step[j]);
    max_mn = std::max(max_mn, mn[j]);
  }
  BlockQ5_K blk{};
  const float d = detail::F16ToF32(blk.d = detail::F32ToF16(max_step / 63.0f));
  const float dmin = detail::F16ToF32(blk.dmin = detail::F32ToF16(max_mn / 63.0f));
  std::uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<std::uint8_t>(d > 0 ? std::clamp(std::lround(step[j] / d), 0L, 63L) : 0);
    m[j] = static_cast<std::uint8_t>(dmin > 0 ? std::clamp(std::lround(mn[j] / dmin), 0L, 63L) : 0);
  }
  for (int j = 0; j < 4; ++j) {  // the Q4_K packing (Q4KScaleMin reads it back)
    blk.scales[j] = static_cast<std::uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    blk.scales[j + 4] = static_cast<std::uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    blk.scales[j + 8] = static_cast<std::uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    const float step_q = d * sc[j], off = dmin * m[j];
    for (int l = 0; l < 32; ++l) {
      const long q = step_q > 0 ? std::clamp(std::lround((x[32 * j + l] + off) / step_q), 0L, 31L) : 0;
      std::uint8_t& nib = blk.qs[32 * (j / 2) + l];
      nib = static_cast<std::uint8_t>(nib | (j % 2 == 0 ? (q & 0xF) : (q & 0xF) << 4));
      blk.qh[l] = static_cast<std::uint8_t>(blk.qh[l] | ((q >> 4) << j));
    }
  }
  std::memcpy(out, &blk, sizeof blk);
}

// Encodes n floats (one row, n % 32 == 0 for block types, n % 256 == 0 for
// Q5_K) as `type`.
inline std::vector<std::uint8_t> EncodeRow(GgmlType type, const float* x, int n) {
  std::vector<std::uint8_t> out;
  auto put = [&](const void* p, std::size_t b) {
    const auto* c = static_cast<const std::uint8_t*>(p);
    out.insert(out.end(), c, c + b);
  };
  switch (type) {
    case GgmlType::kF32: put(x, 4 * static_cast<std::size_t>(n)); break;
    case GgmlType::kF16:
      for (int i = 0; i < n; ++i) {
        const std::uint16_t h = detail::F32ToF16(x[i]);
        put(&h, 2);
      }
      break;
    case GgmlType::kBF16:
      for (int i = 0; i < n; ++i) {
        const std::uint16_t h = detail::F32ToBF16(x[i]);
        put(&h, 2);
      }
      break;
    case GgmlType::kQ8_0:
      for (int b = 0; b < n / 32; ++b) {
        BlockQ8_0 blk{};
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
        const float d = amax / 127.0f;
        blk.d = detail::F32ToF16(d);
        for (int j = 0; j < 32; ++j) {
          blk.qs[j] = static_cast<std::int8_t>(d > 0 ? std::lround(x[32 * b + j] / d) : 0);
        }
        put(&blk, sizeof blk);
      }
      break;
    case GgmlType::kQ4_0:
      for (int b = 0; b < n / 32; ++b) {
        BlockQ4_0 blk{};
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
        const float d = amax / 7.0f;
        blk.d = detail::F32ToF16(d);
        auto q = [&](int j) {
          const long v = d > 0 ? std::lround(x[32 * b + j] / d) + 8 : 8;
          return static_cast<std::uint8_t>(std::clamp<long>(v, 0, 15));
        };
        for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<std::uint8_t>(q(j) | (q(j + 16) << 4));
        put(&blk, sizeof blk);
      }
      break;
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: {  // d = (max - min) / (2^bits - 1), m = min, code = round((x - m) / d)
      const bool five = type == GgmlType::kQ5_1;
      const float top = five ? 31.0f : 15.0f;
      for (int b = 0; b < n / 32; ++b) {
        const float* v = x + 32 * b;
        const float lo = *std::min_element(v, v + 32), hi = *std::max_element(v, v + 32);
        const float d = (hi - lo) / top;
        std::uint8_t q[32];
        for (int j = 0; j < 32; ++j) {
          q[j] = static_cast<std::uint8_t>(d > 0 ? std::clamp(std::lround((v[j] - lo) / d), 0L, static_cast<long>(top))
                                                 : 0);
        }
        std::uint8_t qs[16];
        std::uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) qs[j] = static_cast<std::uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        for (int j = 0; j < 32; ++j) qh |= static_cast<std::uint32_t>(q[j] >> 4) << j;
        const std::uint16_t dh = detail::F32ToF16(d), mh = detail::F32ToF16(lo);
        put(&dh, 2);
        put(&mh, 2);
        if (five) put(&qh, 4);
        put(qs, 16);
      }
      break;
    }
    case GgmlType::kQ5_K:
      for (int b = 0; b < n / 256; ++b) {
        out.resize(out.size() + sizeof(BlockQ5_K));
        EncodeQ5K(x + 256 * b, out.data() + out.size() - sizeof(BlockQ5_K));
      }
      break;
    default: throw std::runtime_error("EncodeRow: unsupported type");
  }
  return out;
}

// The file's contents (tests may edit a tensor before writing them).
inline GgufSpec TinyGemmaGguf(const TinyGemmaSpec& m) {
  std::mt19937_64 rng(m.seed);
  GgufSpec g;
  const std::string a = "gemma3.";
  g.kvs.push_back(GgufKv::Str("general.architecture", "gemma3"));
  g.kvs.push_back(GgufKv::U32(a + "block_count", static_cast<std::uint32_t>(m.n_layer)));
  g.kvs.push_back(GgufKv::U32(a + "embedding_length", static_cast<std::uint32_t>(m.n_embd)));
  g.kvs.push_back(GgufKv::U32(a + "feed_forward_length", static_cast<std::uint32_t>(m.n_ff)));
  g.kvs.push_back(GgufKv::U32(a + "attention.head_count", static_cast<std::uint32_t>(m.n_head)));
  g.kvs.push_back(GgufKv::U32(a + "attention.head_count_kv", static_cast<std::uint32_t>(m.n_head_kv)));
  g.kvs.push_back(GgufKv::U32(a + "attention.key_length", static_cast<std::uint32_t>(m.head_dim)));
  g.kvs.push_back(GgufKv::U32(a + "attention.value_length", static_cast<std::uint32_t>(m.head_dim)));
  g.kvs.push_back(GgufKv::U32(a + "context_length", 4096));
  g.kvs.push_back(GgufKv::F32(a + "attention.layer_norm_rms_epsilon", 1e-6f));
  g.kvs.push_back(GgufKv::U32(a + "attention.sliding_window", static_cast<std::uint32_t>(m.window)));
  g.kvs.push_back(GgufKv::U32(a + "attention.sliding_window_pattern", static_cast<std::uint32_t>(m.pattern)));
  g.kvs.push_back(GgufKv::F32(a + "rope.freq_base", 1e6f));
  if (m.shared_kv_layers > 0) {
    g.kvs.push_back(GgufKv::U32(a + "attention.shared_kv_layers", static_cast<std::uint32_t>(m.shared_kv_layers)));
  }
  std::size_t type_i = 0;
  auto matrix = [&](const std::string& name, int rows, int cols, float stddev) {
    const GgmlType t = m.types[type_i++ % m.types.size()];
    std::normal_distribution<float> d(0.f, stddev);
    std::vector<float> row(static_cast<std::size_t>(cols));
    GgufTensorSpec ts{name,
                      {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)},
                      static_cast<std::uint32_t>(t),
                      {},
                      std::nullopt};
    for (int r = 0; r < rows; ++r) {
      for (float& e : row) e = d(rng);
      const auto bytes = EncodeRow(t, row.data(), cols);
      ts.data.insert(ts.data.end(), bytes.begin(), bytes.end());
    }
    g.tensors.push_back(std::move(ts));
  };
  auto norm = [&](const std::string& name, int n) {  // weights around 1 (GGUF stores 1 + w)
    std::normal_distribution<float> d(1.f, 0.2f);
    std::vector<float> w(static_cast<std::size_t>(n));
    for (float& e : w) e = d(rng);
    g.tensors.push_back(
        GgufTensorSpec{name, {static_cast<std::uint64_t>(n)}, 0, EncodeRow(GgmlType::kF32, w.data(), n), std::nullopt});
  };
  const int E = m.n_embd, qd = m.n_head * m.head_dim, kvd = m.n_head_kv * m.head_dim;
  const float in_s = 1.0f / std::sqrt(static_cast<float>(E));
  matrix("token_embd.weight", m.n_vocab, E, 0.5f);
  norm("output_norm.weight", E);
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    norm(p + "attn_norm.weight", E);
    matrix(p + "attn_q.weight", qd, E, in_s);
    matrix(p + "attn_k.weight", kvd, E, in_s);
    matrix(p + "attn_v.weight", kvd, E, in_s);
    norm(p + "attn_q_norm.weight", m.head_dim);
    norm(p + "attn_k_norm.weight", m.head_dim);
    matrix(p + "attn_output.weight", E, qd, 1.0f / std::sqrt(static_cast<float>(qd)));
    norm(p + "post_attention_norm.weight", E);
    norm(p + "ffn_norm.weight", E);
    matrix(p + "ffn_gate.weight", m.n_ff, E, in_s);
    matrix(p + "ffn_up.weight", m.n_ff, E, in_s);
    matrix(p + "ffn_down.weight", E, m.n_ff, 1.0f / std::sqrt(static_cast<float>(m.n_ff)));
    norm(p + "post_ffw_norm.weight", E);
  }
  return g;
}

// n token ids in [0, vocab), a fixed pseudo-random sequence per seed (64-bit LCG).
inline std::vector<std::int32_t> Tokens(int n, int vocab, unsigned seed) {
  std::vector<std::int32_t> t;
  std::uint64_t s = seed;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.push_back(static_cast<std::int32_t>((s >> 33) % static_cast<std::uint64_t>(vocab)));
  }
  return t;
}

// Every position's logits [T * n_vocab] of `tokens` on a fresh state.
inline std::vector<float> AllLogits(const Model& m, const std::vector<std::int32_t>& tokens, const ModelStateOptions& o,
                                    ThreadPool* pool = nullptr) {
  auto st = m.NewState(o);
  std::span<const float> l = m.Forward(*st, tokens, pool, {.num_logits = static_cast<std::int64_t>(tokens.size())});
  return std::vector<float>(l.begin(), l.end());
}

// Writes the file to `path`.
inline void WriteTinyGemma(const std::string& path, const TinyGemmaSpec& m) {
  WriteFile(path, TinyGemmaGguf(m).Build());
}

// A file under the test temp directory, written by write(path), removed on destruction.
struct TempGguf {
  std::string path;
  template <typename Write>
  TempGguf(const std::string& tag, Write write) {
    path =
        (std::filesystem::temp_directory_path() / ("kvshare_tiny_" + tag + "_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    write(path);
  }
  TempGguf(const TinyGemmaSpec& spec, const std::string& tag)
      : TempGguf("gemma_" + tag, [&](const std::string& p) { WriteTinyGemma(p, spec); }) {}
  TempGguf(const TempGguf&) = delete;
  TempGguf& operator=(const TempGguf&) = delete;
  ~TempGguf() { std::filesystem::remove(path); }
};

// No-cache reference: every position of `tokens` from scratch, plain double
// loops, weights through DequantizeRow (not MatMul), attention over all
// visible keys (j <= t, t - j < W on sliding layers) of the layer's KV source
// (its own, or for the last n_shared layers the last earlier non-shared layer
// of its type). Returns logits [T, n_vocab].
// Rows that replace token embeddings in ReferenceLogits (an image's soft
// tokens): with `bidirectional`, queries and keys inside [begin, begin +
// count) see each other on the layers `mode` names (HF's blockwise overlay).
struct ReferenceImage {
  int begin = 0;
  int count = 0;
  std::vector<float> rows;  // [count, n_embd]
  bool bidirectional = true;
};

inline std::vector<double> ReferenceLogits(const Model& model, const std::vector<std::int32_t>& tokens, int n_shared,
                                           const std::vector<ReferenceImage>& images = {},
                                           ImageAttention mode = ImageAttention::kCausal) {
  const ModelConfig& c = model.config();
  const GgufFile& f = model.gguf();
  const LayerPlan plan = BuildLayerPlan(KvSpecOf(c, n_shared));
  const int T = static_cast<int>(tokens.size()), E = c.n_embd, H = c.head_dim;
  const int N = c.n_head, Nkv = c.n_head_kv, G = N / Nkv;
  auto load = [&](const std::string& name) {
    const GgufTensor& t = f.Tensor(name);
    std::vector<float> w(static_cast<std::size_t>(t.NumElements()));
    for (std::int64_t r = 0; r < t.NumRows(); ++r) {
      DequantizeRow(t.type, t.data + r * t.RowBytes(), w.data() + r * t.ne[0], t.ne[0]);
    }
    return w;
  };
  auto matmul = [](const std::vector<float>& w, const std::vector<double>& x, int rows, int cols) {
    return RefMatMul(w, x, rows, cols);
  };
  auto rmsnorm = [&](std::vector<double> x, int n, const std::vector<float>& w) {
    return RefRmsNorm(std::move(x), n, w.data(), c.rms_eps);
  };
  auto rope = [&](std::vector<double>& x, int heads, double base) {  // NeoX pairs (i, i + H/2)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h) {
        double* p = &x[(static_cast<std::size_t>(t) * heads + h) * H];
        for (int i = 0; i < H / 2; ++i) {
          const double th = t * std::pow(base, -2.0 * i / H);
          const double a = p[i], b = p[i + H / 2];
          p[i] = a * std::cos(th) - b * std::sin(th);
          p[i + H / 2] = b * std::cos(th) + a * std::sin(th);
        }
      }
  };
  const std::vector<float> embd = load("token_embd.weight");
  std::vector<double> x(static_cast<std::size_t>(T) * E);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < E; ++i)
      x[static_cast<std::size_t>(t) * E + i] =
          embd[static_cast<std::size_t>(tokens[t]) * E + i] * std::sqrt(static_cast<double>(E));
  std::vector<int> block(static_cast<std::size_t>(T), -1);  // the image each position belongs to
  for (std::size_t b = 0; b < images.size(); ++b) {
    const ReferenceImage& im = images[b];
    for (int t = im.begin; t < im.begin + im.count; ++t) {
      for (int i = 0; i < E; ++i)
        x[static_cast<std::size_t>(t) * E + i] = im.rows[static_cast<std::size_t>(t - im.begin) * E + i];
      if (im.bidirectional) block[static_cast<std::size_t>(t)] = static_cast<int>(b);
    }
  }
  std::vector<std::vector<double>> ks(c.n_layer), vs(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool swa = c.is_sliding[l];
    const double base = swa ? c.rope_base_sliding : c.rope_base_full;
    const std::vector<double> h = rmsnorm(x, E, load(p + "attn_norm.weight"));
    std::vector<double> q = rmsnorm(matmul(load(p + "attn_q.weight"), h, N * H, E), H, load(p + "attn_q_norm.weight"));
    rope(q, N, base);
    if (plan.layers[l].owns_cache) {
      ks[l] = rmsnorm(matmul(load(p + "attn_k.weight"), h, Nkv * H, E), H, load(p + "attn_k_norm.weight"));
      rope(ks[l], Nkv, base);
      vs[l] = matmul(load(p + "attn_v.weight"), h, Nkv * H, E);
    }
    const std::vector<double>& K = ks[plan.layers[l].source_layer];
    const std::vector<double>& V = vs[plan.layers[l].source_layer];
    std::vector<double> att(static_cast<std::size_t>(T) * N * H, 0.0);
    for (int t = 0; t < T; ++t)
      for (int hq = 0; hq < N; ++hq) {
        const int hk = hq / G;
        std::vector<double> s;
        std::vector<int> js;
        const bool overlay = mode == ImageAttention::kAllLayers || (mode == ImageAttention::kSlidingLayers && swa);
        for (int j = 0; j < T; ++j) {
          const bool same = overlay && block[static_cast<std::size_t>(t)] >= 0 &&
                            block[static_cast<std::size_t>(t)] == block[static_cast<std::size_t>(j)];
          if (j > t && !same) continue;
          if (swa && t - j >= c.sliding_window) continue;
          double d = 0;
          for (int i = 0; i < H; ++i)
            d +=
                q[(static_cast<std::size_t>(t) * N + hq) * H + i] * K[(static_cast<std::size_t>(j) * Nkv + hk) * H + i];
          s.push_back(d * c.attn_scale);
          js.push_back(j);
        }
        double mx = -1e300, den = 0;
        for (double e : s) mx = std::max(mx, e);
        for (double& e : s) den += (e = std::exp(e - mx));
        for (std::size_t k = 0; k < s.size(); ++k)
          for (int i = 0; i < H; ++i)
            att[(static_cast<std::size_t>(t) * N + hq) * H + i] +=
                s[k] / den * V[(static_cast<std::size_t>(js[k]) * Nkv + hk) * H + i];
      }
    const std::vector<double> o =
        rmsnorm(matmul(load(p + "attn_output.weight"), att, E, N * H), E, load(p + "post_attention_norm.weight"));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const std::vector<double> h2 = rmsnorm(x, E, load(p + "ffn_norm.weight"));
    std::vector<double> gt = matmul(load(p + "ffn_gate.weight"), h2, c.n_ff, E);
    const std::vector<double> up = matmul(load(p + "ffn_up.weight"), h2, c.n_ff, E);
    for (std::size_t i = 0; i < gt.size(); ++i) {
      const double v = gt[i];
      gt[i] = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))) * up[i];
    }
    const std::vector<double> dn =
        rmsnorm(matmul(load(p + "ffn_down.weight"), gt, E, c.n_ff), E, load(p + "post_ffw_norm.weight"));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
  }
  return matmul(embd, rmsnorm(x, E, load("output_norm.weight")), c.n_vocab, E);
}

}  // namespace kvshare::testing
