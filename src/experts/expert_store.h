// The one door through which the forward pass gets routed-expert weights. A layer's step asks
// for the set of experts its router chose (Acquire), uses the returned blobs, then Releases
// them. The simple store maps each layer file and hands out pointers into the mapping; a
// streaming store (pread slots, io_uring, prefetch) can replace the insides without touching
// the forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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
};

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;

  // Makes experts[i] of `layer` readable and writes its ref to out[i]. The refs stay valid
  // until Release(layer) (or the next Acquire of the same layer by the same caller).
  // Thread-safe for concurrent callers working on different sessions.
  virtual Status Acquire(int layer, std::span<const int> experts, ExpertRef* out) = 0;
  virtual void Release(int layer) {}

  virtual ExpertStoreStats stats() const = 0;
  virtual const char* kind() const = 0;
};

// Maps every experts/layer_NNN.bin read-only (the page cache is the expert cache).
// `dir` must outlive the store.
Result<std::unique_ptr<ExpertStore>> OpenMmapExpertStore(const ModelDir& dir);

}  // namespace rw
