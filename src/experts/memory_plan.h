// Turns a memory budget into expert slots: what is left after the resident core, the KV cache
// and the forward pass's scratch buffers, divided among the layers.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace rw {

struct MemoryNeeds {
  uint64_t core_bytes = 0;     // core.bin (mapped; resident while the model runs)
  uint64_t kv_bytes = 0;       // the KV cache at the configured context
  uint64_t scratch_bytes = 0;  // activations and other working buffers
  int layers = 0;              // layers with routed experts
  int experts_per_layer = 0;
  int top_k = 0;               // experts one token needs per layer: the floor per layer
  uint64_t expert_stride = 0;  // bytes of one expert slot
};

struct MemoryPlan {
  uint64_t budget = 0;
  int slots_per_layer = 0;
  uint64_t slot_bytes = 0;      // all layers' slots
  uint64_t minimum_budget = 0;  // top_k slots per layer
  uint64_t full_budget = 0;     // every expert in a slot
  std::string Describe() const;
};

// kResourceExhausted, saying the minimum, when the budget cannot hold top_k slots per layer.
Result<MemoryPlan> PlanMemory(uint64_t budget, const MemoryNeeds& needs);

std::string FormatBytes(uint64_t bytes);  // "1.53 GiB"

}  // namespace rw
