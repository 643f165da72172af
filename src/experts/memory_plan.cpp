#include "experts/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

namespace rw {

std::string FormatBytes(uint64_t b) {
  const double d = static_cast<double>(b);
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", d / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", d / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", d / (1ull << 10));
  return fmt::format("{} B", b);
}

std::string MemoryPlan::Describe() const {
  return fmt::format("{} expert slots per layer ({}) within a budget of {}", slots_per_layer,
                     FormatBytes(slot_bytes), FormatBytes(budget));
}

Result<MemoryPlan> PlanMemory(uint64_t budget, const MemoryNeeds& n) {
  if (n.layers <= 0 || n.experts_per_layer <= 0 || n.top_k <= 0 || n.expert_stride == 0 ||
      n.top_k > n.experts_per_layer)
    return Error(ErrorCode::kInvalidArgument, "memory planner: bad model geometry");
  MemoryPlan p;
  p.budget = budget;
  const uint64_t fixed = n.core_bytes + n.kv_bytes + n.scratch_bytes;
  const uint64_t per_slot_row = n.expert_stride * static_cast<uint64_t>(n.layers);
  p.minimum_budget = fixed + per_slot_row * static_cast<uint64_t>(n.top_k);
  p.full_budget = fixed + per_slot_row * static_cast<uint64_t>(n.experts_per_layer);
  if (budget < p.minimum_budget)
    return Error(ErrorCode::kResourceExhausted,
                 "a memory budget of {} is too small: the core takes {}, the KV cache {} and "
                 "scratch {}, and every layer needs at least {} expert slots of {} ({} in all); "
                 "the minimum is {} (or lower --max-context)",
                 FormatBytes(budget), FormatBytes(n.core_bytes), FormatBytes(n.kv_bytes),
                 FormatBytes(n.scratch_bytes), n.top_k, FormatBytes(n.expert_stride),
                 FormatBytes(per_slot_row * n.top_k), FormatBytes(p.minimum_budget));
  const uint64_t rows = (budget - fixed) / per_slot_row;
  p.slots_per_layer = static_cast<int>(std::min<uint64_t>(rows, n.experts_per_layer));
  p.slot_bytes = per_slot_row * static_cast<uint64_t>(p.slots_per_layer);
  return p;
}

}  // namespace rw
