// Tensor types the engine does not compute with (ggml's activation formats,
// integer and F64 tensors). The GGUF reader knows their names and block
// sizes, so it validates and reads such a file (`kvshare info` lists it);
// loading a model from it fails with a kvshare::Error that names the tensor
// and its type. Type ids the reader does not know (a future type) are parse
// errors naming the tensor and the id.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "common_record_measured.h"
#include "gguf_writer.h"
#include "kvshare/common/error.h"
#include "kvshare/gguf/gguf.h"
#include "kvshare/gguf/model_info.h"
#include "kvshare/model/model.h"
#include "model_tiny_gemma.h"
#include "model_tiny_gemma4.h"
#include "quant/kernels/packed.h"
#include "quant/quant.h"
#include "quant/weight_types.h"

namespace kvshare {
namespace {

using ::testing::AllOf;
using testing::GgufSpec;
using testing::GgufTensorSpec;
using ::testing::HasSubstr;

struct TypeFacts {
  GgmlType type;
  const char* name;
  std::int64_t block, bytes;
};

// ggml-common.h block structs; every id GGUF files use today.
// (Q8_1 and Q8_K are ggml's activation formats; the integer and F64 types
// never hold Gemma weights.)
const TypeFacts kUnsupported[] = {
    {GgmlType::kQ8_1, "Q8_1", 32, 36}, {GgmlType::kQ8_K, "Q8_K", 256, 292}, {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI32, "I32", 1, 4},     {GgmlType::kF64, "F64", 1, 8},
};

std::vector<std::uint8_t> RandomBytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> b(n);
  for (auto& v : b) v = static_cast<std::uint8_t>(rng());
  return b;
}

// Bytes of `rows` rows of `cols` elements of type t.
std::size_t TensorBytes(const TypeFacts& t, std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows * (cols / t.block) * t.bytes);
}

TEST(WeightTypes, ReaderKnowsEveryTypeAndReadsItsTensors) {
  GgufSpec g;
  g.kvs.push_back(testing::GgufKv::Str("general.architecture", "gemma3"));
  for (const TypeFacts& t : kUnsupported) {
    EXPECT_TRUE(IsKnownGgmlType(static_cast<std::uint32_t>(t.type))) << t.name;
    EXPECT_EQ(GgmlTypeName(t.type), t.name);
    EXPECT_EQ(GgmlBlockSize(t.type), t.block) << t.name;
    EXPECT_EQ(GgmlBlockBytes(t.type), t.bytes) << t.name;
    EXPECT_FALSE(IsSupportedWeightType(t.type)) << t.name;
    g.tensors.push_back(GgufTensorSpec{std::string("w.") + t.name,
                                       {256, 3},
                                       static_cast<std::uint32_t>(t.type),
                                       RandomBytes(TensorBytes(t, 3, 256), 1),
                                       std::nullopt});
  }
  const std::vector<std::uint8_t> bytes = g.Build();
  const GgufFile f = GgufFile::Parse(bytes.data(), bytes.size(), "types.gguf");
  for (const TypeFacts& t : kUnsupported) {
    const GgufTensor& ti = f.Tensor(std::string("w.") + t.name);
    EXPECT_EQ(ti.type, t.type);
    EXPECT_EQ(ti.nbytes, TensorBytes(t, 3, 256)) << t.name;
    // The check every model loader goes through names the tensor and the type.
    try {
      WeightMatrix::FromTensor(ti);
      ADD_FAILURE() << t.name << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("tensor 'w." + std::string(t.name) + "' has type " + t.name),
                                  HasSubstr("does not support"), HasSubstr("Q5_K")));
    }
  }
  // `kvshare info` lists them by name.
  std::ostringstream info;
  PrintModelInfo(f, info);
  EXPECT_THAT(info.str(), AllOf(HasSubstr("Q8_K"), HasSubstr("I32"), HasSubstr("F64")));
}

