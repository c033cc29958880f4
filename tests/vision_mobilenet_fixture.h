// Test helper: a tiny random-weight gemma3nv mmproj (Gemma 3n's MobileNet-V5
// tower + vision embedder) written in memory with the names and layouts of
// llama.cpp's converter (conversion/gemma.py Gemma3nVisionAudioModel: conv
// kernels ne {k, k, in / groups, out}, 1x1 convs ne {1, 1, in, out}, norms
// [C], layer_scale.gamma and the stem bias ne {1, 1, C, 1}, the projection a
// Linear [text, n_embd]). The architecture is described by TinyMnv5, which the
// float64 reference (vision_mobilenet_reference.h) reads instead of probing
// names, so the two do not share the engine's structure discovery.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/float_convert.h"
#include "gguf_writer.h"

namespace kvshare::testing {

struct Mnv5BlockSpec {
  enum Kind { kEdge, kUir, kMqa } kind = kUir;
  int out = 0;              // output channels
  int mid = 0;              // expanded channels (edge, UIR)
  int k_exp = 3;            // edge residual conv_exp kernel
  int k_start = 0;          // UIR dw_start kernel, 0: none
  int k_mid = 0;            // UIR dw_mid kernel, 0: none
  int heads = 0;            // MQA
  int head_dim = 0;         // MQA key = value size
  bool kv_down = false;     // MQA: 3x3 depthwise stride-2 K/V down-sampling
  bool layer_scale = true;  // UIR, MQA
};

struct TinyMnv5 {
  int image_size = 128;
  int patch_size = 8;  // image_size / tokens, as the converter writes it
  int stem = 8;
  std::vector<std::vector<Mnv5BlockSpec>> stages;
  int msfa_mid = 48;
  int n_embd = 32;  // fusion output channels
  int n_text = 24;
  bool f16_convs = false;   // store k x k and 1x1 kernels as F16
  bool keep_values = true;  // keep the float64 copies the reference reads
  std::uint32_t seed = 1;
};

// Every block kind: edge residual with and without skip; UIR with dw_start
// and dw_mid (dw_mid strided), dw_start only (strided at a stage start and
// not), dw_mid only, neither; MQA with and without K/V down-sampling, heads 2
// and 3.
inline TinyMnv5 DefaultTinyMnv5() {
  using B = Mnv5BlockSpec;
  TinyMnv5 m;
  m.stages = {
      {B{.kind = B::kEdge, .out = 12, .mid = 24}, B{.kind = B::kEdge, .out = 12, .mid = 20}},
      {B{.kind = B::kUir, .out = 16, .mid = 24, .k_start = 3, .k_mid = 5},
       B{.kind = B::kUir, .out = 16, .mid = 32, .k_start = 3, .layer_scale = false}},
      {B{.kind = B::kUir, .out = 20, .mid = 32, .k_start = 5}, B{.kind = B::kUir, .out = 20, .mid = 20, .k_mid = 3},
       B{.kind = B::kUir, .out = 20, .mid = 20},
       B{.kind = B::kMqa, .out = 20, .heads = 2, .head_dim = 8, .kv_down = true},
       B{.kind = B::kUir, .out = 20, .mid = 40}},
      {B{.kind = B::kUir, .out = 24, .mid = 40, .k_start = 3, .k_mid = 3},
       B{.kind = B::kMqa, .out = 24, .heads = 3, .head_dim = 8}},
  };
  return m;
}

// timm's mobilenetv5_300m_enc at 768 px (Gemma 3n's tower: stem 64, stages
// of 128 / 256 / 640 / 1280 channels, MQA 12 x 64 with K/V stride 2, then
// 16 x 96; fusion to 2048), F16 kernels, text width 2048. For by-hand timing.
inline TinyMnv5 RealMnv5_300m() {
  using B = Mnv5BlockSpec;
  TinyMnv5 m;
  m.image_size = 768;
  m.patch_size = 3;
  m.stem = 64;
  m.msfa_mid = 3840;
  m.n_embd = 2048;
  m.n_text = 2048;
  m.f16_convs = true;
  m.keep_values = false;
  m.stages.resize(4);
  m.stages[0] = {B{.kind = B::kEdge, .out = 128, .mid = 256}, B{.kind = B::kEdge, .out = 128, .mid = 512},
                 B{.kind = B::kEdge, .out = 128, .mid = 512}};
  m.stages[1] = {B{.kind = B::kUir, .out = 256, .mid = 768, .k_start = 3, .k_mid = 5}};
  for (int k : {5, 3, 5, 3}) m.stages[1].push_back(B{.kind = B::kUir, .out = 256, .mid = 1024, .k_start = k});
  m.stages[2] = {B{.kind = B::kUir, .out = 640, .mid = 1536, .k_start = 5, .k_mid = 5}};
  for (int i = 0; i < 7; ++i) m.stages[2].push_back(B{.kind = B::kUir, .out = 640, .mid = 2560, .k_start = 5});
  m.stages[2].push_back(B{.kind = B::kUir, .out = 640, .mid = 640});
  for (int i = 0; i < 13; ++i) {
    m.stages[2].push_back(B{.kind = B::kMqa, .out = 640, .heads = 12, .head_dim = 64, .kv_down = true});
    m.stages[2].push_back(B{.kind = B::kUir, .out = 640, .mid = 1280});
  }
  m.stages[3] = {B{.kind = B::kUir, .out = 1280, .mid = 3840, .k_start = 5, .k_mid = 5}};
  for (int i = 0; i < 19; ++i) {
    m.stages[3].push_back(B{.kind = B::kMqa, .out = 1280, .heads = 16, .head_dim = 96});
    m.stages[3].push_back(B{.kind = B::kUir, .out = 1280, .mid = 2560});
  }
  return m;
}

// The weights by name (GGUF dims, values as stored: rounded to F16 where
// stored as F16) and the file's bytes.
struct Mnv5Tensor {
  std::vector<std::uint64_t> ne;
  std::vector<double> v;
};

class TinyMnv5Writer {
 public:
  explicit TinyMnv5Writer(const TinyMnv5& m) : m_(m), rng_(m.seed) {
    spec_.kvs = {
        GgufKv::Str("general.architecture", "clip"),
        GgufKv::Str("general.type", "mmproj"),
        GgufKv::Bool("clip.has_vision_encoder", true),
        GgufKv::Bool("clip.has_audio_encoder", false),
        GgufKv::Str("clip.vision.projector_type", "gemma3nv"),
        GgufKv::U32("clip.vision.image_size", static_cast<std::uint32_t>(m.image_size)),
        GgufKv::U32("clip.vision.patch_size", static_cast<std::uint32_t>(m.patch_size)),
        GgufKv::U32("clip.vision.embedding_length", static_cast<std::uint32_t>(m.n_embd)),
        GgufKv::U32("clip.vision.feed_forward_length", static_cast<std::uint32_t>(4 * m.n_embd)),
        GgufKv::U32("clip.vision.block_count", 128),
        GgufKv::U32("clip.vision.attention.head_count", 8),
        GgufKv::F32("clip.vision.attention.layer_norm_epsilon", 1e-6f),
        GgufKv::U32("clip.vision.projection_dim", static_cast<std::uint32_t>(m.n_text)),
        GgufKv::F32Array("clip.vision.image_mean", {0.f, 0.f, 0.f}),
        GgufKv::F32Array("clip.vision.image_std", {1.f, 1.f, 1.f}),
    };
    Conv("v.conv_stem.conv.weight", 3, 3, m.stem);
    Add("v.conv_stem.conv.bias", {1, 1, static_cast<std::uint64_t>(m.stem), 1}, 0.2, 0.0, false);
    Norm("v.conv_stem.bn.weight", m.stem);
    int ch = m.stem;
    std::vector<int> ends;
    for (std::size_t s = 0; s < m.stages.size(); ++s) {
      for (std::size_t i = 0; i < m.stages[s].size(); ++i) {
        ch = Block("v.blk." + std::to_string(s) + "." + std::to_string(i) + ".", m.stages[s][i], ch);
      }
      ends.push_back(ch);
    }
    // A one-stage model (a load-error case) has nothing to fuse; write its last stage alone.
    const int fused = ends.size() >= 2 ? ends[ends.size() - 2] + ends.back() : ends.back();
    Conv("v.msfa.ffn.pw_exp.conv.weight", 1, fused, m.msfa_mid);
    Norm("v.msfa.ffn.pw_exp.bn.weight", m.msfa_mid);
    Conv("v.msfa.ffn.pw_proj.conv.weight", 1, m.msfa_mid, m.n_embd);
    Norm("v.msfa.ffn.pw_proj.bn.weight", m.n_embd);
    Norm("v.msfa.norm.weight", m.n_embd);
    // The hard-token path (unused for images) and the soft path.
    Add("mm.embedding.weight", {static_cast<std::uint64_t>(m.n_embd), 8}, 1.0, 0.0, false);
    Norm("mm.hard_emb_norm.weight", m.n_embd);
    Norm("mm.soft_emb_norm.weight", m.n_embd);
    Add("mm.input_projection.weight", {static_cast<std::uint64_t>(m.n_embd), static_cast<std::uint64_t>(m.n_text)},
        1.0 / std::sqrt(m.n_embd), 0.0, m.f16_convs);
  }

