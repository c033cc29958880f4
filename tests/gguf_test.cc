// GGUF reader: a valid synthetic file round-trips; every malformed variant
// raises kvshare::Error naming the offending field; the real model (if
// fetched) parses with the expected structure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf_writer.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/gguf/model_info.h"
#include "model_default_path.h"

namespace kvshare {
namespace {

using testing::GgufKv;
using testing::GgufSpec;
using testing::GgufTensorSpec;
using ::testing::HasSubstr;
using testing::ValidSpec;

std::string ParseError(const std::vector<std::uint8_t>& bytes) {
  try {
    ParseGguf(bytes.data(), bytes.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Gguf, ValidFileParses) {
  const auto bytes = ValidSpec().Build();
  GgufFile f = ParseGguf(bytes.data(), bytes.size());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.GetString("general.architecture"), "gemma3");
  EXPECT_EQ(f.GetU32("gemma3.block_count"), 2u);
  EXPECT_EQ(f.GetI32("gemma3.block_count"), 2);
  EXPECT_FLOAT_EQ(f.GetF32("gemma3.rope.freq_base"), 10000.0f);
  EXPECT_TRUE(f.GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.GetI32("test.neg"), -5);
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens"), (std::vector<std::string_view>{"<pad>", "<eos>", "a"}));
  EXPECT_EQ(f.GetF32Array("tokenizer.ggml.scores"), (std::vector<float>{0.0f, -1000.0f, 1.5f}));
  EXPECT_EQ(f.GetI32Array("tokenizer.ggml.token_type"), (std::vector<std::int32_t>{3, 3, 1}));
  EXPECT_EQ(f.GetU32Or("missing.key", 7u), 7u);
  EXPECT_FALSE(f.GetF32Opt("missing.key").has_value());
  EXPECT_EQ(f.keys().size(), 8u);

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor& a = f.Tensor("norm.weight");
  EXPECT_EQ(a.type, GgmlType::kF32);
  EXPECT_EQ(a.n_dims, 2);
  EXPECT_EQ(a.ne[0], 8);
  EXPECT_EQ(a.ne[1], 2);
  EXPECT_EQ(a.nbytes, 64u);
  EXPECT_EQ(a.NumRows(), 2);
  float v5;
  std::memcpy(&v5, a.data + 20, 4);
  EXPECT_EQ(v5, 2.5f);
  const GgufTensor& b = f.Tensor("blk.0.attn_v.weight");
  EXPECT_EQ(b.type, GgmlType::kQ8_0);
  EXPECT_EQ(b.nbytes, 102u);
  EXPECT_EQ(b.RowBytes(), 34u);
  EXPECT_EQ(static_cast<std::size_t>(b.data - bytes.data()) % 32, 0u);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);
  EXPECT_THAT([&] { (void)f.Tensor("nope"); }, ::testing::ThrowsMessage<Error>(HasSubstr("tensor 'nope' not found")));
}

TEST(Gguf, Version2Accepted) {
  GgufSpec s = ValidSpec();
  s.version = 2;
  const auto bytes = s.Build();
  EXPECT_EQ(ParseGguf(bytes.data(), bytes.size()).version(), 2u);
}

TEST(Gguf, TypeMismatchNamesKeyAndTypes) {
  const auto bytes = ValidSpec().Build();
  GgufFile f = ParseGguf(bytes.data(), bytes.size());
  auto msg = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  const std::string m1 = msg([&] { f.GetU32("general.architecture"); });
  EXPECT_THAT(m1, HasSubstr("general.architecture"));
  EXPECT_THAT(m1, HasSubstr("expected uint32"));
  EXPECT_THAT(m1, HasSubstr("type string"));
  EXPECT_THAT(msg([&] { f.GetString("gemma3.block_count"); }), HasSubstr("has type uint32, expected string"));
  EXPECT_THAT(msg([&] { f.GetF32Array("tokenizer.ggml.tokens"); }),
              HasSubstr("array of string, expected array of float32"));
  EXPECT_THAT(msg([&] { f.GetU32("test.neg"); }), HasSubstr("does not fit in uint32"));
  EXPECT_THAT(msg([&] { f.GetBool("absent.key"); }), HasSubstr("'absent.key' is missing"));
  EXPECT_THAT(msg([&] { f.GetF32Opt("gemma3.block_count"); }), HasSubstr("expected float32"));
}

TEST(Gguf, EveryTruncationFails) {
  const auto bytes = ValidSpec().Build();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(ParseGguf(cut.data(), cut.size()), Error) << "truncated at " << n;
  }
  EXPECT_THROW(ParseGguf(nullptr, 0), Error);
}

TEST(Gguf, TruncationMessagesNameFields) {
  const auto bytes = ValidSpec().Build();
  auto at = [&](std::size_t n) { return ParseError(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + n)); };
  EXPECT_THAT(at(2), HasSubstr("magic at byte 0"));
  EXPECT_THAT(at(6), HasSubstr("version at byte 4"));
  EXPECT_THAT(at(12), HasSubstr("tensor_count at byte 8"));
  EXPECT_THAT(at(bytes.size() - 1), HasSubstr("extends beyond the end of the file"));
}

