// Measures the memory ceilings the CUDA backend's numbers are compared against: device memory
// read bandwidth (a streaming read kernel), device-to-device copy (read + write counted),
// host-to-device copy over PCIe from pinned and from pageable memory, a kernel reading pinned
// (registered, read-only, mapped) host memory in place as the mapped expert path does, alone and
// beside a copy, and the host's own memory read rate with every core (the CPU-hybrid's bound).
// Build: nvcc -O3 -arch=sm_90 -o copy_ceiling tools/cuda/copy_ceiling.cu
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define CK(x)                                                      \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

__global__ void ReadAll(const float4* p, size_t n, float* out) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldg(p + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.678f) *out = acc;  // keeps the loads
}

template <typename F>
float TimeMs(F f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

int main() {
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("device: %s, %d SMs, %.0f GiB\n", p.name, p.multiProcessorCount,
              p.totalGlobalMem / double(1ull << 30));
  const size_t bytes = 4ull << 30;
  void *a = nullptr, *b = nullptr;
  float* out = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&out, 4));
  CK(cudaMemset(a, 0, bytes));
  const float read_ms = TimeMs(
      [&] {
        ReadAll<<<p.multiProcessorCount * 8, 512>>>(static_cast<const float4*>(a), bytes / 16, out);
      },
      10);
  std::printf("device read: %.0f GB/s\n", bytes / read_ms / 1e6);
  const float copy_ms = TimeMs([&] { CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 5);
  std::printf("device copy (read + write): %.0f GB/s\n", 2.0 * bytes / copy_ms / 1e6);
  const size_t hbytes = 1ull << 30;
  void* pinned = nullptr;
  CK(cudaMallocHost(&pinned, hbytes));
  std::memset(pinned, 1, hbytes);
  const float h2d_ms =
      TimeMs([&] { CK(cudaMemcpy(a, pinned, hbytes, cudaMemcpyHostToDevice)); }, 5);
  std::printf("host to device, pinned: %.1f GB/s\n", hbytes / h2d_ms / 1e6);
  void* pageable = std::malloc(hbytes);
  std::memset(pageable, 1, hbytes);
  const float pg_ms =
      TimeMs([&] { CK(cudaMemcpy(a, pageable, hbytes, cudaMemcpyHostToDevice)); }, 3);
  std::printf("host to device, pageable: %.1f GB/s\n", hbytes / pg_ms / 1e6);

  // Zero-copy: registered like the expert files (read-only, mapped), read by a kernel.
  void* reg = std::aligned_alloc(4096, hbytes);
  std::memset(reg, 1, hbytes);
  CK(cudaHostRegister(
      reg, hbytes, cudaHostRegisterReadOnly | cudaHostRegisterMapped | cudaHostRegisterPortable));
  void* reg_dev = nullptr;
  CK(cudaHostGetDevicePointer(&reg_dev, reg, 0));
  const float zc_ms = TimeMs(
      [&] {
        ReadAll<<<p.multiProcessorCount * 8, 512>>>(static_cast<const float4*>(reg_dev),
                                                    hbytes / 16, out);
      },
      3);
  std::printf("kernel reading pinned host memory in place: %.1f GB/s\n", hbytes / zc_ms / 1e6);
  // The same read beside a copy of as many bytes on another stream: what they share.
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t t0, t1, done2;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventCreate(&done2));
  CK(cudaEventRecord(t0, s1));
  CK(cudaStreamWaitEvent(s2, t0, 0));
  CK(cudaMemcpyAsync(a, pinned, hbytes, cudaMemcpyHostToDevice, s2));
  ReadAll<<<p.multiProcessorCount * 8, 512, 0, s1>>>(static_cast<const float4*>(reg_dev),
                                                     hbytes / 16, out);
  CK(cudaEventRecord(done2, s2));
  CK(cudaStreamWaitEvent(s1, done2, 0));
  CK(cudaEventRecord(t1, s1));
  CK(cudaEventSynchronize(t1));
  float both_ms = 0;
  CK(cudaEventElapsedTime(&both_ms, t0, t1));
  std::printf("in-place read + copy at once: %.1f GB/s together\n", 2.0 * hbytes / both_ms / 1e6);

  // Host memory read by every core (summing 8-byte words), 4 GiB.
  const size_t cbytes = 4ull << 30, words = cbytes / 8;
  std::vector<uint64_t> host(words, 1);
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<uint64_t> sums(nt, 0);
    const auto c0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (unsigned t = 0; t < nt; ++t)
      th.emplace_back([&, t] {
        uint64_t acc = 0;
        for (size_t i = words * t / nt; i < words * (t + 1) / nt; ++i) acc += host[i];
        sums[t] = acc;
      });
    for (auto& x : th) x.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    if (rep == 1)
      std::printf("host memory read, %u threads: %.1f GB/s (sum %llu)\n", nt, cbytes / sec / 1e9,
                  static_cast<unsigned long long>(total));
  }
  return 0;
}
