// Each kernel override of backend/cuda/tuning.h (REDWING_CUDA_*), set in-process with
// cuda::ScopedTuning as the environment would set it: the launch counts (cuda::PathCount) show
// that the override took the path it names, and the result matches the CPU reference within the
// kernel tests' tolerances (2e-6 for a matvec, 1.5e-5 for a matmul, 1e-5 for attention), or the
// default's bits where the kernels are bit-identical by design. Skips without a GPU; a check
// that needs a given compute capability says so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda_device_util.h"
#include "backend/cuda_test_util.h"
#include "runtime/cuda_model.h"

namespace rw {
namespace {

using cuda::Path;
using cuda::Tuning;
using test::Dev;
using test::HostWeight;
using test::Randn;
using test::RandomWeight;
using test::RelErr;

int ComputeCapability() {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
}

// How many launches took path p while f ran.
uint64_t Taken(Path p, const std::function<void()>& f) {
  const uint64_t before = cuda::PathCount(p);
  f();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return cuda::PathCount(p) - before;
}

cuda::DeviceWeight Upload(const WeightView& v) {
  auto w = cuda::DeviceWeight::Upload(v);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return std::move(*w);
}

// x split as the forward pass splits it (the parts the settings in force choose).
struct Split {
  Dev<uint8_t> scratch;
  cuda::XPlanes xp;
  Split(const Dev<float>& x, int64_t m, int64_t k) : scratch(cuda::SplitXBytes(m, k)) {
    EXPECT_EQ(cuda::LaunchSplitX(x.p(), m, k, scratch.p(), cuda::SplitXBytes(m, k), &xp, nullptr),
              cudaSuccess);
  }
};

// One expert's matrix as a blob (codes, scales, biases at 256-byte aligned offsets) and the
// DevMat of offsets the expert launchers resolve against it.
struct OneBlob {
  // mat before bytes: members are built in this order, and Pack fills mat.
  cuda::DevMat mat;
  Dev<uint8_t> bytes;
  static std::vector<uint8_t> Pack(const HostWeight& h, cuda::DevMat* m) {
    std::vector<uint8_t> out;
    auto put = [&out](const void* src, size_t len) {
      const size_t at = (out.size() + 255) / 256 * 256;
      out.resize(at + len);
      std::memcpy(out.data() + at, src, len);
      return at;
    };
    *m = ToDevMat(h.view);
    m->data = reinterpret_cast<const void*>(put(h.words.data(), h.words.size() * 4));
    m->scales = reinterpret_cast<const uint16_t*>(put(h.scales.data(), h.scales.size() * 2));
    m->biases = reinterpret_cast<const uint16_t*>(put(h.biases.data(), h.biases.size() * 2));
    return out;
  }
  explicit OneBlob(const HostWeight& h) : bytes(Pack(h, &mat)) {}
};

// The prefill product of 64 rows by every route: dense (x split once), and as three expert
// groups of one expert's blob covering the same rows (LaunchExpertMatMul).
struct MatMulCase {
  HostWeight h;
  cuda::DeviceWeight dw;
  std::vector<float> x, want;
  static constexpr int64_t kM = 64, kN = 200, kK = 704;
  explicit MatMulCase(std::mt19937& rng)
      : h(RandomWeight(WeightType::kAffine, kN, kK, 4, 64, rng)),
        dw(Upload(h.view)),
        x(Randn(kM * kK, rng)),
        want(kM * kN) {
    cpu::ref::MatMul(h.view, x.data(), kM, want.data());
  }
  std::vector<float> Dense() const {
    Dev<float> dx(x), dy(std::vector<float>(want.size(), std::nanf("")));
    Split s(dx, kM, kK);
    EXPECT_EQ(cuda::LaunchMatMul(ToDevMat(dw.view()), dx.p(), kM, dy.p(), nullptr, &s.xp),
              cudaSuccess);
    return dy.Get();
  }
  std::vector<float> Experts() const {
    OneBlob blob(h);
    Dev<const uint8_t*> blobs(std::vector<const uint8_t*>(3, blob.bytes.p()));
    Dev<int> row0(std::vector<int>{0, 20, 41}), rows(std::vector<int>{20, 21, 23});
    Dev<float> dx(x), dy(std::vector<float>(want.size(), std::nanf("")));
    Split s(dx, kM, kK);
    const cuda::ExpertMats e{blob.mat, blob.mat, blob.mat};
    EXPECT_EQ(cuda::LaunchExpertMatMul(e, 0, blobs.p(), 3, row0.p(), rows.p(), 23, nullptr, dx.p(),
                                       dy.p(), nullptr, &s.xp, kM),
              cudaSuccess);
    return dy.Get();
  }
};

TEST(CudaTuning, MatVecVariants) {
  REQUIRE_CUDA();
  std::mt19937 rng(41);
  const bool int8 = ComputeCapability() >= 80;
  for (const int bits : {4, 8}) {
    SCOPED_TRACE(bits);
    // q/k/v-like: three matrices sharing x, K a multiple of 64 (the integer kernel's shape).
    const int64_t K = 704, rows[3] = {300, 64, 7};
    std::vector<HostWeight> hw;
    std::vector<cuda::DeviceWeight> dws;
    for (const int64_t r : rows) {
      hw.push_back(RandomWeight(WeightType::kAffine, r, K, bits, 64, rng));
      auto d = cuda::DeviceWeight::Upload(hw.back().view);
      ASSERT_TRUE(d.ok());
      dws.push_back(std::move(*d));
    }
    const std::vector<float> x = Randn(K, rng);
    const cuda::DevMat w[3] = {ToDevMat(dws[0].view()), ToDevMat(dws[1].view()),
                               ToDevMat(dws[2].view())};
    struct Variant {
      cuda::MatVecVariant v;
      Path path;
    };
    const Variant variants[] = {
        {cuda::MatVecVariant::kInt8, int8 ? Path::kMatVecInt8 : Path::kMatVecTiled},
        {cuda::MatVecVariant::kSimt, Path::kMatVecTiled},
        {cuda::MatVecVariant::kGeneric, Path::kMatVecGeneric}};
    std::vector<std::vector<float>> by_variant;
    for (const Variant& var : variants) {
      SCOPED_TRACE(static_cast<int>(var.v));
      Tuning t;
      t.matvec = var.v;
      cuda::ScopedTuning scope(t);
      Dev<float> dx(x), y0(rows[0]), y1(rows[1]), y2(rows[2]), single(rows[0]);
      float* const y[3] = {y0.p(), y1.p(), y2.p()};
      EXPECT_EQ(Taken(var.path,
                      [&] {
                        ASSERT_EQ(cuda::LaunchMatVecMulti(w, y, 3, dx.p(), nullptr), cudaSuccess);
                        ASSERT_EQ(cuda::LaunchMatVec(w[0], dx.p(), single.p(), nullptr),
                                  cudaSuccess);
                      }),
                2u);
      const Dev<float>* outs[3] = {&y0, &y1, &y2};
      for (int i = 0; i < 3; ++i) {
        std::vector<float> want(rows[i]);
        cpu::ref::MatVec(hw[i].view, x.data(), want.data());
        EXPECT_LT(RelErr(outs[i]->Get(), want), 2e-6) << "matrix " << i;
      }
      EXPECT_EQ(single.Get(), y0.Get()) << "one matrix and three give the same rows";
      by_variant.push_back(y0.Get());
    }
    // The register-tiled kernels sum as the generic ones do.
    EXPECT_EQ(by_variant[1], by_variant[2]);
  }
}

TEST(CudaTuning, MatMulVariants) {
  REQUIRE_CUDA();
  const int cc = ComputeCapability();
  if (cc < 80) GTEST_SKIP() << "the tensor-core matmuls need compute capability 8.0";
  std::mt19937 rng(42);
  const MatMulCase c(rng);
  struct Variant {
    const char* name;
    cuda::MatMulVariant v;
    bool wgmma;
    Path path;
  };
  const Variant variants[] = {
      {"planes (default)", cuda::MatMulVariant::kPlanes, true,
       cc == 90 ? Path::kMatMulWgmma : Path::kMatMulPlanes},
      {"REDWING_CUDA_WGMMA=0", cuda::MatMulVariant::kPlanes, false, Path::kMatMulPlanes},
      {"bf16", cuda::MatMulVariant::kBf16, true, Path::kMatMulBf16},
      {"tf32", cuda::MatMulVariant::kTf32, true, Path::kMatMulTf32},
      {"simt", cuda::MatMulVariant::kSimt, true, Path::kMatMulSimt},
  };
  for (const Variant& var : variants) {
    SCOPED_TRACE(var.name);
    Tuning t;
    t.matmul = var.v;
    t.wgmma = var.wgmma;
    cuda::ScopedTuning scope(t);
    std::vector<float> dense, experts;
    EXPECT_EQ(Taken(var.path, [&] { dense = c.Dense(); }), 1u);
    EXPECT_EQ(Taken(var.path, [&] { experts = c.Experts(); }), 1u);
    EXPECT_LT(RelErr(dense, c.want), 1.5e-5);
    EXPECT_LT(RelErr(experts, c.want), 1.5e-5);
  }
}

TEST(CudaTuning, WgmmaTiles) {
  REQUIRE_CUDA();
  if (ComputeCapability() != 90) GTEST_SKIP() << "the warpgroup MMA needs compute capability 9.0";
  std::mt19937 rng(43);
  const MatMulCase c(rng);
  const std::pair<int, Path> tiles[] = {
      {32, Path::kWgmmaTile32}, {64, Path::kWgmmaTile64}, {128, Path::kWgmmaTile128}};
  for (const auto& [tile, path] : tiles) {
    SCOPED_TRACE(tile);
    Tuning dense_tile;
    dense_tile.wgmma_dense_tile = tile;
    {
      cuda::ScopedTuning scope(dense_tile);
      std::vector<float> y;
      EXPECT_EQ(Taken(path, [&] { y = c.Dense(); }), 1u);
      EXPECT_LT(RelErr(y, c.want), 1.5e-5);
    }
    Tuning expert_tile;
    expert_tile.wgmma_expert_tile = tile;
    {
      cuda::ScopedTuning scope(expert_tile);
      std::vector<float> y;
      EXPECT_EQ(Taken(path, [&] { y = c.Experts(); }), 1u);
      EXPECT_LT(RelErr(y, c.want), 1.5e-5);
    }
  }
}

TEST(CudaTuning, StackedProducts) {
  REQUIRE_CUDA();
  if (ComputeCapability() != 90) GTEST_SKIP() << "stacking needs the warpgroup MMA (sm_90)";
  std::mt19937 rng(44);
  const int64_t K = 576, m = 45, rows[3] = {136, 72, 9};
  std::vector<HostWeight> hw;
  std::vector<cuda::DeviceWeight> dws;
  for (const int64_t r : rows) {
    hw.push_back(RandomWeight(WeightType::kAffine, r, K, 4, 64, rng));
    auto d = cuda::DeviceWeight::Upload(hw.back().view);
    ASSERT_TRUE(d.ok());
    dws.push_back(std::move(*d));
  }
  const std::vector<float> x = Randn(m * K, rng);
  const cuda::DevMat w[3] = {ToDevMat(dws[0].view()), ToDevMat(dws[1].view()),
                             ToDevMat(dws[2].view())};
  for (const bool stack : {true, false}) {
    SCOPED_TRACE(stack ? "stacked (default)" : "REDWING_CUDA_STACK=0");
    Tuning t;
    t.stack = stack;
    cuda::ScopedTuning scope(t);
    Dev<float> dx(x);
    Split s(dx, m, K);
    std::vector<Dev<float>> ys;
    for (const int64_t r : rows) ys.emplace_back(std::vector<float>(m * r, std::nanf("")));
    float* const y[3] = {ys[0].p(), ys[1].p(), ys[2].p()};
    const uint64_t one_by_one = cuda::PathCount(Path::kMatMulWgmma);
    EXPECT_EQ(Taken(Path::kMatMulWgmmaStacked,
                    [&] {
                      ASSERT_EQ(cuda::LaunchMatMulMulti(w, y, 3, dx.p(), m, nullptr, &s.xp),
                                cudaSuccess);
                    }),
              stack ? 1u : 0u);
    EXPECT_EQ(cuda::PathCount(Path::kMatMulWgmma) - one_by_one, stack ? 0u : 3u);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> want(m * rows[i]);
      cpu::ref::MatMul(hw[i].view, x.data(), m, want.data());
      EXPECT_LT(RelErr(ys[i].Get(), want), 1.5e-5) << "matrix " << i;
    }
  }
}

TEST(CudaTuning, SplitVariants) {
  REQUIRE_CUDA();
  if (ComputeCapability() < 80) GTEST_SKIP() << "the planes matmul needs compute capability 8.0";
  std::mt19937 rng(45);
  const MatMulCase c(rng);
  for (const int parts : {2, 3}) {
    SCOPED_TRACE(parts == 2 ? "fp16x2 (default)" : "REDWING_CUDA_SPLIT=bf16x3");
    Tuning t;
    t.split_parts = parts;
    cuda::ScopedTuning scope(t);
    Dev<float> dx(c.x);
    EXPECT_EQ(Taken(parts == 2 ? Path::kSplitFp16x2 : Path::kSplitBf16x3,
                    [&] {
                      Split s(dx, MatMulCase::kM, MatMulCase::kK);
                      EXPECT_EQ(s.xp.parts, parts);
                    }),
              1u);
    // Three planes: the planes kernel (the warpgroup MMA takes two).
    std::vector<float> y;
    if (parts == 3) {
      EXPECT_EQ(Taken(Path::kMatMulPlanes, [&] { y = c.Dense(); }), 1u);
    } else {
      y = c.Dense();
    }
    EXPECT_LT(RelErr(y, c.want), 1.5e-5);
  }
}

TEST(CudaTuning, PrefillAttentionVariants) {
  REQUIRE_CUDA();
  std::mt19937 rng(46);
  const int nh = 4, nkv = 2, hd = 64;
  const int64_t window = 16, m = 33, pos0 = 20, cap = 512;
  std::vector<float> kc(int64_t{nkv} * cap * hd, 0.0f), vc = kc;
  for (int64_t p = 0; p < pos0 + m; ++p) {
    const std::vector<float> k = Randn(nkv * hd, rng), v = Randn(nkv * hd, rng);
    cpu::KvStore(kc.data(), vc.data(), nkv, hd, cap, p, k.data(), v.data());
  }
  const std::vector<float> q = Randn(m * nh * hd, rng, 0.3f);
  const cpu::KvCacheView view{kc.data(), vc.data(), nkv, hd, cap};
  std::vector<float> want(q.size());
  cpu::ref::AttendBlock(q.data(), m, pos0, nh, view, window, 1.0f, want.data());
  for (const bool tiled : {true, false}) {
    SCOPED_TRACE(tiled ? "tiled (default)" : "REDWING_CUDA_PREFILL_ATTN=split");
    Tuning t;
    t.tiled_prefill_attention = tiled;
    cuda::ScopedTuning scope(t);
    Dev<float> dq(q), dk(kc), dv(vc), dout(std::vector<float>(q.size(), std::nanf(""))),
        dpart(cuda::AttentionPartialFloats(m, nh, hd, 1));
    Dev<int64_t> dpos(std::vector<int64_t>{pos0});
    EXPECT_EQ(Taken(tiled ? Path::kPrefillAttentionTiled : Path::kPrefillAttentionSplit,
                    [&] {
                      ASSERT_EQ(cuda::LaunchAttention(dq.p(), m, nh, dk.p(), dv.p(), nkv, hd, cap,
                                                      dpos.p(), window, 1.0f, 1, dpart.p(),
                                                      dout.p(), nullptr),
                                cudaSuccess);
                    }),
              1u);
    EXPECT_LT(RelErr(dout.Get(), want), 1e-5);
  }
}

TEST(CudaTuning, OverlappedLaunches) {
  REQUIRE_CUDA();
  const bool sm90 = ComputeCapability() >= 90;
  cuda::SetOverlappedLaunches(true);  // this thread's launches may overlap (the decode setting)
  std::mt19937 rng(47);
  const int64_t n = 5000;
  const std::vector<float> g = Randn(n, rng), u = Randn(n, rng);
  std::vector<std::vector<float>> outs;
  for (const bool pdl : {true, false}) {
    SCOPED_TRACE(pdl ? "PDL (default)" : "REDWING_CUDA_PDL=0");
    Tuning t;
    t.pdl = pdl;
    cuda::ScopedTuning scope(t);
    Dev<float> dg(g), du(u);
    // Two dependent launches: the second reads what the first wrote.
    EXPECT_EQ(Taken(Path::kOverlappedLaunch,
                    [&] {
                      ASSERT_EQ(cuda::LaunchGeglu(dg.p(), du.p(), n, nullptr), cudaSuccess);
                      ASSERT_EQ(cuda::LaunchAdd(dg.p(), du.p(), n, nullptr), cudaSuccess);
                    }),
              pdl && sm90 ? 2u : 0u);
    outs.push_back(dg.Get());
  }
  EXPECT_EQ(outs[0], outs[1]);
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = g[i];
  cpu::ref::GegluInPlace(want.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] += u[i];
  EXPECT_LT(RelErr(outs[0], want), 2e-6);
}

TEST(CudaTuning, RowKernelVariants) {
  REQUIRE_CUDA();
  std::mt19937 rng(48);
  const float eps = 1e-6f;
  const int n = 333, k = 4;
  const int64_t m = 1;
  const std::vector<float> x = Randn(n, rng), o = Randn(n, rng), wa = Randn(n, rng),
                           w1 = Randn(n, rng), w2 = Randn(n, rng), rs = Randn(n, rng),
                           wts = Randn(k, rng), y = Randn(k * n, rng), m1 = Randn(n, rng);
  const std::vector<int> idx = {3, 0, 2, 1};
  std::vector<std::vector<float>> outs[2];
  for (const bool registers : {true, false}) {
    SCOPED_TRACE(registers ? "registers (default)" : "REDWING_CUDA_ROWS=shared");
    Tuning t;
    t.register_rows = registers;
    cuda::ScopedTuning scope(t);
    Dev<float> dwa(wa), dw1(w1), dw2(w2), drs(rs), dox(o), dx(x), a(n), a2(n), r(n);
    Dev<int> di(idx);
    Dev<float> dwts(wts), dy(y), dm1(m1), dx2(x), next(n);
    EXPECT_EQ(Taken(registers ? Path::kRowsRegisters : Path::kRowsShared,
                    [&] {
                      ASSERT_EQ(cuda::LaunchResidualFfnInputs(dx.p(), dox.p(), m, n, dwa.p(),
                                                              dw1.p(), dw2.p(), drs.p(), 0.0625f,
                                                              eps, a.p(), a2.p(), r.p(), nullptr),
                                cudaSuccess);
                      ASSERT_EQ(
                          cuda::LaunchMoeFinishNorm(di.p(), dwts.p(), nullptr, dy.p(), m, k, n,
                                                    drs.p(), dw2.p(), dm1.p(), dw1.p(), dx2.p(),
                                                    eps, 0.5f, dwa.p(), next.p(), nullptr),
                          cudaSuccess);
                    }),
              2u);
    outs[registers ? 0 : 1] = {dx.Get(),  a.Get(),   a2.Get(),  r.Get(),
                               dm1.Get(), dx2.Get(), next.Get()};
  }
  // The same elements per thread and the same reduction order: the same bits.
  for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_EQ(outs[0][i], outs[1][i]) << "output " << i;
}

TEST(CudaTuning, TopKVariants) {
  REQUIRE_CUDA();
  std::mt19937 rng(49);
  const int E = 128, k = 8;
  std::vector<float> logits = Randn(E, rng);
  for (int i = 0; i < 6; ++i) logits[10 + i] = logits[3];  // ties, to the lower index
  const std::vector<float> scale = Randn(E, rng);
  std::vector<std::vector<float>> probs, weights;
  std::vector<std::vector<int>> chosen;
  for (const bool rank : {true, false}) {
    SCOPED_TRACE(rank ? "rank (default)" : "REDWING_CUDA_TOPK=warp");
    Tuning t;
    t.rank_topk = rank;
    cuda::ScopedTuning scope(t);
    Dev<float> dl(logits), dp(E), dscale(scale), dw(k);
    Dev<int> di(k);
    EXPECT_EQ(Taken(rank ? Path::kTopKRank : Path::kTopKWarp,
                    [&] {
                      ASSERT_EQ(cuda::LaunchRouteTopK(dl.p(), dp.p(), 1, E, k, dscale.p(), di.p(),
                                                      dw.p(), nullptr),
                                cudaSuccess);
                    }),
              1u);
    probs.push_back(dp.Get());
    weights.push_back(dw.Get());
    chosen.push_back(di.Get());
  }
  EXPECT_EQ(chosen[0], chosen[1]);
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_EQ(probs[0], probs[1]);
}

}  // namespace
}  // namespace rw