struct BadCase {
  const char* what;
  void (*mutate)(GgufSpec&);
  const char* field;  // substring expected in the message
};

const BadCase kBadCases[] = {
    {"wrong magic", [](GgufSpec& s) { s.magic = 0x46554746u; }, "magic at byte 0"},
    {"version 1", [](GgufSpec& s) { s.version = 1; }, "version at byte 4: 1 is not supported"},
    {"version 4", [](GgufSpec& s) { s.version = 4; }, "version at byte 4: 4 is not supported"},
    {"huge tensor count", [](GgufSpec& s) { s.tensor_count = 1ull << 60; }, "tensor_count at byte 8"},
    {"huge kv count", [](GgufSpec& s) { s.kv_count = ~0ull; }, "metadata_kv_count at byte 16"},
    {"kv count too large by one", [](GgufSpec& s) { s.kv_count = s.kvs.size() + 1; }, "at byte"},
    {"huge key length", [](GgufSpec& s) { s.kvs[0].key = std::string(70000, 'k'); }, "key length"},
    {"huge string length", [](GgufSpec& s) { s.kvs[0].value.assign(8, 0xff); },
     "metadata 'general.architecture' length"},
    {"bad metadata type", [](GgufSpec& s) { s.kvs[1].type = 13; }, "metadata 'gemma3.block_count' type at byte"},
    {"bad array element type", [](GgufSpec& s) { s.kvs[5].value[0] = 77; },
     "metadata 'tokenizer.ggml.tokens' array element type"},
    {"huge array count", [](GgufSpec& s) { std::memset(s.kvs[6].value.data() + 4, 0x7f, 8); },
     "metadata 'tokenizer.ggml.scores' array count"},
    {"bad bool", [](GgufSpec& s) { s.kvs[3].value[0] = 2; }, "bool value 2"},
    {"duplicate key", [](GgufSpec& s) { s.kvs[1].key = "general.architecture"; }, "duplicate key"},
    {"nested arrays too deep",
     [](GgufSpec& s) {
       testing::ByteWriter w;
       for (int i = 0; i < 20; ++i) {
         w.Put<std::uint32_t>(9);
         w.Put<std::uint64_t>(1);
       }
       w.Put<std::uint32_t>(4);
       w.Put<std::uint64_t>(0);
       s.kvs.push_back({"test.nested", 9, w.bytes});
     },
     "nested deeper"},
    {"alignment not power of two", [](GgufSpec& s) { s.kvs.push_back(GgufKv::U32("general.alignment", 48)); },
     "metadata 'general.alignment' at byte"},
    {"alignment zero", [](GgufSpec& s) { s.kvs.push_back(GgufKv::U32("general.alignment", 0)); }, "not a power of two"},
    {"alignment wrong type", [](GgufSpec& s) { s.kvs.push_back(GgufKv::U64("general.alignment", 32)); },
     "general.alignment' at byte"},
    {"n_dims 5",
     [](GgufSpec& s) {
       s.tensors[0].ne = {1, 1, 1, 8, 2};
     },
     "tensor[0] 'norm.weight' n_dims"},
    {"zero dim",
     [](GgufSpec& s) {
       s.tensors[0].ne = {8, 0};
     },
     "tensor[0] 'norm.weight' ne[1]"},
    {"overflow dims",
     [](GgufSpec& s) {
       s.tensors[0].ne = {1ull << 32, 1ull << 32};
     },
     "tensor[0] 'norm.weight' ne[1]"},
    {"byte size beyond file", [](GgufSpec& s) { s.tensors[0].ne = {1ull << 40}; }, "tensor[0] 'norm.weight' ne"},
    {"unknown ggml type", [](GgufSpec& s) { s.tensors[1].type = 5; }, "tensor[1] 'blk.0.attn_v.weight' type"},
    {"ne[0] not a block multiple",
     [](GgufSpec& s) {
       s.tensors[1].ne = {16, 6};
     },
     "not a multiple of the Q8_0 block size"},
    {"misaligned offset", [](GgufSpec& s) { s.tensors[1].offset = 65; }, "tensor[1] 'blk.0.attn_v.weight' offset"},
    {"data beyond EOF",
     [](GgufSpec& s) {
       s.tensors[1].ne = {32, 4};
     },
     "extends beyond the end of the file"},
    {"offset beyond EOF", [](GgufSpec& s) { s.tensors[0].offset = 1ull << 40; }, "tensor[0] 'norm.weight' offset"},
    {"overlapping tensors", [](GgufSpec& s) { s.tensors[1].offset = 0; }, "tensor[1] 'blk.0.attn_v.weight' offset"},
    {"empty tensor name", [](GgufSpec& s) { s.tensors[0].name = ""; }, "tensor[0] name"},
    {"long tensor name", [](GgufSpec& s) { s.tensors[0].name = std::string(64, 'n'); }, "tensor[0] name length"},
    {"duplicate tensor name", [](GgufSpec& s) { s.tensors[1].name = "norm.weight"; }, "duplicate tensor name"},
};

