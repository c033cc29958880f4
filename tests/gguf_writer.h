// Test helper: writes small GGUF files in memory, with knobs to corrupt each
// field. Used by gguf_test.cc, quant_test.cc and the fuzz seed
// generator.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvshare::testing {

class ByteWriter {
 public:
  std::vector<std::uint8_t> bytes;
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Put<std::uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void Raw(const std::vector<std::uint8_t>& b) { bytes.insert(bytes.end(), b.begin(), b.end()); }
};

struct GgufKv {
  std::string key;
  std::uint32_t type = 0;
  std::vector<std::uint8_t> value;  // encoded value bytes (after the type)

  static GgufKv U32(const std::string& k, std::uint32_t v) { return Scalar(k, 4, v); }
  static GgufKv I32(const std::string& k, std::int32_t v) { return Scalar(k, 5, v); }
  static GgufKv F32(const std::string& k, float v) { return Scalar(k, 6, v); }
  static GgufKv Bool(const std::string& k, bool v) { return Scalar(k, 7, static_cast<std::uint8_t>(v)); }
  static GgufKv U64(const std::string& k, std::uint64_t v) { return Scalar(k, 10, v); }
  static GgufKv Str(const std::string& k, const std::string& v) {
    ByteWriter w;
    w.Str(v);
    return {k, 8, w.bytes};
  }
  static GgufKv StrArray(const std::string& k, const std::vector<std::string>& v) {
    ByteWriter w;
    w.Put<std::uint32_t>(8);
    w.Put<std::uint64_t>(v.size());
    for (const auto& s : v) w.Str(s);
    return {k, 9, w.bytes};
  }
  static GgufKv F32Array(const std::string& k, const std::vector<float>& v) {
    ByteWriter w;
    w.Put<std::uint32_t>(6);
    w.Put<std::uint64_t>(v.size());
    for (float x : v) w.Put(x);
    return {k, 9, w.bytes};
  }
  static GgufKv I32Array(const std::string& k, const std::vector<std::int32_t>& v) {
    ByteWriter w;
    w.Put<std::uint32_t>(5);
    w.Put<std::uint64_t>(v.size());
    for (auto x : v) w.Put(x);
    return {k, 9, w.bytes};
  }
  template <typename T>
  static GgufKv Scalar(const std::string& k, std::uint32_t type, T v) {
    ByteWriter w;
    w.Put(v);
    return {k, type, w.bytes};
  }
};

struct GgufTensorSpec {
  std::string name;
  std::vector<std::uint64_t> ne;        // GGUF order
  std::uint32_t type = 0;               // ggml type id
  std::vector<std::uint8_t> data;       // tensor bytes
  std::optional<std::uint64_t> offset;  // default: running aligned offset
};

struct GgufSpec {
  std::uint32_t magic = 0x46554747u;
  std::uint32_t version = 3;
  std::optional<std::uint64_t> tensor_count;  // override the real count
  std::optional<std::uint64_t> kv_count;
  std::vector<GgufKv> kvs;
  std::vector<GgufTensorSpec> tensors;
  std::uint64_t alignment = 32;  // layout alignment (set general.alignment yourself to change the reader's)

  std::vector<std::uint8_t> Build() const {
    ByteWriter w;
    w.Put(magic);
    w.Put(version);
    w.Put<std::uint64_t>(tensor_count.value_or(tensors.size()));
    w.Put<std::uint64_t>(kv_count.value_or(kvs.size()));
    for (const auto& kv : kvs) {
      w.Str(kv.key);
      w.Put(kv.type);
      w.Raw(kv.value);
    }
    std::vector<std::uint64_t> offsets;
    std::uint64_t off = 0;
    for (const auto& t : tensors) {
      const std::uint64_t o = t.offset.value_or(off);
      offsets.push_back(o);
      off = o + t.data.size();
      off = (off + alignment - 1) / alignment * alignment;
      w.Str(t.name);
      w.Put<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
      for (auto d : t.ne) w.Put(d);
      w.Put(t.type);
      w.Put(o);
    }
    while (w.bytes.size() % alignment != 0) w.bytes.push_back(0);
    const std::size_t data_start = w.bytes.size();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      // A deliberately out-of-range offset (a test sets 2^40): write no data.
      if (offsets[i] > (1ull << 36)) continue;
      const std::size_t end = data_start + offsets[i] + tensors[i].data.size();
      if (w.bytes.size() < end) w.bytes.resize(end, 0);
      std::memcpy(w.bytes.data() + data_start + offsets[i], tensors[i].data.data(), tensors[i].data.size());
    }
    return w.bytes;
  }
};

// Writes `bytes` to `path`; throws std::runtime_error when it cannot.
inline void WriteFile(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("could not write " + path);
}

// A small valid file: a few metadata kinds plus an F32 [8, 2] and a Q8_0 [32, 3] tensor.
inline GgufSpec ValidSpec() {
  GgufSpec s;
  s.kvs.push_back(GgufKv::Str("general.architecture", "gemma3"));
  s.kvs.push_back(GgufKv::U32("gemma3.block_count", 2));
  s.kvs.push_back(GgufKv::F32("gemma3.rope.freq_base", 10000.0f));
  s.kvs.push_back(GgufKv::Bool("tokenizer.ggml.add_bos_token", true));
  s.kvs.push_back(GgufKv::I32("test.neg", -5));
  s.kvs.push_back(GgufKv::StrArray("tokenizer.ggml.tokens", {"<pad>", "<eos>", "a"}));
  s.kvs.push_back(GgufKv::F32Array("tokenizer.ggml.scores", {0.0f, -1000.0f, 1.5f}));
  s.kvs.push_back(GgufKv::I32Array("tokenizer.ggml.token_type", {3, 3, 1}));
  GgufTensorSpec a{"norm.weight", {8, 2}, 0, std::vector<std::uint8_t>(64), std::nullopt};
  for (int i = 0; i < 16; ++i) {
    const float v = static_cast<float>(i) * 0.5f;
    std::memcpy(a.data.data() + 4 * i, &v, 4);
  }
  GgufTensorSpec b{"blk.0.attn_v.weight", {32, 3}, 8, std::vector<std::uint8_t>(34 * 3, 1), std::nullopt};
  s.tensors.push_back(a);
  s.tensors.push_back(b);
  return s;
}

}  // namespace kvshare::testing