  const std::map<std::string, Mnv5Tensor>& weights() const { return weights_; }
  GgufSpec& spec() { return spec_; }
  std::vector<std::uint8_t> Bytes() const { return spec_.Build(); }

 private:
  // A tensor of N(mean, std) values, F32 or F16.
  void Add(const std::string& name, std::vector<std::uint64_t> ne, double std, double mean, bool f16) {
    std::uint64_t n = 1;
    for (auto d : ne) n *= d;
    // Uniform with the given mean and standard deviation (cheaper than normal
    // for the full-size tower).
    std::uniform_real_distribution<float> dist(static_cast<float>(mean - std * std::sqrt(3.0)),
                                               static_cast<float>(mean + std * std::sqrt(3.0)));
    Mnv5Tensor t{ne, {}};
    GgufTensorSpec g{name, ne, f16 ? 1u : 0u, {}, std::nullopt};
    g.data.reserve(n * (f16 ? 2 : 4));
    for (std::uint64_t i = 0; i < n; ++i) {
      const float f = dist(rng_);
      if (f16) {
        const std::uint16_t h = detail::F32ToF16(f);
        if (m_.keep_values) t.v.push_back(detail::F16ToF32(h));
        g.data.push_back(static_cast<std::uint8_t>(h & 0xFF));
        g.data.push_back(static_cast<std::uint8_t>(h >> 8));
      } else {
        if (m_.keep_values) t.v.push_back(f);
        std::uint8_t b[4];
        std::memcpy(b, &f, 4);
        g.data.insert(g.data.end(), b, b + 4);
      }
    }
    weights_[name] = std::move(t);
    spec_.tensors.push_back(std::move(g));
  }
  // Kernel ne {k, k, in, out}, scaled for unit-variance outputs.
  void Conv(const std::string& name, int k, int in, int out) {
    Add(name,
        {static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(in),
         static_cast<std::uint64_t>(out)},
        1.0 / std::sqrt(static_cast<double>(k * k * in)), 0.0, m_.f16_convs);
  }
  void Norm(const std::string& name, int c) { Add(name, {static_cast<std::uint64_t>(c)}, 0.2, 1.0, false); }
  void Scale(const std::string& name, int c) { Add(name, {1, 1, static_cast<std::uint64_t>(c), 1}, 0.3, 0.5, false); }