TEST(Gguf, MalformedFilesNameTheField) {
  for (const BadCase& c : kBadCases) {
    GgufSpec s = ValidSpec();
    c.mutate(s);
    const std::string msg = ParseError(s.Build());
    EXPECT_THAT(msg, HasSubstr(c.field)) << c.what;
    EXPECT_THAT(msg, HasSubstr("at byte")) << c.what;
  }
}

TEST(Gguf, OverlappingTensorsAreRefused) {
  GgufSpec s = ValidSpec();
  s.tensors[1].offset = 0;  // over norm.weight's bytes
  EXPECT_THAT(ParseError(s.Build()), HasSubstr("overlaps tensor[0] 'norm.weight' [0, +"));
}

TEST(Gguf, OpenMissingFile) {
  EXPECT_THAT([] { GgufFile::Open("/nonexistent/model.gguf"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot open")));
}

TEST(Gguf, OpenFromDiskAndMove) {
  const auto bytes = ValidSpec().Build();
  const std::string path = (std::filesystem::temp_directory_path() / "kvshare_gguf_test.gguf").string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  GgufFile f = GgufFile::Open(path);
  GgufFile g = std::move(f);
  EXPECT_EQ(g.GetString("general.architecture"), "gemma3");
  EXPECT_EQ(g.Tensor("norm.weight").nbytes, 64u);
  std::filesystem::remove(path);
}

// ReleasePages drops a mapped tensor's pages from the resident set; its bytes
// read back unchanged (from the file). On memory the GgufFile does not own
// (Parse) and outside the mapping it does nothing: the caller's bytes stay.
TEST(Gguf, ReleasedPagesReadBackUnchanged) {
  GgufSpec s = ValidSpec();
  GgufTensorSpec big{"big.weight", {32, 4096}, 8, std::vector<std::uint8_t>(34 * 4096), std::nullopt};  // 136 KiB Q8_0
  for (std::size_t i = 0; i < big.data.size(); ++i) big.data[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
  s.tensors.push_back(big);
  const auto bytes = s.Build();
  const std::string path = (std::filesystem::temp_directory_path() / "kvshare_gguf_release_test.gguf").string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const GgufFile f = GgufFile::Open(path);
  const GgufTensor& t = f.Tensor("big.weight");
  ASSERT_EQ(t.nbytes, big.data.size());
  EXPECT_EQ(0, std::memcmp(t.data, big.data.data(), t.nbytes));
  f.ReleasePages(t.data, t.nbytes);
  EXPECT_EQ(0, std::memcmp(t.data, big.data.data(), t.nbytes));
  f.ReleasePages(t.data, t.nbytes + f.file_size());  // past the mapping: ignored
  EXPECT_EQ(0, std::memcmp(t.data, big.data.data(), t.nbytes));
  std::filesystem::remove(path);

  std::vector<std::uint8_t> heap = bytes;  // not a mapping: must stay as it is
  const GgufFile p = ParseGguf(heap.data(), heap.size());
  const GgufTensor& pt = p.Tensor("big.weight");
  p.ReleasePages(pt.data, pt.nbytes);
  EXPECT_EQ(0, std::memcmp(pt.data, big.data.data(), pt.nbytes));
}

TEST(Gguf, PrintModelInfo) {
  const auto bytes = ValidSpec().Build();
  GgufFile f = ParseGguf(bytes.data(), bytes.size());
  std::ostringstream os;
  PrintModelInfo(f, os);
  const std::string s = os.str();
  EXPECT_THAT(s, HasSubstr("architecture: gemma3"));
  EXPECT_THAT(s, HasSubstr("block_count"));
  EXPECT_THAT(s, HasSubstr("F32"));
  EXPECT_THAT(s, HasSubstr("Q8_0"));
  EXPECT_THAT(s, HasSubstr("tensors: 2"));
}

std::string ModelPath() { return testing::DefaultModelPath(); }

TEST(Gguf, RealModel) {
  const std::string path = ModelPath();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent; run scripts/fetch_model.py";
  GgufFile f = GgufFile::Open(path);
  EXPECT_EQ(f.GetString("general.architecture"), "gemma3");
  EXPECT_EQ(f.GetU32("gemma3.block_count"), 18u);
  EXPECT_EQ(f.GetU32("gemma3.embedding_length"), 640u);
  EXPECT_EQ(f.GetU32("gemma3.attention.head_count_kv"), 1u);
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens").size(), 262144u);
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens")[106], "<end_of_turn>");
  EXPECT_EQ(f.tensors().size(), 236u);
  const GgufTensor& emb = f.Tensor("token_embd.weight");
  EXPECT_EQ(emb.type, GgmlType::kQ8_0);
  EXPECT_EQ(emb.ne[0], 640);
  EXPECT_EQ(emb.ne[1], 262144);
  EXPECT_EQ(f.Tensor("blk.0.ffn_down.weight").type, GgmlType::kQ6_K);
  EXPECT_EQ(f.Tensor("blk.2.ffn_down.weight").type, GgmlType::kQ4_K);
  EXPECT_EQ(f.Tensor("blk.0.attn_q.weight").type, GgmlType::kQ5_0);
  std::ostringstream os;
  PrintModelInfo(f, os);
  EXPECT_THAT(os.str(), HasSubstr("Q6_K"));
}

}  // namespace
}  // namespace kvshare
