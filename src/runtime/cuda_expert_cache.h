// The VRAM expert cache of the CUDA backend: a fixed number of device slots, each holding one
// routed expert's blob (gate/up/down exactly as the expert file stores them), keyed by
// (layer, expert). With a slot for every expert the cache is filled once at load and never
// evicts (everything resident). Under a budget it runs one of two ways:
//
//   mapped (where the store's blobs lie in fixed mappings, the mmap store): the mappings are
//     pinned (cudaHostRegister, read-only, mapped) and every blob is checked once at load; a
//     device table [layer·experts + e] holds each expert's address, its VRAM slot when cached,
//     else its pinned host copy, which kernels read in place over PCIe. Decode indexes the table
//     by the router's choice on the GPU, so a step needs no host round trip. Between calls
//     (Record, then Maintain) hot experts that missed are promoted into slots on a copy stream,
//     a few per call (LFU with decay per key): an evicted expert's entry goes back to its host
//     address before its slot is overwritten, and a promoted one's entry points at the slot only
//     once its copy has finished.
//   copy (slots store, or by choice): misses are filled from the host ExpertStore (Begin/Wait/
//     Release hand out host pointers) on a copy stream before the layer's kernels run, straight
//     from pinned mappings where there are any, else through pinned staging buffers. LFU with
//     exponential decay per slot; recency breaks ties.
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
  uint64_t requests = 0;       // experts used (Ensure, or Record on the mapped path)
  uint64_t hits = 0;           // in a VRAM slot when used
  uint64_t misses = 0;         // copied first (copy path) or read from host memory (mapped)
  uint64_t bytes_copied = 0;   // host → device copies into slots, blob bytes
  uint64_t bytes_mapped = 0;   // mapped: blob bytes kernels read from host memory (the misses)
  uint64_t promotions = 0;     // mapped: experts copied into slots between calls
  uint64_t direct_copies = 0;  // copies straight from pinned mappings (no staging)
  double fill_seconds = 0;     // host time spent filling misses
};

struct CudaExpertCacheOptions {
  // Under a budget, read missing experts in place from pinned host memory when the store allows
  // (else the copy path).
  bool mapped = true;
  int max_promotions = 16;  // mapped: experts copied into slots per Maintain at most
  // mapped: prefill reads a chunk's missing experts in place too, instead of copying them into
  // slots as the copy path does (measured slower: the matmul's small scattered reads over PCIe).
  bool prefill_in_place = false;
};

class CudaExpertCache {
 public:
  // slots >= 1; stride: bytes per slot (the largest blob, rounded up).
  static Result<std::unique_ptr<CudaExpertCache>> Create(ExpertStore* store, int layers,
                                                         int experts, uint64_t stride,
                                                         std::vector<uint64_t> blob_sizes,
                                                         int64_t slots, ThreadPool* pool,
                                                         const CudaExpertCacheOptions& options);
  ~CudaExpertCache();

  // Makes experts[0..n) of `layer` resident (n <= slots()) and writes their device addresses
  // into out. Copies are ordered before any later work on `stream` (an opaque cudaStream_t);
  // slots are only overwritten after the work already queued on `stream` has finished.
  // On the mapped path it keeps the table's host mirror in step; the device table is brought up
  // to date by the next Maintain.
  Status Ensure(int layer, std::span<const int> experts, const uint8_t** out, void* stream);
  // Loads every expert (requires slots() >= layers·experts) and returns the device table of
  // blob addresses, [layer·experts + e], in device memory.
  Result<const uint8_t* const*> LoadAll(void* stream);

  // Mapped path. The device table of blob addresses, [layer·experts + e] (fixed address).
  bool mapped() const { return mapped_; }
  bool prefill_in_place() const { return mapped_ && prefill_in_place_; }
  const uint8_t* const* table() const { return table_; }
  // The table's current entry for (layer, e): where a kernel queued now reads the blob.
  const uint8_t* Entry(int layer, int e) const;
  // Counts uses of experts of `layer` by work that read the current table (hit: in a slot), and
  // makes them candidates for promotion.
  void Record(int layer, std::span<const int> experts);
  // Between calls, with nothing queued on `stream` that reads the table but must see the old
  // one: switches in finished promotions, picks new ones (at most max_promotions, only over
  // colder residents), queues the table upload on `stream` and the copies on the copy stream
  // after it.
  Status Maintain(void* stream);

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
    bool loading = false;  // mapped: a promotion's copy is in flight
  };
  // Mapped: one Maintain's promotions, switched in once `done` (a cudaEvent_t) has fired.
  struct Batch {
    void* done = nullptr;
    std::vector<std::pair<int64_t, int>> items;  // (slot, key)
  };
  static constexpr size_t kMaxBatches = 3;
  CudaExpertCache() = default;
  double Decayed(const Slot& s) const;
  Status MapAll();
  // Mapped: switches in the promotions whose copies finished (all of them when wait).
  Status FinishPromotions(bool wait);
  void PointAtHost(int key);
  void PointAtSlot(int key, int64_t slot);
  // Picks a victim slot not in `busy` (slots this call already holds; may be empty) and not
  // loading: an empty one, else the coldest (copy path: the slot's decayed score; mapped: its
  // key's).
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
  uint8_t** table_ = nullptr;  // device table (LoadAll, or the mapped path's)
  // Host ranges pinned with cudaHostRegister (the store's mappings), copied from directly, and
  // their device addresses.
  std::vector<std::pair<const uint8_t*, uint64_t>> pinned_;
  std::vector<const uint8_t*> pinned_dev_;
  bool Pinned(const uint8_t* p, uint64_t n) const;
  // Mapped path.
  bool mapped_ = false, prefill_in_place_ = false;
  int max_promotions_ = 0;
  std::vector<const uint8_t*> host_blob_;  // key → host address of its verified blob
  std::vector<const uint8_t*> host_dev_;   // key → the same blob's device (mapped) address
  const uint8_t** h_table_ = nullptr;      // pinned host mirror of table_
  bool table_dirty_ = false;
  // Per key LFU: each use adds inc_, which grows by 1/decay per Maintain, so comparing raw
  // scores compares exponentially decayed counts (rescaled before they overflow).
  std::vector<double> key_score_;
  std::vector<uint64_t> key_last_;
  std::vector<uint8_t> candidate_;  // key → listed in candidates_
  std::vector<uint8_t> loading_;    // key → its promotion's copy is in flight
  std::vector<int> candidates_;     // keys used while not in a slot since the last Maintain
  double inc_ = 1.0;
  uint64_t step_ = 0;
  std::vector<Batch> batches_;      // in flight, oldest first
  std::vector<void*> free_events_;  // cudaEvent_t for batches
  void* table_uploaded_ = nullptr;  // cudaEvent_t: the table upload before a batch's copies
  mutable std::mutex mu_;
  CudaExpertCacheStats stats_;
};

}  // namespace rw