// The weight-type table (src/quant/weight_types.cc) agrees with the GGUF type
// table and with itself; the functions that answer for a type read it.
TEST(WeightTypes, TableRowsAreConsistent) {
  for (const detail::WeightTypeTraits& t : detail::WeightTypes()) {
    EXPECT_EQ(detail::FindWeightType(t.type), &t) << t.name;
    EXPECT_EQ(GgmlTypeName(t.type), t.name);
    EXPECT_EQ(GgmlBlockSize(t.type), t.block) << t.name;
    EXPECT_EQ(GgmlBlockBytes(t.type), t.bytes) << t.name;
    const std::int64_t act_elements = t.act == detail::ActFormat::kQ8 ? 32 : t.act == detail::ActFormat::kQ8K ? 256 : 1;
    EXPECT_EQ(t.act_blocks * act_elements, t.block) << t.name;
    EXPECT_TRUE(IsSupportedWeightType(t.type)) << t.name;
    EXPECT_EQ(UsesSuperBlockActivations(t.type), t.act == detail::ActFormat::kQ8K) << t.name;
    EXPECT_NE(t.dequantize, nullptr) << t.name;
    for (const detail::LevelKernels& k : t.level) {
      EXPECT_NE(k.rows, nullptr) << t.name;
      if (k.packed != nullptr) {
        EXPECT_TRUE(t.Packable()) << t.name;
      }
    }
    EXPECT_EQ(t.level[0].packed, nullptr) << t.name << ": the scalar level reads the ggml layout";
    EXPECT_EQ(t.Packable(), t.packing.planes.codes > 0) << t.name;
    EXPECT_EQ(detail::CanPack(t.type, 16), t.Packable()) << t.name;
  }
  for (std::uint32_t id = 0; id < 256; ++id) {
    const auto type = static_cast<GgmlType>(id);
    if (detail::FindWeightType(type) != nullptr) {
      EXPECT_TRUE(IsKnownGgmlType(id)) << id;
    }
    EXPECT_EQ(IsSupportedWeightType(type), detail::FindWeightType(type) != nullptr) << id;
  }
}

// Ids outside the table (retired Q4_2 = 4, Q4_3 = 5, repacked 31..33, future
// ones) stay a parse error naming the tensor and the id.
TEST(WeightTypes, UnknownIdsAreParseErrors) {
  for (std::uint32_t id : {4u, 5u, 31u, 36u, 43u, 1000u}) {
    GgufSpec g = testing::ValidSpec();
    g.tensors[1].type = id;
    const std::vector<std::uint8_t> bytes = g.Build();
    try {
      GgufFile::Parse(bytes.data(), bytes.size(), "x.gguf");
      ADD_FAILURE() << "id " << id << " accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("tensor[1] 'blk.0.attn_v.weight' type"),
                                  HasSubstr("unknown ggml type " + std::to_string(id))));
    }
  }
}

// A tiny gemma3 file whose blk.1.attn_q.weight has an unsupported type: the
// load fails naming that tensor and type.
TEST(WeightTypes, ModelLoadRefusesUnsupportedWeightTypes) {
  testing::TinyGemmaSpec spec;
  spec.n_layer = 2;
  spec.n_embd = 256;  // a multiple of every block size
  spec.pattern = 2;
  const std::string name = "blk.1.attn_q.weight";
  for (const TypeFacts& t : kUnsupported) {
    GgufSpec g = testing::TinyGemmaGguf(spec);
    int found = 0;
    for (GgufTensorSpec& ts : g.tensors) {
      if (ts.name != name) continue;
      ++found;
      ts.type = static_cast<std::uint32_t>(t.type);
      ts.data =
          RandomBytes(TensorBytes(t, static_cast<std::int64_t>(ts.ne[1]), static_cast<std::int64_t>(ts.ne[0])), 2);
    }
    ASSERT_EQ(found, 1);
    const testing::TempGguf file(std::string("unsupported_") + t.name,
                                 [&](const std::string& path) { testing::WriteFile(path, g.Build()); });
    try {
      Model::Load(file.path);
      ADD_FAILURE() << t.name << " loaded";
    } catch (const Error& e) {
      EXPECT_THAT(
          e.what(),
          AllOf(HasSubstr("tensor '" + name + "' has type " + t.name),
                HasSubstr("(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                          "IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, "
                          "TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0)")));
    }
  }
}

