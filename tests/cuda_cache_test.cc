// KvCache with KvCacheOptions::device = kCuda (buffers in GPU memory).
//  - Everywhere: the error of a device cache without a usable GPU (or in a
//    build without CUDA), and AttendLayer refusing a run device other than
//    the cache's.
//  - On a GPU (skipped without one): ragged prefill then decode through a
//    sliding, a full and a KV-shared layer, with RoPE, on a device cache and
//    on a CPU cache fed the same tensors: outputs within the fp32 tolerance,
//    cache bytes equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common_test_util.h"
#include "cuda_test_util.h"
#include "kvshare/cache/kv_cache.h"
#include "kvshare/common/error.h"

namespace kvshare::testing {
namespace {

constexpr int kHeads = 4, kKvHeads = 2, kHead = 64, kWindow = 6, kMaxSeq = 40, kMaxStep = 6;

// Sliding, full, and a last layer sharing the sliding layer's cache.
ModelKvSpec Spec() {
  ModelKvSpec spec;
  spec.layers = {{AttentionType::kSliding, kWindow, kKvHeads, kHead, 10000.f},
                 {AttentionType::kFull, 0, kKvHeads, kHead, 1e6f},
                 {AttentionType::kSliding, kWindow, kKvHeads, kHead, 10000.f}};
  spec.num_kv_shared_layers = 1;
  return spec;
}

TEST(CudaCache, DeviceCacheWithoutUsableGpuIsAnActionableError) {
  std::string why;
  if (GpuUsable(&why)) GTEST_SKIP() << "a GPU is usable here; this checks the error without one";
  const std::string msg = ErrorOf([] { KvCache c(Spec(), {.max_seq = 16, .device = Device::kCuda}); });
#if KVSHARE_HAVE_CUDA
  EXPECT_NE(msg.find("no CUDA device is usable"), std::string::npos) << msg;
#else
  EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
#endif
}

TEST(CudaCache, RunDeviceMustBeTheCachesDevice) {
  KvCache cache(Spec(), {.max_seq = 16, .max_step = 1});
  std::mt19937_64 g(3);
  const Buffer q = RandomBuffer(DType::kFloat32, {1, 1, kHeads * kHead}, g);
  const Buffer k = RandomBuffer(DType::kFloat32, {1, 1, kKvHeads * kHead}, g);
  const Buffer v = RandomBuffer(DType::kFloat32, {1, 1, kKvHeads * kHead}, g);
  Buffer out(DType::kFloat32, {1, 1, kHeads * kHead});
  LayerAttendArgs a;
  a.query = q.View();
  a.key = k.View();
  a.value = v.View();
  a.output = out.Mut();
  a.attrs.num_heads = kHeads;
  a.run.device = Device::kCuda;
  cache.Reserve(0, 1);
  const std::string msg = ErrorOf([&] { AttendLayer(cache, 0, a); });
  EXPECT_NE(msg.find("the cache lives on cpu but the op was asked to run on cuda"), std::string::npos) << msg;
  a.run.device = Device::kCpu;
  EXPECT_NO_THROW(AttendLayer(cache, 0, a));
}

#if KVSHARE_HAVE_CUDA

class CudaCacheDevice : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string why;
    if (!GpuUsable(&why)) GTEST_SKIP() << why;
  }
};

// RoPE tables (kMaxSeq, kHead / 2) for a base.
void RopeTables(float base, Buffer& cos, Buffer& sin) {
  const int half = kHead / 2;
  cos = Buffer(DType::kFloat32, {kMaxSeq, half});
  sin = Buffer(DType::kFloat32, {kMaxSeq, half});
  for (int p = 0; p < kMaxSeq; ++p) {
    for (int i = 0; i < half; ++i) {
      const double ang = p * std::pow(static_cast<double>(base), -2.0 * i / kHead);
      cos.Set(static_cast<std::int64_t>(p) * half + i, static_cast<float>(std::cos(ang)));
      sin.Set(static_cast<std::int64_t>(p) * half + i, static_cast<float>(std::sin(ang)));
    }
  }
}