  int Block(const std::string& p, const Mnv5BlockSpec& b, int in) {
    switch (b.kind) {
      case Mnv5BlockSpec::kEdge:
        Conv(p + "conv_exp.weight", b.k_exp, in, b.mid);
        Norm(p + "bn1.weight", b.mid);
        Conv(p + "conv_pwl.weight", 1, b.mid, b.out);
        Norm(p + "bn2.weight", b.out);
        return b.out;
      case Mnv5BlockSpec::kUir:
        if (b.k_start) {
          Conv(p + "dw_start.conv.weight", b.k_start, 1, in);
          Norm(p + "dw_start.bn.weight", in);
        }
        Conv(p + "pw_exp.conv.weight", 1, in, b.mid);
        Norm(p + "pw_exp.bn.weight", b.mid);
        if (b.k_mid) {
          Conv(p + "dw_mid.conv.weight", b.k_mid, 1, b.mid);
          Norm(p + "dw_mid.bn.weight", b.mid);
        }
        Conv(p + "pw_proj.conv.weight", 1, b.mid, b.out);
        Norm(p + "pw_proj.bn.weight", b.out);
        if (b.layer_scale) Scale(p + "layer_scale.gamma", b.out);
        return b.out;
      case Mnv5BlockSpec::kMqa:
        Norm(p + "norm.weight", in);
        Conv(p + "attn.query.proj.weight", 1, in, b.heads * b.head_dim);
        for (const char* kv : {"key", "value"}) {
          const std::string a = p + "attn." + kv + ".";
          if (b.kv_down) {
            Conv(a + "down_conv.weight", 3, 1, in);
            Norm(a + "norm.weight", in);
          }
          Conv(a + "proj.weight", 1, in, b.head_dim);
        }
        Conv(p + "attn.output.proj.weight", 1, b.heads * b.head_dim, b.out);
        if (b.layer_scale) Scale(p + "layer_scale.gamma", b.out);
        return b.out;
    }
    return in;
  }

  TinyMnv5 m_;
  std::mt19937 rng_;
  GgufSpec spec_;
  std::map<std::string, Mnv5Tensor> weights_;
};

}  // namespace kvshare::testing
