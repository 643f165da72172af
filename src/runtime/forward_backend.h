// The forward pass behind one interface: a Session holds one ForwardBackend (the CPU pass with
// its KV cache, or the CUDA pass with its cache on the GPU) and never asks which it is. What
// decoding needs from a backend is written here once: chunked prefill, one-token decode, a
// k-token verify returning k rows of logits, the hidden states of chosen layers, cutting the KV
// cache back to a position, stats, and (for a fault policy) handing a half-run call over to
// another backend.
//
// DeviceModel is the per-Engine part a backend needs beyond RuntimeModel (the GPU's copy of the
// weights); the CPU needs none. The factories at the end are the only place that knows which
// backends this build has (runtime/cuda_backend.cpp, or cuda_backend_none.cpp without CUDA).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "experts/expert_store.h"
#include "runtime/forward.h"
#include "runtime/kv_cache.h"
#include "runtime/model.h"

namespace rw {

// Where the forward pass runs.
enum class BackendKind { kCpu, kCuda };
const char* BackendName(BackendKind kind);  // "cpu" | "cuda"
Result<BackendKind> ParseBackendKind(std::string_view name);

// What a CUDA error inside a call does: kFailClosed returns it and closes the session;
// kFailoverCpu finishes the call on the CPU and stays there.
enum class FaultPolicy { kFailClosed, kFailoverCpu };
const char* FaultPolicyName(FaultPolicy policy);  // "fail-closed" | "failover-cpu"
Result<FaultPolicy> ParseFaultPolicy(std::string_view name);

// The CPU backend's affine matvec arithmetic (cpu::Precision): exact (fp32, the default) or
// fast (int8 activations).
using cpu::Precision;
const char* PrecisionName(Precision precision);  // "exact" | "fast"
Result<Precision> ParsePrecision(std::string_view name);

// How routed experts missing from VRAM reach the GPU's kernels under a budget: kMapped (read in
// place from pinned host memory; needs the mmap store, else copy), kCopy (copied into VRAM
// before each layer runs), kAuto (mapped where possible).
enum class CudaExpertPath { kAuto, kMapped, kCopy };
const char* CudaExpertPathName(CudaExpertPath path);  // "auto" | "mapped" | "copy"
Result<CudaExpertPath> ParseCudaExpertPath(std::string_view name);

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;

  virtual BackendKind kind() const = 0;
  // Tokens per Run call at most.
  virtual int64_t max_chunk() const = 0;
  // Slots of the sliding rings (0 without sliding layers): position p lives in slot p % capacity.
  virtual int64_t sliding_capacity() const = 0;
  // Whether RunLayerMajor takes spans longer than a chunk (else the caller runs chunk by chunk).
  virtual bool layer_major() const { return false; }

  // Runs tokens ids[0..m) at positions pos0.. (1 <= m <= max_chunk), stores their K/V, and
  // writes logits: kAll → m rows, kLast → the last row, kNone → nothing. The caller has
  // validated ids, positions and the cache's history. `cancel` (may be null) is polled where
  // the backend can stop (the CPU: before every layer); a cancelled call returns kCancelled and
  // leaves positions before pos0 intact. Errors with ErrorCode::kDevice are device faults that
  // a fault policy may hand over (HandOver).
  virtual Status Run(const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
                     ForwardStats* stats, const std::atomic<bool>* cancel) = 0;
  // Runs any n >= 1 tokens layer by layer (see ForwardPass::RunLayerMajor). Only called when
  // layer_major(); a failed call leaves the cache part updated: the caller starts over.
  virtual Status RunLayerMajor(const int* ids, int64_t n, int64_t pos0, LogitsRows rows,
                               float* logits, ForwardStats* stats, const std::atomic<bool>* cancel);
  // Verify for speculative decoding: tokens ids[0..k) (the last accepted token and k − 1
  // drafts) at positions pos0.., one forward over the block (each routed expert read once),
  // logits [k][vocab]. The same as Run with kAll; a backend may do it faster.
  virtual Status Verify(const int* ids, int64_t k, int64_t pos0, float* logits,
                        ForwardStats* stats) {
    return Run(ids, k, pos0, LogitsRows::kAll, logits, stats, nullptr);
  }

  // A verify whose picks are made where the logits are, so the rows need not be copied back:
  // row r picked as RunAndSample (k = 0: the unfiltered draw at sample position pos0 + 1 + r)
  // or RunAndTopK (k > 0: its candidates) would pick it after a decode step; no repetition
  // penalty. kUnsupported where the backend has no such picks (the caller then uses Verify).
  virtual Status VerifyAndPick(const int* ids, int64_t k, int64_t pos0, uint64_t seed,
                               double temperature, int top_k, std::vector<RowPick>* picks,
                               ForwardStats* stats) {
    (void)ids, (void)k, (void)pos0, (void)seed, (void)temperature, (void)top_k, (void)picks,
        (void)stats;
    return Error(ErrorCode::kUnsupported, "this backend has no device picks");
  }
  // The most tokens VerifyAndPick takes (0: none).
  virtual int64_t max_verify_picks() const { return 0; }

