// The host-side plan of the Hopper prefill kernel (src/cuda/attend_wgmma_plan.h),
// on any machine: tile shapes within Hopper's shared memory, the TMA tensor
// maps of K and V (every element's address through the map equals the
// source's own formula), which calls the kernel takes and why it refuses the
// others, and the split of the key axis.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/attend_wgmma_plan.h"

#if KVSHARE_HAVE_CUDA
#include <cstdlib>

#include "cuda/attend_wgmma_cuda.h"
#endif

namespace kvshare::detail {
namespace {

constexpr int kHopperSmemPerBlock = 227 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin on H100 / H200

TEST(CudaWgmmaPlan, ShapesFitHopper) {
  for (const int H : {128, 256, 512}) {
    SCOPED_TRACE("H " + std::to_string(H));
    const WgmmaShape s = WgmmaShapeFor(H);
    EXPECT_LE(s.smem_bytes, kHopperSmemPerBlock);
    EXPECT_EQ(s.rows * s.dim_groups, 128) << "two consumer warpgroups of 64 rows";
    EXPECT_EQ(s.keys_per_tile % 16, 0) << "P V steps of 16 keys";
    EXPECT_LE(s.keys_per_tile, 256) << "wgmma N and the TMA box";
    EXPECT_EQ((H / s.dim_groups) % 128, 0) << "P V in wgmma of N = 128";
    EXPECT_LE(H / s.dim_groups, 256) << "a consumer's accumulators: at most 64 x 256 fp32";
  }
}

// Element (b, n, j, d) of s through the plan: the byte offset TMA reads.
std::uint64_t PlanOffset(const KvTensorMapPlan& p, int b, int n, std::int64_t j, int d) {
  std::uint64_t coord[3];
  coord[p.slot_key] = static_cast<std::uint64_t>(j);
  coord[p.slot_head] = static_cast<std::uint64_t>(n);
  coord[p.slot_batch] = static_cast<std::uint64_t>(b);
  std::uint64_t off = static_cast<std::uint64_t>(d) * 2;
  for (int i = 0; i < 3; ++i) off += coord[i] * p.strides_bytes[i];
  return off;
}

void ExpectMapMatchesSource(const KvSource& s, int H, int Nkv, int B, std::int64_t T, int kt, const std::string& what) {
  SCOPED_TRACE(what);
  KvTensorMapPlan plan;
  ASSERT_EQ(PlanKvTensorMap(s, H, Nkv, B, T, kt, &plan), "");
  EXPECT_EQ(plan.dims[0], static_cast<std::uint64_t>(H));
  EXPECT_EQ(plan.box[0], 64u);
  EXPECT_EQ(plan.dims[1 + plan.slot_key], static_cast<std::uint64_t>(T));
  EXPECT_EQ(plan.dims[1 + plan.slot_head], static_cast<std::uint64_t>(Nkv));
  EXPECT_EQ(plan.dims[1 + plan.slot_batch], static_cast<std::uint64_t>(B));
  EXPECT_EQ(plan.box[1 + plan.slot_key], static_cast<std::uint32_t>(kt));
  EXPECT_EQ(plan.box[1 + plan.slot_head], 1u);
  EXPECT_EQ(plan.box[1 + plan.slot_batch], 1u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.strides_bytes[i] % 16, 0u) << "stride " << i;
    if (i > 0 && plan.dims[i + 1] > 1) {
      EXPECT_GE(plan.strides_bytes[i], plan.strides_bytes[i - 1]) << "outer dims by increasing stride";
    }
  }
  std::mt19937_64 g(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int b = static_cast<int>(g() % B), n = static_cast<int>(g() % Nkv), d = static_cast<int>(g() % H);
    const std::int64_t j = static_cast<std::int64_t>(g() % T);
    const std::uint64_t want =
        2 * static_cast<std::uint64_t>(b * s.batch_stride + n * s.head_stride + j * s.row_stride + d);
    ASSERT_EQ(PlanOffset(plan, b, n, j, d), want) << "b " << b << " n " << n << " j " << j << " d " << d;
  }
}

TEST(CudaWgmmaPlan, TensorMapsAddressEveryLayout) {
  alignas(16) static unsigned char buf[16];
  for (const int H : {128, 256, 512}) {
    const int kt = WgmmaShapeFor(H).keys_per_tile;
    for (const auto& [B, Nkv, T, C] : {std::tuple{3, 2, 450, 512}, std::tuple{1, 1, 37, 64}, std::tuple{2, 8, 1, 5}}) {
      const std::string shape = "H " + std::to_string(H) + " B " + std::to_string(B) + " N_kv " + std::to_string(Nkv) +
                                " T " + std::to_string(T);
      // BNSH [B, N_kv, C, H] (a cache of capacity C).
      const std::int64_t h = H, c = C, nk = Nkv;
      ExpectMapMatchesSource(KvSource{buf, DType::kFloat16, nk * c * h, c * h, h, 0}, H, Nkv, B, T, kt,
                             "BNSH " + shape);
      // BSNH [B, C, N_kv * H] (external K/V, a 3-D scatter cache).
      ExpectMapMatchesSource(KvSource{buf, DType::kBFloat16, c * nk * h, h, nk * h, 0}, H, Nkv, B, T, kt,
                             "BSNH " + shape);
    }
  }
  // One row with a batch stride of 0 (never stepped).
  ExpectMapMatchesSource(KvSource{buf, DType::kFloat16, 0, 64 * 128, 128, 0}, 128, 2, 1, 64, 128, "B = 1, stride 0");
}

TEST(CudaWgmmaPlan, TensorMapRefusalsSayWhy) {
  alignas(16) static unsigned char buf[32];
  KvTensorMapPlan plan;
  const KvSource ok{buf, DType::kFloat16, 2 * 512 * 128, 512 * 128, 128, 0};
  EXPECT_EQ(PlanKvTensorMap(ok, 128, 2, 3, 450, 128, &plan), "");
  KvSource ring = ok;
  ring.ring_capacity = 512;
  EXPECT_NE(PlanKvTensorMap(ring, 128, 2, 3, 450, 128, &plan).find("ring"), std::string::npos);
  KvSource misaligned = ok;
  misaligned.data = buf + 2;
  EXPECT_NE(PlanKvTensorMap(misaligned, 128, 2, 3, 450, 128, &plan).find("16-byte aligned"), std::string::npos);
  KvSource odd_stride = ok;
  odd_stride.row_stride = 132;  // 264 bytes
  EXPECT_NE(PlanKvTensorMap(odd_stride, 128, 2, 3, 450, 128, &plan).find("multiple of 16 bytes"), std::string::npos);
  KvSource zero_stride = ok;
  zero_stride.head_stride = 0;
  EXPECT_NE(PlanKvTensorMap(zero_stride, 128, 2, 3, 450, 128, &plan).find("stride of 0"), std::string::npos);
}

// A prefill call the kernel takes: B 2, S 256, N 8 on N_kv 2, H 128, fp16
// BNSH cache of capacity 1024.
struct PrefillParams {
  alignas(16) unsigned char kv[16] = {};
  std::int64_t kv_len[2] = {1000, 600}, q_offset[2] = {744, 344}, valid_q[2] = {256, 256};
  AttendParams p;
  PrefillParams() {
    p.batch = 2;
    p.q_len = 256;
    p.num_heads = 8;
    p.kv_heads = 2;
    p.head_size = 128;
    p.k = KvSource{kv, DType::kFloat16, 2 * 1024 * 128, 1024 * 128, 128, 0};
    p.v = p.k;
    p.kv_len = kv_len;
    p.q_offset = q_offset;
    p.valid_q = valid_q;
  }
};

TEST(CudaWgmmaPlan, TakesPrefillOnSm90Only) {
  PrefillParams c;
  EXPECT_EQ(WgmmaRefusal(c.p, 1000, 9, 0), "");
  for (const int H : {256, 512}) {
    AttendParams p = c.p;
    p.head_size = H;
    p.k.batch_stride = p.v.batch_stride = 2 * 1024 * H;
    p.k.head_stride = p.v.head_stride = 1024 * H;
    p.k.row_stride = p.v.row_stride = H;
    EXPECT_EQ(WgmmaRefusal(p, 1000, 9, 0), "") << "H " << H;
  }
  EXPECT_NE(WgmmaRefusal(c.p, 1000, 8, 9).find("not 9.0"), std::string::npos);
  EXPECT_NE(WgmmaRefusal(c.p, 1000, 10, 0).find("not 9.0"), std::string::npos);
  const auto refusal = [&](auto change) {
    AttendParams p = c.p;
    change(p);
    return WgmmaRefusal(p, 1000, 9, 0);
  };
  EXPECT_NE(refusal([](AttendParams& p) { p.qk_mode = 1; }).find("output_qk"), std::string::npos);
  int bias = 0;
  EXPECT_NE(refusal([&](AttendParams& p) { p.bias.data = &bias; }).find("attention_bias"), std::string::npos);
  EXPECT_NE(refusal([](AttendParams& p) { p.v.dtype = DType::kBFloat16; }).find("both fp16"), std::string::npos);
  EXPECT_NE(refusal([](AttendParams& p) { p.k.dtype = p.v.dtype = DType::kFloat32; }).find("both fp16"),
            std::string::npos);
  EXPECT_NE(refusal([](AttendParams& p) { p.head_size = 64; }).find("head size 64"), std::string::npos);
  // Decode: S * G < 64 (here 15 * 4 = 60); 16 * 4 = 64 is a prefill.
  EXPECT_NE(refusal([](AttendParams& p) { p.q_len = 15; }).find("decode shape"), std::string::npos);
  EXPECT_EQ(refusal([](AttendParams& p) { p.q_len = 16; }), "");
  EXPECT_NE(refusal([](AttendParams& p) { p.v.ring_capacity = 1024; }).find("ring"), std::string::npos);
  // Fewer keys than a tile (the TMA box along the keys): 127 at H 128, 63
  // at H 256; a whole tile is taken.
  EXPECT_NE(WgmmaRefusal(c.p, 127, 9, 0).find("fewer than a tile of 128"), std::string::npos);
  EXPECT_EQ(WgmmaRefusal(c.p, 128, 9, 0), "");
  AttendParams h256 = c.p;
  h256.head_size = 256;
  h256.k.batch_stride = h256.v.batch_stride = 2 * 1024 * 256;
  h256.k.head_stride = h256.v.head_stride = 1024 * 256;
  h256.k.row_stride = h256.v.row_stride = 256;
  EXPECT_NE(WgmmaRefusal(h256, 63, 9, 0).find("fewer than a tile of 64"), std::string::npos);
  EXPECT_EQ(WgmmaRefusal(h256, 64, 9, 0), "");
}

TEST(CudaWgmmaPlan, KeySplitsFillTheGpu) {
  PrefillParams c;
  const int sms = 132;
  for (const std::int64_t T : {1, 127, 128, 1000, 16384}) {
    for (const int S : {16, 256, 4096}) {
      AttendParams p = c.p;
      p.q_len = S;
      const WgmmaSplit s = WgmmaSplitFor(p, T, sms);
      SCOPED_TRACE("T " + std::to_string(T) + " S " + std::to_string(S));
      EXPECT_GE(s.key_splits, 1);
      EXPECT_LE(s.key_splits, kWgmmaMaxKeySplits);
      EXPECT_GE(s.per_split * s.key_splits, T) << "every key in a split";
      EXPECT_LT((s.key_splits - 1) * s.per_split, std::max<std::int64_t>(T, 1)) << "no split wholly past the keys";
      EXPECT_GE(static_cast<std::int64_t>(s.m_tiles) * WgmmaShapeFor(128).rows, WgmmaMRows(p)) << "every M-row";
      EXPECT_LT(static_cast<std::int64_t>(s.m_tiles - 1) * WgmmaShapeFor(128).rows, WgmmaMRows(p));
    }
  }
  // Many blocks: one split; few blocks over many keys: several.
  AttendParams big = c.p;
  big.q_len = 16384;
  EXPECT_EQ(WgmmaSplitFor(big, 16384, sms).key_splits, 1);
  AttendParams small = c.p;
  small.q_len = 16;
  EXPECT_GT(WgmmaSplitFor(small, 16384, sms).key_splits, 1);
}

#if KVSHARE_HAVE_CUDA

// KVSHARE_CUDA_PREFILL names the path (read again after ResetPrefillPath);
// SetPrefillPath overrides it.
TEST(CudaWgmmaPlan, PrefillPathFollowsTheEnvironment) {
  const char* saved = std::getenv("KVSHARE_CUDA_PREFILL");
  const std::string before = saved != nullptr ? saved : "";
  const std::pair<const char*, PrefillPath> cases[] = {{"mma", PrefillPath::kMma},
                                                       {"workspace", PrefillPath::kWorkspace},
                                                       {"nooverlap", PrefillPath::kNoOverlap},
                                                       {"auto", PrefillPath::kAuto},
                                                       {"", PrefillPath::kAuto}};
  for (const auto& [value, path] : cases) {
    setenv("KVSHARE_CUDA_PREFILL", value, 1);
    ResetPrefillPath();
    EXPECT_EQ(CurrentPrefillPath(), path) << "KVSHARE_CUDA_PREFILL=" << value;
  }
  SetPrefillPath(PrefillPath::kMma);
  EXPECT_EQ(CurrentPrefillPath(), PrefillPath::kMma);
  if (saved != nullptr) {
    setenv("KVSHARE_CUDA_PREFILL", before.c_str(), 1);
  } else {
    unsetenv("KVSHARE_CUDA_PREFILL");
  }
  ResetPrefillPath();
}

// Where the device is not of compute capability 9.0 (or there is none, as
// on a machine without a GPU) the Hopper kernel refuses every call and says
// why; the mma path refuses before looking at the device.
TEST(CudaWgmmaPlan, PrepareRefusesOffHopper) {
  PrefillParams c;
  SetPrefillPath(PrefillPath::kMma);
  EXPECT_FALSE(PrepareWgmma(c.p, 1000).has_value());
  EXPECT_NE(LastWgmmaRefusal().find("mma prefill path"), std::string::npos) << LastWgmmaRefusal();
  ResetPrefillPath();
  int dev = 0, major = 0, minor = 0;
  const bool hopper = cudaGetDevice(&dev) == cudaSuccess &&
                      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
                      major == 9 && minor == 0;
  cudaGetLastError();
  if (hopper || CurrentPrefillPath() != PrefillPath::kAuto) GTEST_SKIP() << "a Hopper device, or a path forced";
  EXPECT_FALSE(PrepareWgmma(c.p, 1000).has_value());
  EXPECT_NE(LastWgmmaRefusal().find("not 9.0"), std::string::npos) << LastWgmmaRefusal();
}

#endif  // KVSHARE_HAVE_CUDA

}  // namespace
}  // namespace kvshare::detail