TEST_P(CudaCacheDevice, DecodeMatchesCpuCache) {
  const DType dtype = GetParam();
  const ModelKvSpec spec = Spec();
  KvCache cpu(spec, {.max_batch = 2, .max_seq = kMaxSeq, .max_step = kMaxStep, .dtype = dtype});
  KvCache gpu(spec,
              {.max_batch = 2, .max_seq = kMaxSeq, .max_step = kMaxStep, .dtype = dtype, .device = Device::kCuda});
  Buffer cos[2], sin[2];
  RopeTables(10000.f, cos[0], sin[0]);
  RopeTables(1e6f, cos[1], sin[1]);
  // fp16 / bf16 caches run on the tensor-core kernel (its 16-bit tolerance).
  const double tolerance = TensorCoreTolerance(dtype, 1e-5);
  std::mt19937_64 g(5);
  // A ragged prefill (6 and 4 tokens in one step), then 12 decode steps:
  // 18 and 16 positions through rings of 6 + 6 - 1 = 11.
  std::vector<std::vector<int>> steps = {{6, 4}};
  for (int i = 0; i < 12; ++i) steps.push_back({1, 1});
  for (const std::vector<int>& n : steps) {
    const int S = std::max(n[0], n[1]);
    for (int row = 0; row < 2; ++row) {
      cpu.Reserve(row, n[static_cast<std::size_t>(row)]);
      gpu.Reserve(row, n[static_cast<std::size_t>(row)]);
    }
    for (int layer = 0; layer < 3; ++layer) {
      SCOPED_TRACE(std::string("layer ") + std::to_string(layer) + " at length " + std::to_string(cpu.Length(0)));
      const bool owns = cpu.Plan().layers[static_cast<std::size_t>(layer)].owns_cache;
      const int table = spec.layers[static_cast<std::size_t>(layer)].type == AttentionType::kFull ? 1 : 0;
      const Buffer q = RandomBuffer(DType::kFloat32, {2, S, kHeads * kHead}, g);
      const Buffer k = RandomBuffer(DType::kFloat32, {2, S, kKvHeads * kHead}, g);
      const Buffer v = RandomBuffer(DType::kFloat32, {2, S, kKvHeads * kHead}, g);
      Buffer want(DType::kFloat32, {2, S, kHeads * kHead}), got(DType::kFloat32, {2, S, kHeads * kHead});
      LayerAttendArgs a;
      a.query = q.View();
      if (owns) {
        a.key = k.View();
        a.value = v.View();
      }
      a.cos_cache = cos[table].View();
      a.sin_cache = sin[table].View();
      a.attrs.num_heads = kHeads;
      a.attrs.do_rotary = 1;
      a.output = want.Mut();
      AttendLayer(cpu, layer, a);

      DeviceMirror m;
      a.query = m.In(a.query);
      if (owns) {
        a.key = m.In(*a.key);
        a.value = m.In(*a.value);
      }
      a.cos_cache = m.In(*a.cos_cache);
      a.sin_cache = m.In(*a.sin_cache);
      a.output = m.Out(got.Mut());
      a.run.device = Device::kCuda;
      ASSERT_NO_THROW(AttendLayer(gpu, layer, a));
      m.CopyBack();
      EXPECT_LT(MaxRelDiff(got.ToFloat(), want.ToFloat()), tolerance);
    }
    cpu.CommitAll();
    gpu.CommitAll();
  }
  for (int layer = 0; layer < 2; ++layer) {  // the owning layers' buffers
    for (const bool key : {true, false}) {
      const LayerKvView c = cpu.Layer(layer), d = gpu.Layer(layer);
      const TensorView& hv = key ? c.key : c.value;
      const TensorView& dv = key ? d.key : d.value;
      std::vector<unsigned char> back(hv.NumBytes());
      ASSERT_EQ(cudaMemcpy(back.data(), dv.data, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      const auto* host = static_cast<const unsigned char*>(hv.data);
      EXPECT_TRUE(std::equal(back.begin(), back.end(), host)) << "layer " << layer << (key ? " K" : " V") << " bytes";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CacheDtypes, CudaCacheDevice,
                         ::testing::Values(DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kQ8_0));

#endif  // KVSHARE_HAVE_CUDA

}  // namespace
}  // namespace kvshare::testing
