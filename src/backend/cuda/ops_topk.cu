// The top-k candidates of a row of logits on the GPU: every logit at or above the k-th largest
// (NaN skipped; every non-NaN logit when there are fewer than k), as (id, value) pairs. The
// sampler's filtered path (top-k, then top-p / min-p / temperature on what is left) needs no
// more, so a decode step copies a few hundred bytes instead of 262,144 logits.
//
// Two stages, both deterministic: blocks sort chunks of 2,048 logits (bitonic, descending by
// value, then ascending id) and keep their chunk's k largest and the ties of the k-th, which is
// a superset of the row's answer within that chunk (an element at or above the row's k-th
// largest has fewer than k larger elements anywhere, so also in its chunk); one block then sorts
// what the chunks kept and cuts at the k-th value.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

constexpr int kChunk = 2048;         // logits per stage-1 block
constexpr int kThreads1 = 1024;      // stage-1 threads (two keys each)
constexpr int kKeep = 2 * kMaxTopK;  // at most this many kept per chunk (more: overflow)
constexpr int kMaxChunks = 256;      // rows up to 524,288 logits
constexpr int kThreads2 = 1024;

// A sort key that orders by value descending, then id ascending, as unsigned descending: the
// float made monotone in the high word (NaN: 0, below -inf), the complemented id in the low.
__device__ __forceinline__ uint64_t KeyOf(float v, int id) {
  uint32_t b = __float_as_uint(v);
  b = isnan(v) ? 0u : (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
__device__ __forceinline__ uint32_t ValueBits(uint64_t key) {
  return static_cast<uint32_t>(key >> 32);
}
__device__ __forceinline__ float ValueOf(uint64_t key) {
  const uint32_t b = ValueBits(key);
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7FFFFFFFu) : ~b);
}
__device__ __forceinline__ int IdOf(uint64_t key) {
  return static_cast<int>(~static_cast<uint32_t>(key));
}

// Sorts keys[0..n) descending (n a power of two, every thread of the block calls it).
__device__ void BitonicSortDesc(uint64_t* keys, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a < b) == desc) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
      __syncthreads();
    }
  }
}

// How many of the sorted keys[0..n) to keep for top-k: through the ties of the k-th non-NaN
// value, or every non-NaN one when there are fewer than k. Both ends are found in parallel as
// the one index where a run ends (every thread of the block calls it).
__device__ int KeepCount(const uint64_t* keys, int n, int k) {
  __shared__ int valid, keep;
  if (threadIdx.x == 0) valid = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)  // NaN sorts last
    if (ValueBits(keys[i]) != 0u && (i + 1 == n || ValueBits(keys[i + 1]) == 0u)) valid = i + 1;
  __syncthreads();
  const int v = valid;
  if (threadIdx.x == 0) keep = v;
  __syncthreads();
  if (v >= k) {
    const uint32_t floor = ValueBits(keys[k - 1]);
    for (int i = k - 1 + threadIdx.x; i < v; i += blockDim.x)
      if (ValueBits(keys[i]) == floor && (i + 1 == v || ValueBits(keys[i + 1]) != floor))
        keep = i + 1;
    __syncthreads();
  }
  const int r = keep;
  __syncthreads();  // keep and valid are rewritten by the next call
  return r;
}

__global__ void __launch_bounds__(kThreads1)
    TopKChunks(const float* logits, int n, int k, uint64_t* kept, int* counts) {
  PdlEnter();
  __shared__ uint64_t keys[kChunk];
  const int base = blockIdx.x * kChunk;
  for (int i = threadIdx.x; i < kChunk; i += blockDim.x)
    keys[i] = base + i < n ? KeyOf(logits[base + i], base + i) : 0u;
  __syncthreads();
  BitonicSortDesc(keys, kChunk);
  const int keep = KeepCount(keys, kChunk, k);
  for (int i = threadIdx.x; i < keep && i < kKeep; i += blockDim.x)
    kept[static_cast<int64_t>(blockIdx.x) * kKeep + i] = keys[i];
  if (threadIdx.x == 0) counts[blockIdx.x] = keep;
}

__global__ void __launch_bounds__(kThreads2)
    TopKMerge(const uint64_t* kept, const int* counts, int chunks, int k, int cap, int* out_ids,
              float* out_vals, int* out_count) {
  PdlEnter();
  extern __shared__ uint64_t all[];
  __shared__ int len[kMaxChunks], offset[kMaxChunks + 1];
  __shared__ bool overflow;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) len[c] = counts[c];
  if (threadIdx.x == 0) overflow = false;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int c = 0; c < chunks; ++c) {
      offset[c] = total;
      if (len[c] > kKeep) overflow = true;
      total += len[c] < kKeep ? len[c] : kKeep;
    }
    offset[chunks] = total;
  }
  __syncthreads();
  if (overflow) {  // ties beyond what a chunk may keep: the caller copies the whole row
    if (threadIdx.x == 0) *out_count = INT_MAX;
    return;
  }
  const int total = offset[chunks];
  int padded = 1;
  while (padded < total) padded <<= 1;
  for (int e = threadIdx.x; e < chunks * kKeep; e += blockDim.x) {
    const int c = e / kKeep, i = e % kKeep;
    if (i < len[c]) all[offset[c] + i] = kept[e];
  }
  for (int i = total + threadIdx.x; i < padded; i += blockDim.x) all[i] = 0u;
  __syncthreads();
  BitonicSortDesc(all, padded);
  const int keep = KeepCount(all, total, k);
  for (int i = threadIdx.x; i < keep && i < cap; i += blockDim.x) {
    out_ids[i] = IdOf(all[i]);
    out_vals[i] = ValueOf(all[i]);
  }
  if (threadIdx.x == 0) *out_count = keep;
}

}  // namespace

size_t TopKScratchBytes() {
  return static_cast<size_t>(kMaxChunks) * (kKeep * sizeof(uint64_t) + sizeof(int));
}

cudaError_t LaunchTopKCandidates(const float* logits, int64_t n, int k, void* scratch, int cap,
                                 int* out_ids, float* out_vals, int* out_count, cudaStream_t s) {
  if (k < 1 || k > kMaxTopK || n < 1 || cap < 1) return cudaErrorInvalidValue;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks > kMaxChunks) return cudaErrorNotSupported;
  auto* kept = static_cast<uint64_t*>(scratch);
  int* counts = reinterpret_cast<int*>(kept + static_cast<int64_t>(kMaxChunks) * kKeep);
  // Stage 2 sorts up to chunks·kKeep keys (rounded to a power of two) in shared memory.
  int64_t padded = 1;
  while (padded < chunks * kKeep) padded <<= 1;
  const size_t smem = static_cast<size_t>(padded) * sizeof(uint64_t);
  static const cudaError_t attr =
      cudaFuncSetAttribute(TopKMerge, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  if (attr != cudaSuccess || smem > 200 * 1024) return cudaErrorNotSupported;
  LaunchKernel(TopKChunks, static_cast<unsigned>(chunks), kThreads1, 0, s, logits,
               static_cast<int>(n), k, kept, counts);
  LaunchKernel(TopKMerge, 1, kThreads2, smem, s, kept, counts, static_cast<int>(chunks), k, cap,
               out_ids, out_vals, out_count);
  return cudaGetLastError();
}

}  // namespace rw::cuda
