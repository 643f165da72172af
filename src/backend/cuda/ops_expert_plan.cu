// A prefill chunk's expert plan on the GPU: the (token, choice) pairs grouped by expert, so the
// grouped matmuls read each expert's weights once for all its tokens. The host built the same
// plan after reading the routing back, one sync per layer (31 a 512-token chunk); with every
// expert resident nothing else needs the host, so the plan stays on the GPU.
//
// One block of 32 warps; warp w takes the w-th of 32 contiguous segments of the pairs. Pass 1:
// per warp and expert, its segment's count (lanes of one expert found by __match_any_sync, the
// lowest adds). Then per expert, the running sum over the experts before it and the warps before
// it gives each (warp, expert) its first row. Pass 2: each warp walks its segment in order and
// gives each pair the next row of its expert. Rows within an expert follow pair (token) order,
// as in the host's plan.
#include <cuda_runtime.h>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

constexpr int kPlanWarps = 32;

__global__ void __launch_bounds__(32 * kPlanWarps)
    ExpertPlanKernel(const int* idx, int pairs, int k, int experts, int* gather, int* row_of,
                     int* row0, int* rows) {
  PdlEnter();
  __shared__ int cursor[kPlanWarps][kMaxPlanExperts];  // counts, then each warp's next row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seg = (pairs + kPlanWarps - 1) / kPlanWarps;
  const int i_begin = warp * seg, i_end = min(pairs, i_begin + seg);
  const unsigned below = (1u << lane) - 1u;
  for (int e = lane; e < experts; e += 32) cursor[warp][e] = 0;
  __syncwarp();
  for (int i0 = i_begin; i0 < i_end; i0 += 32) {
    const int i = i0 + lane;
    const int e = i < i_end ? idx[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && (same & below) == 0) cursor[warp][e] += __popc(same);
  }
  __syncthreads();
  __shared__ int total[kMaxPlanExperts], first[kMaxPlanExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int n = 0;
    for (int w = 0; w < kPlanWarps; ++w) n += cursor[w][e];
    total[e] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < experts; ++e) {
      first[e] = run;
      run += total[e];
    }
  }
  __syncthreads();
  // Each (warp, expert)'s first row: the expert's first row plus the earlier warps' counts.
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    row0[e] = first[e];
    rows[e] = total[e];
    int run = first[e];
    for (int w = 0; w < kPlanWarps; ++w) {
      const int c = cursor[w][e];
      cursor[w][e] = run;
      run += c;
    }
  }
  __syncthreads();
  for (int i0 = i_begin; i0 < i_end; i0 += 32) {
    const int i = i0 + lane;
    const int e = i < i_end ? idx[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (e >= 0) {
      const int r = cursor[warp][e] + __popc(same & below);
      gather[r] = i / k;
      row_of[i] = r;
    }
    __syncwarp();
    if (e >= 0 && (same & below) == 0) cursor[warp][e] += __popc(same);
    __syncwarp();
  }
}

}  // namespace

cudaError_t LaunchExpertPlan(const int* idx, int64_t m, int k, int num_experts, int* gather,
                             int* row_of, int* row0, int* rows, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k <= 0 || num_experts <= 0 || num_experts > kMaxPlanExperts || m * k >= (int64_t{1} << 30))
    return cudaErrorInvalidValue;
  CountPath(Path::kExpertPlanGpu);
  LaunchKernel(ExpertPlanKernel, 1, 32 * kPlanWarps, 0, s, idx, static_cast<int>(m * k), k,
               num_experts, gather, row_of, row0, rows);
  return cudaGetLastError();
}

}  // namespace rw::cuda
