// The one door through which the forward pass gets routed-expert weights. A layer asks for the
// experts its router chose (Begin: reads for the missing ones start at once and it returns),
// computes the resident ones while the rest arrive (Wait per expert), then Releases them.
// Strategies (selected by ExpertStoreOptions::kind):
//   mmap:  layer files mapped read-only; the page cache is the expert cache. Begin asks the
//          kernel which experts are resident (mincore) and has worker threads read the others.
//   slots: per-layer pools of expert slots in private memory, filled by parallel preads and
//          replaced by LFU with decay (recency breaks ties); sized by a memory budget.
// Every blob read from storage is checked against its XXH3 from experts/index.json; a mismatch
// is re-read once, then the request fails naming the file and expert (the store stays usable).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "experts/read_queue.h"
#include "format/model_dir.h"

namespace rw {

// One expert's weights: gate/up/down at their layout offsets from `blob`.
struct ExpertRef {
  const uint8_t* blob = nullptr;
  const ExpertLayout* layout = nullptr;
};

struct ExpertStoreStats {
  uint64_t acquires = 0;        // experts handed out
  uint64_t bytes_acquired = 0;  // their blob sizes
  uint64_t hits = 0;            // requested experts already resident at Begin
  uint64_t misses = 0;          // requested experts that had to be read
  uint64_t bytes_read = 0;      // bytes read from storage (demand and prefetch)
  uint64_t prefetches = 0;      // prefetch reads issued
  uint64_t prefetch_used = 0;   // prefetched experts later requested
  uint64_t checksum_failures = 0;
  uint64_t evicted = 0;  // mmap: experts found evicted by the kernel since they were last read
  uint64_t dropped = 0;  // mmap: cold experts the store dropped from the page cache itself
  uint64_t dropped_reread = 0;  // mmap: misses on experts the store itself had dropped
  double wait_seconds = 0;      // time compute spent waiting for reads
};

// Where routed experts live: kMmap (the page cache holds them) or kSlots (private slots sized
// by a memory budget, read with parallel preads).
enum class ExpertStoreKind { kMmap, kSlots };
const char* ExpertStoreKindName(ExpertStoreKind kind);  // "mmap" | "slots"
Result<ExpertStoreKind> ParseExpertStoreKind(std::string_view name);

struct ExpertStoreOptions {
  ExpertStoreKind kind = ExpertStoreKind::kMmap;
  int slots_per_layer = 0;  // slots: experts held per layer (from the memory planner)
  int io_threads = 8;       // reads in flight
  IoBackend io_backend = IoBackend::kAuto;
  bool verify = true;  // XXH3 of every blob read from storage
};

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;

  // Starts making experts[i] of `layer` readable and returns without waiting. resident (may be
  // null) receives 1 for experts that were ready at once. At most capacity_per_layer() experts.
  // One Begin per layer at a time: a second caller waits for the first one's Release.
  virtual Status Begin(int layer, std::span<const int> experts, uint8_t* resident) = 0;
  // Blocks until the i-th expert of the current Begin of `layer` is readable. An expert whose
  // blob fails its checksum twice is an error naming the file and expert.
  virtual Result<ExpertRef> Wait(int layer, size_t i) = 0;
  virtual void Release(int layer) = 0;
  // A hint that these experts of `layer` will probably be needed soon: read at lower priority
  // than Begin's reads, never displacing experts a Begin holds.
  virtual void Prefetch(int layer, std::span<const int> experts) { (void)layer, (void)experts; }
  // Returns once the work the store does in the background (the mmap store's page drops) is
  // done, so that a test sees the residency that work leaves.
  virtual void Settle() {}
  // How many experts one Begin may hold per layer.
  virtual int capacity_per_layer() const = 0;
  // Address ranges inside which every blob Wait hands out lies, fixed for the store's lifetime
  // (the mmap store's file mappings), so a GPU backend may pin them and copy blobs from them
  // directly. Empty when blobs live in recycled buffers (slots).
  virtual std::vector<std::pair<const uint8_t*, uint64_t>> MappedRegions() const { return {}; }

  // Begin + Wait for all + refs in out (Release still needed).
  Status Acquire(int layer, std::span<const int> experts, ExpertRef* out);

  virtual ExpertStoreStats stats() const = 0;
  virtual const char* kind() const = 0;
  virtual const char* io_backend() const = 0;  // "io_uring" or "pread"
};

// Opens the store `options.kind` over the model directory's experts. `dir` must outlive it.
Result<std::unique_ptr<ExpertStore>> OpenExpertStore(const ModelDir& dir,
                                                     const ExpertStoreOptions& options);
Result<std::unique_ptr<ExpertStore>> OpenMmapExpertStore(const ModelDir& dir,
                                                         const ExpertStoreOptions& options = {});
Result<std::unique_ptr<ExpertStore>> OpenSlotExpertStore(const ModelDir& dir,
                                                         const ExpertStoreOptions& options);

}  // namespace rw
