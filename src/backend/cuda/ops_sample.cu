// Token picking on the GPU, so a decode step's 262,144 logits never cross PCIe: the unfiltered
// Gumbel-max draw at any temperature, with the same counter-based noise as the CPU sampler
// (sample/sampler.cpp: SplitMix64 over seed, position and token, 53 bits offset by half a step,
// −log(−log(u)) in double) and the same winner rule (largest score; equal scores: larger logit,
// then smaller id; NaN logits skipped); and the repetition penalty, applied to the row first.
#include <cuda_runtime.h>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 128;

__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ double Gumbel(uint64_t seed, int64_t position, int token) {
  uint64_t h = Mix(seed ^ 0x5265647769676e21ull);
  h = Mix(h ^ static_cast<uint64_t>(position));
  h = Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) << 1));
  const double u = (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return -log(-log(u));
}

struct Best {
  double score, logit;
  int id;  // -1: none yet
};

__device__ __forceinline__ bool Better(const Best& a, const Best& b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  if (a.score != b.score) return a.score > b.score;
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

__device__ Best BlockBest(Best mine) {
  __shared__ double score[kThreads], logit[kThreads];
  __shared__ int id[kThreads];
  const int t = threadIdx.x;
  score[t] = mine.score;
  logit[t] = mine.logit;
  id[t] = mine.id;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      const Best a{score[t], logit[t], id[t]}, b{score[t + half], logit[t + half], id[t + half]};
      if (Better(b, a)) {
        score[t] = b.score;
        logit[t] = b.logit;
        id[t] = b.id;
      }
    }
    __syncthreads();
  }
  return Best{score[0], logit[0], id[0]};
}

__global__ void GumbelPartial(const float* logits, int n, uint64_t seed, int64_t position,
                              double temperature, Best* partial) {
  PdlEnter();
  Best mine{0, 0, -1};
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    const float z = logits[i];
    if (isnan(z)) continue;
    const double logit = static_cast<double>(z) / temperature;  // as the CPU sampler divides
    const Best c{logit + Gumbel(seed, position, i), logit, i};
    if (Better(c, mine)) mine = c;
  }
  const Best b = BlockBest(mine);
  if (threadIdx.x == 0) partial[blockIdx.x] = b;
}

__global__ void GumbelFinal(const Best* partial, int n, int* out) {
  PdlEnter();
  Best mine{0, 0, -1};
  for (int i = threadIdx.x; i < n; i += kThreads)
    if (Better(partial[i], mine)) mine = partial[i];
  const Best b = BlockBest(mine);
  if (threadIdx.x == 0) *out = b.id < 0 ? 0 : b.id;
}

__global__ void RepetitionPenaltyKernel(float* logits, int n, const int* ids, int count,
                                        float penalty) {
  PdlEnter();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const int id = ids[i];
    if (id < 0 || id >= n) continue;
    const float v = logits[id];
    logits[id] = v > 0 ? v / penalty : v * penalty;
  }
}

}  // namespace

cudaError_t LaunchRepetitionPenalty(float* logits, int64_t n, const int* ids, int count,
                                    float penalty, cudaStream_t s) {
  if (count <= 0) return cudaSuccess;
  LaunchKernel(RepetitionPenaltyKernel, static_cast<unsigned>((count + 255) / 256), 256, 0, s,
               logits, static_cast<int>(n), ids, count, penalty);
  return cudaGetLastError();
}

size_t GumbelSampleScratchBytes() {
  return sizeof(Best) * kBlocks;
}

cudaError_t LaunchGumbelSample(const float* logits, int64_t n, uint64_t seed, int64_t position,
                               double temperature, void* scratch, int* out, cudaStream_t s) {
  Best* partial = static_cast<Best*>(scratch);
  LaunchKernel(GumbelPartial, kBlocks, kThreads, 0, s, logits, static_cast<int>(n), seed, position,
               temperature, partial);
  LaunchKernel(GumbelFinal, 1, kThreads, 0, s, partial, kBlocks, out);
  return cudaGetLastError();
}

}  // namespace rw::cuda
