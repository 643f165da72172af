// Host side of launch.cuh: whether launches overlap (PDL), and how many blocks of a kernel the
// GPU holds at once.
#include "backend/cuda/launch.cuh"

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {
thread_local bool t_pdl = true;
}  // namespace

void SetOverlappedLaunches(bool on) {
  t_pdl = on;
}

bool PdlEnabled() {
  static const bool supported = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 9;
  }();
  return supported && t_pdl && CurrentTuning().pdl;
}

unsigned ResidentBlocks(const void* kernel, int threads, size_t smem) {
  // Asked on every launch of the matvec kernels (outside graphs, ~200 times a token): the
  // answer depends only on the kernel, the block and the device, so it is kept.
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int>, unsigned> known;
  int dev = 0;
  cudaGetDevice(&dev);
  const auto key = std::make_tuple(kernel, threads, smem, dev);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  const unsigned n = static_cast<unsigned>((sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1));
  known.emplace(key, n);
  return n;
}

}  // namespace rw::cuda