// Gives tensor `name` type t (random bytes of the right size).
std::function<void(GgufSpec&)> Retype(const std::string& name, const TypeFacts& t) {
  return [name, t](GgufSpec& g) {
    for (GgufTensorSpec& ts : g.tensors) {
      if (ts.name != name) continue;
      std::int64_t rows = 1;
      for (std::size_t d = 1; d < ts.ne.size(); ++d) rows *= static_cast<std::int64_t>(ts.ne[d]);
      ts.type = static_cast<std::uint32_t>(t.type);
      ts.data = RandomBytes(TensorBytes(t, rows, static_cast<std::int64_t>(ts.ne[0])), 3);
    }
  };
}

// Gemma 4 takes weights through the same check: a 2-D matrix, the per-layer
// embedding table and a 3-D expert stack.
TEST(WeightTypes, Gemma4LoadRefusesUnsupportedWeightTypes) {
  const TypeFacts q8_1{GgmlType::kQ8_1, "Q8_1", 32, 36};
  const struct {
    std::string tensor;
    TypeFacts type;
    int experts;
  } cases[] = {{"blk.1.attn_q.weight", q8_1, 0},
               {"per_layer_token_embd.weight", q8_1, 0},
               {"blk.0.ffn_gate_up_exps.weight", q8_1, 4}};
  for (const auto& c : cases) {
    testing::TinyGemma4Spec spec;
    spec.experts = c.experts;
    spec.edit = Retype(c.tensor, c.type);
    const testing::TempGguf file = testing::TempGemma4(spec, std::string("unsupported_") + c.type.name);
    try {
      Model::Load(file.path);
      ADD_FAILURE() << c.tensor << " as " << c.type.name << " loaded";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("tensor '" + c.tensor + "' has type " + c.type.name),
                                  HasSubstr("does not support (supported: F32, F16, BF16,")));
    }
  }
}

// The new types end to end: a tiny gemma3 file with Q5_K, Q4_1 and Q5_1
// matrices (EncodeRow) loads, and its logits follow the double-precision
// reference over the same dequantized weights. The difference is the int8
// activation rounding (each matmul output moves by up to sum_b amax_b / 254
// * sum |w|, ~0.4% of |w||x| here); measured 2e-3 of the largest logit.
TEST(WeightTypes, NewTypesForwardFollowsReference) {
  testing::TinyGemmaSpec spec;
  spec.n_layer = 3;
  spec.n_embd = 256;
  spec.n_ff = 256;
  spec.n_head = 2;
  spec.head_dim = 128;  // every matrix has 256 columns: Q5_K fits all of them
  spec.types = {GgmlType::kQ5_K, GgmlType::kQ4_1, GgmlType::kQ5_1};
  const testing::TempGguf file(spec, "new_types");
  const auto m = Model::Load(file.path);
  int seen[3] = {};
  for (const GgufTensor& t : m->gguf().tensors()) {
    seen[0] += t.type == GgmlType::kQ5_K;
    seen[1] += t.type == GgmlType::kQ4_1;
    seen[2] += t.type == GgmlType::kQ5_1;
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
  const std::vector<std::int32_t> tokens = {1, 7, 3, 42, 9, 0, 17, 5};
  auto st = m->NewState({.max_context = 16});
  const std::span<const float> got = m->Forward(*st, tokens, nullptr, {.num_logits = 8});
  const std::vector<double> ref = testing::ReferenceLogits(*m, tokens, 0);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  testing::RecordMeasured("max |logit - reference| / max |reference| = %.3g\n", diff / scale);
  EXPECT_LT(diff / scale, 1e-2);
}

}  // namespace
}  // namespace kvshare
