// The VRAM expert cache of the CUDA backend: a fixed number of device slots, each holding one
// routed expert's blob (gate/up/down exactly as the expert file stores them), keyed by
// (layer, expert). Misses are filled from the host ExpertStore (Begin/Wait/Release hand out host
// pointers) on a copy stream, and the compute stream waits for the copies with an event. Where
// the store's blobs lie in fixed mappings (mmap) those are pinned (cudaHostRegister, read-only)
// and blobs are copied straight from them at full PCIe speed; otherwise worker threads copy
// blobs into pinned staging buffers first.
// Replacement is LFU with exponential decay; recency breaks ties. With a slot for every expert
// the cache is filled once at load and never evicts (everything resident).
//
// Plain C++ interface (streams are opaque): engine code includes it without CUDA headers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "experts/expert_store.h"

namespace rw {

struct CudaExpertCacheStats {
  uint64_t requests = 0;       // experts asked for by Ensure
  uint64_t hits = 0;           // already in a slot
  uint64_t misses = 0;         // copied from host memory
  uint64_t bytes_copied = 0;   // host → device, blob bytes
  uint64_t direct_copies = 0;  // misses copied straight from pinned mappings (no staging)
  double fill_seconds = 0;     // host time spent filling misses
};

class CudaExpertCache {
 public:
  // slots >= 1; stride: bytes per slot (the largest blob, rounded up).
  static Result<std::unique_ptr<CudaExpertCache>> Create(ExpertStore* store, int layers,
                                                         int experts, uint64_t stride,
                                                         std::vector<uint64_t> blob_sizes,
                                                         int64_t slots, ThreadPool* pool);
  ~CudaExpertCache();

  // Makes experts[0..n) of `layer` resident (n <= slots()) and writes their device addresses
  // into out. Copies are ordered before any later work on `stream` (an opaque cudaStream_t);
  // slots are only overwritten after the work already queued on `stream` has finished.
  Status Ensure(int layer, std::span<const int> experts, const uint8_t** out, void* stream);
  // Loads every expert (requires slots() >= layers·experts) and returns the device table of
  // blob addresses, [layer·experts + e], in device memory.
  Result<const uint8_t* const*> LoadAll(void* stream);

  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  bool all_resident() const { return slots() >= int64_t{layers_} * experts_; }
  uint64_t stride() const { return stride_; }
  uint64_t device_bytes() const { return stride_ * slots_.size(); }
  CudaExpertCacheStats stats() const;

 private:
  struct Slot {
    int key = -1;  // layer·experts + expert, -1: empty
    double score = 0;
    uint64_t last = 0;
  };
  CudaExpertCache() = default;
  double Decayed(const Slot& s) const;
  // Picks a victim slot not in `busy` (slots this call already holds).
  int64_t Victim(const std::vector<uint8_t>& busy) const;
  Status Fill(int layer, std::span<const int> experts, std::span<const int64_t> slot_of,
              void* stream);

  ExpertStore* store_ = nullptr;
  ThreadPool* pool_ = nullptr;
  int layers_ = 0, experts_ = 0;
  uint64_t stride_ = 0;
  std::vector<uint64_t> blob_sizes_;  // per layer
  uint8_t* device_ = nullptr;         // slots·stride bytes
  std::vector<Slot> slots_;
  std::vector<int64_t> slot_of_key_;  // key → slot, -1 when not cached
  uint64_t tick_ = 0;
  // Pinned staging: two sets of kStaging buffers, each set reused once its copies finished.
  static constexpr int kStaging = 16;
  uint8_t* staging_ = nullptr;
  void* copy_stream_ = nullptr;
  void* set_done_[2] = {nullptr, nullptr};  // cudaEvent_t per staging set
  void* compute_mark_ = nullptr;            // cudaEvent_t: queued compute work
  void* copies_done_ = nullptr;             // cudaEvent_t: this call's copies
  int set_ = 0;
  uint8_t** table_ = nullptr;  // LoadAll's device table
  // Host ranges pinned with cudaHostRegister (the store's mappings), copied from directly.
  std::vector<std::pair<const uint8_t*, uint64_t>> pinned_;
  bool Pinned(const uint8_t* p, uint64_t n) const;
  mutable std::mutex mu_;
  CudaExpertCacheStats stats_;
};

}  // namespace rw
