// The GPU's top-k cut of a row of logits (cuda::LaunchTopKCandidates) against a full sort on the
// host: rows of the real vocabulary's size and small ones, ties at the k-th value, NaN and -inf,
// and rows with more ties than the kernel keeps. Skips (saying why) where no CUDA device is
// usable, e.g. in CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/cuda/ops.h"
#include "backend/cuda_test_util.h"

namespace rw {
namespace {

// (id, value) of every non-NaN logit at or above the k-th largest, by value then id.
std::vector<std::pair<int, float>> Reference(const std::vector<float>& l, int k) {
  std::vector<std::pair<int, float>> all;
  for (int i = 0; i < static_cast<int>(l.size()); ++i)
    if (!std::isnan(l[i])) all.push_back({i, l[i]});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  });
  if (static_cast<int>(all.size()) <= k) return all;
  const float floor = all[static_cast<size_t>(k - 1)].second;
  size_t keep = static_cast<size_t>(k);
  while (keep < all.size() && all[keep].second == floor) ++keep;
  all.resize(keep);
  return all;
}

TEST(CudaTopK, CandidatesEqualAFullSort) {
  REQUIRE_CUDA();
  std::mt19937 rng(5);
  auto scratch = cuda::DeviceBuffer::Alloc(cuda::TopKScratchBytes());
  ASSERT_TRUE(scratch.ok());
  constexpr int kCap = 1024;
  auto out = cuda::DeviceBuffer::Alloc((1 + 2 * kCap) * 4);
  ASSERT_TRUE(out.ok());
  int cases = 0;
  for (int n : {262144, 100000, 2049, 300, 17})
    for (int k : {1, 5, 64})
      for (int kind = 0; kind < 3; ++kind) {
        SCOPED_TRACE(fmt::format("n {} k {} kind {}", n, k, kind));
        std::vector<float> l(static_cast<size_t>(n));
        std::normal_distribution<float> nd(0.0f, 4.0f);
        for (float& v : l) v = nd(rng);
        if (kind == 1)  // coarse: ties everywhere, the k-th value's too
          for (float& v : l) v = std::round(v * 4.0f) / 4.0f;
        if (kind == 2) {  // NaN and -inf sprinkled
          for (int i = 0; i < n; i += 97) l[static_cast<size_t>(i)] = std::nanf("");
          for (int i = 3; i < n; i += 89) l[static_cast<size_t>(i)] = -INFINITY;
          l[static_cast<size_t>(n / 2)] = std::nanf("");
        }
        auto dl = cuda::DeviceBuffer::Alloc(l.size() * 4);
        ASSERT_TRUE(dl.ok());
        ASSERT_TRUE(dl->CopyFromHost(l.data(), l.size() * 4).ok());
        int* o = static_cast<int*>(out->data());
        ASSERT_EQ(cuda::LaunchTopKCandidates(static_cast<const float*>(dl->data()), n, k,
                                             scratch->data(), kCap, o + 1,
                                             reinterpret_cast<float*>(o + 1 + kCap), o, nullptr),
                  cudaSuccess);
        std::vector<int> h(1 + 2 * kCap);
        ASSERT_TRUE(out->CopyToHost(h.data(), h.size() * 4).ok());
        const auto want = Reference(l, k);
        ASSERT_EQ(h[0], static_cast<int>(want.size()));
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(h[1 + i], want[i].first) << "rank " << i;
          float v;
          std::memcpy(&v, &h[1 + kCap + i], 4);
          EXPECT_EQ(v, want[i].second) << "rank " << i;
        }
        ++cases;
      }
  EXPECT_EQ(cases, 45);
}

TEST(CudaTopK, TiesBeyondWhatAChunkKeepsAreReported) {
  REQUIRE_CUDA();
  // Every logit equal: each 2,048-logit chunk would keep all of them.
  const int n = 10000;
  std::vector<float> l(static_cast<size_t>(n), 1.5f);
  auto dl = cuda::DeviceBuffer::Alloc(l.size() * 4);
  auto scratch = cuda::DeviceBuffer::Alloc(cuda::TopKScratchBytes());
  auto out = cuda::DeviceBuffer::Alloc((1 + 2 * 16) * 4);
  ASSERT_TRUE(dl.ok() && scratch.ok() && out.ok());
  ASSERT_TRUE(dl->CopyFromHost(l.data(), l.size() * 4).ok());
  int* o = static_cast<int*>(out->data());
  ASSERT_EQ(cuda::LaunchTopKCandidates(static_cast<const float*>(dl->data()), n, 8, scratch->data(),
                                       16, o + 1, reinterpret_cast<float*>(o + 17), o, nullptr),
            cudaSuccess);
  int count = 0;
  ASSERT_TRUE(out->CopyToHost(&count, 4).ok());
  EXPECT_EQ(count, INT_MAX);
  // Out of range: k beyond kMaxTopK, an empty row.
  EXPECT_EQ(cuda::LaunchTopKCandidates(static_cast<const float*>(dl->data()), n, cuda::kMaxTopK + 1,
                                       scratch->data(), 16, o + 1, reinterpret_cast<float*>(o + 17),
                                       o, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rw