  // Records, from the next call on, the residual after each of `layers` (ascending, distinct,
  // in [0, num_layers)) for every token of each call into capture() (empty: stop).
  virtual Status SetCapture(std::vector<int> layers) = 0;
  virtual const HiddenCapture& capture() const = 0;

  // Whether a timeline at `position` can be cut back to its first `pos` tokens keeping the
  // cache: full-attention layers always can; a sliding ring only while the keys a query at pos
  // needs (the `window` positions before it) have not been overwritten.
  bool CanTruncate(int64_t position, int64_t pos, int64_t window) const;
  // Cuts the cache back to `pos` (CanTruncate holds). Positions past it are simply rewritten by
  // the next call (attention reads only positions before the query), so nothing is cleared.
  virtual Status Truncate(int64_t pos) {
    (void)pos;
    return Status::Ok();
  }

  // Drawing on the device (the CUDA backend): see Session::DecodeSampled / DecodeTopK.
  virtual bool samples_on_device() const { return false; }
  virtual void SetPenalty(float penalty, std::span<const int> ids) { (void)penalty, (void)ids; }
  virtual Status RunAndSample(int id, int64_t pos0, uint64_t seed, double temperature,
                              int64_t sample_position, int* token, ForwardStats* stats);
  virtual Status RunAndTopK(int id, int64_t pos0, int k, std::vector<int>* ids,
                            std::vector<float>* values, std::vector<float>* logits,
                            ForwardStats* stats);
  // The most candidates RunAndTopK returns (0: none).
  virtual int max_top_k() const { return 0; }

  // Host waits on the device so far (0 on the CPU).
  virtual uint64_t host_syncs() const { return 0; }
  // Routing trace and per-layer hook (tests and `redwing trace`): the CPU pass only.
  virtual void set_routing_trace(RoutingTrace* trace) { (void)trace; }
  virtual void set_before_layer(std::function<void(int layer)> hook) { (void)hook; }

  // Failover. After a Run that failed with kDevice at positions [pos0, pos0 + m): copies what
  // this backend still holds into `to` — the K/V of positions [0, pos0 + m) into to.host_cache()
  // — and returns the layer whose input `residual` ([m][hidden]) holds (then `to` finishes the
  // call with RunFrom), or -1 when the call must be rerun from its tokens. An error when the
  // device cannot be read any more.
  virtual Result<int> HandOver(ForwardBackend& to, int64_t pos0, int64_t m,
                               std::vector<float>* residual);
  // The KV cache in host memory (the CPU backend's), else null.
  virtual KvCache* host_cache() { return nullptr; }
  // Finishes a call from the middle: x is the residual entering first_layer (see
  // ForwardPass::RunFrom).
  virtual Status RunFrom(const float* x, int first_layer, int64_t m, int64_t pos0, LogitsRows rows,
                         float* logits, ForwardStats* stats);
};

// The per-Engine state of a device backend (the CUDA weights and VRAM expert cache).
class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  virtual BackendKind kind() const = 0;
  // A session's pass over these weights.
  virtual Result<std::unique_ptr<ForwardBackend>> NewBackend(int64_t max_context,
                                                             int64_t max_chunk) const = 0;
  // How routed experts reach the kernels ("resident", "mapped", "copy").
  virtual std::string expert_path() const = 0;
  // The device's expert cache figures (hits, misses, bytes copied over PCIe, ...).
  virtual ExpertStoreStats expert_stats() const = 0;
};

// The CPU pass and its KV cache over `model`, threads from `pool`.
std::unique_ptr<ForwardBackend> NewCpuBackend(const RuntimeModel& model, int64_t max_context,
                                              int64_t max_chunk, ThreadPool* pool,
                                              KvType kv_type = KvType::kF32,
                                              Precision precision = Precision::kExact);

struct CudaBackendOptions {
  uint64_t vram_budget = 0;  // 0: every expert resident
  int64_t max_context = 8192, prefill_chunk = 512;
  bool graphs = true;  // replay decode steps from a CUDA graph where possible
  CudaExpertPath experts = CudaExpertPath::kAuto;
  int promotions = 16;            // mapped: experts promoted into VRAM per call at most
  bool prefill_in_place = false;  // mapped: prefill reads missing experts in place
};
// Whether this build and machine can run the CUDA backend (an error saying why not).
Status CudaBackendAvailable();
// Uploads the model's weights to the GPU. kUnsupported in a build without CUDA.
Result<std::unique_ptr<DeviceModel>> UploadCudaModel(const RuntimeModel& model,
                                                     const CudaBackendOptions& options,
                                                     ThreadPool* pool);

}  // namespace rw
