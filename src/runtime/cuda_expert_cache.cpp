#include "runtime/cuda_expert_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "base/check.h"
#include "base/timer.h"

namespace rw {
namespace {

// Per Ensure call (one layer of one token): a use 2,000 calls ago (~66 tokens of a 30-layer
// model) counts e^-1 of a use now.
constexpr double kDecayPerTick = 0.9995;

cudaStream_t AsStream(void* s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t AsEvent(void* e) {
  return static_cast<cudaEvent_t>(e);
}

}  // namespace

Result<std::unique_ptr<CudaExpertCache>> CudaExpertCache::Create(ExpertStore* store, int layers,
                                                                 int experts, uint64_t stride,
                                                                 std::vector<uint64_t> blob_sizes,
                                                                 int64_t slots, ThreadPool* pool) {
  CHECK(store != nullptr && layers > 0 && experts > 0 && slots >= 1);
  auto c = std::unique_ptr<CudaExpertCache>(new CudaExpertCache());
  c->store_ = store;
  c->pool_ = pool;
  c->layers_ = layers;
  c->experts_ = experts;
  c->stride_ = stride;
  c->blob_sizes_ = std::move(blob_sizes);
  slots = std::min<int64_t>(slots, int64_t{layers} * experts);
  c->slots_.resize(static_cast<size_t>(slots));
  c->slot_of_key_.assign(static_cast<size_t>(layers) * experts, -1);
  void* p = nullptr;
  RW_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, stride * static_cast<uint64_t>(slots)),
                          "expert cache of {} slots × {} bytes", slots, stride);
  c->device_ = static_cast<uint8_t*>(p);
  RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, 2 * kStaging * stride), "pinned staging");
  c->staging_ = static_cast<uint8_t*>(p);
  cudaStream_t cs;
  RW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "copy stream");
  c->copy_stream_ = cs;
  if (!c->all_resident()) {
    // Pin the store's mappings so misses are copied straight from the page cache. Optional: on
    // failure (no read-only registration, a locked-memory limit) the staging path is used.
    int ro = 0;
    cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, 0);
    for (const auto& [base, size] : store->MappedRegions()) {
      if (ro == 0 || size == 0) break;
      const cudaError_t e = cudaHostRegister(const_cast<uint8_t*>(base), size,
                                             cudaHostRegisterReadOnly | cudaHostRegisterPortable);
      if (e != cudaSuccess) {
        cudaGetLastError();
        break;
      }
      c->pinned_.push_back({base, size});
    }
  }
  for (void** e : {&c->set_done_[0], &c->set_done_[1], &c->compute_mark_, &c->copies_done_}) {
    cudaEvent_t ev;
    RW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
    *e = ev;
  }
  return c;
}

CudaExpertCache::~CudaExpertCache() {
  if (copy_stream_ != nullptr) cudaStreamSynchronize(AsStream(copy_stream_));
  for (const auto& r : pinned_) cudaHostUnregister(const_cast<uint8_t*>(r.first));
  for (void* e : {set_done_[0], set_done_[1], compute_mark_, copies_done_})
    if (e != nullptr) cudaEventDestroy(AsEvent(e));
  if (copy_stream_ != nullptr) cudaStreamDestroy(AsStream(copy_stream_));
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (device_ != nullptr) cudaFree(device_);
  if (table_ != nullptr) cudaFree(table_);
}

bool CudaExpertCache::Pinned(const uint8_t* p, uint64_t n) const {
  for (const auto& [base, size] : pinned_)
    if (p >= base && p + n <= base + size) return true;
  return false;
}

CudaExpertCacheStats CudaExpertCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

double CudaExpertCache::Decayed(const Slot& s) const {
  return s.score * std::pow(kDecayPerTick, static_cast<double>(tick_ - s.last));
}

int64_t CudaExpertCache::Victim(const std::vector<uint8_t>& busy) const {
  int64_t best = -1;
  double best_score = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (busy[i]) continue;
    if (slots_[i].key < 0) return static_cast<int64_t>(i);  // an empty slot first
    const double s = Decayed(slots_[i]);
    if (best < 0 || s < best_score ||
        (s == best_score && slots_[i].last < slots_[static_cast<size_t>(best)].last)) {
      best = static_cast<int64_t>(i);
      best_score = s;
    }
  }
  return best;
}

Status CudaExpertCache::Ensure(int layer, std::span<const int> experts, const uint8_t** out,
                               void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(static_cast<int64_t>(experts.size()) <= slots());
  ++tick_;
  std::vector<uint8_t> busy(slots_.size(), 0);
  std::vector<int> missing;
  std::vector<int64_t> missing_slot;
  std::vector<int64_t> slot_of(experts.size(), -1);
  // Hits first, so a miss never evicts an expert this call needs.
  for (size_t i = 0; i < experts.size(); ++i) {
    const int64_t s = slot_of_key_[static_cast<size_t>(layer) * experts_ + experts[i]];
    if (s >= 0) {
      slot_of[i] = s;
      busy[static_cast<size_t>(s)] = 1;
    }
  }
  for (size_t i = 0; i < experts.size(); ++i) {
    ++stats_.requests;
    const int key = layer * experts_ + experts[i];
    if (slot_of[i] >= 0) {
      ++stats_.hits;
    } else {
      const int64_t v = Victim(busy);
      CHECK(v >= 0);
      Slot& s = slots_[static_cast<size_t>(v)];
      if (s.key >= 0) slot_of_key_[static_cast<size_t>(s.key)] = -1;
      s.key = key;
      s.score = 0;
      slot_of_key_[static_cast<size_t>(key)] = v;
      busy[static_cast<size_t>(v)] = 1;
      slot_of[i] = v;
      missing.push_back(experts[i]);
      missing_slot.push_back(v);
    }
    Slot& s = slots_[static_cast<size_t>(slot_of[i])];
    s.score = Decayed(s) + 1.0;
    s.last = tick_;
    out[i] = device_ + static_cast<uint64_t>(slot_of[i]) * stride_;
  }
  if (missing.empty()) return Status::Ok();
  stats_.misses += missing.size();
  stats_.bytes_copied += missing.size() * blob_sizes_[static_cast<size_t>(layer)];
  Status st = Fill(layer, missing, missing_slot, stream);
  if (!st.ok()) {
    // The slots were claimed but not filled: forget them so a retry reads again.
    for (int64_t v : missing_slot) {
      Slot& s = slots_[static_cast<size_t>(v)];
      slot_of_key_[static_cast<size_t>(s.key)] = -1;
      s = Slot{};
    }
  }
  return st;
}

Status CudaExpertCache::Fill(int layer, std::span<const int> experts,
                             std::span<const int64_t> slot_of, void* stream) {
  Stopwatch sw;
  cudaStream_t copy = AsStream(copy_stream_);
  // Victim slots may still be read by work queued on the compute stream.
  RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(compute_mark_), AsStream(stream)), "event");
  RW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy, AsEvent(compute_mark_), 0), "wait");
  const uint64_t bytes = blob_sizes_[static_cast<size_t>(layer)];
  const size_t per_begin = static_cast<size_t>(std::max(1, store_->capacity_per_layer()));
  // Direct copies need no staging, but a wave still bounds one Begin.
  const size_t wave = std::min<size_t>(pinned_.empty() ? kStaging : 64, per_begin);
  for (size_t w0 = 0; w0 < experts.size(); w0 += wave) {
    const size_t n = std::min(wave, experts.size() - w0);
    uint8_t* set = staging_ + static_cast<uint64_t>(set_) * kStaging * stride_;
    // The set's previous copies must be done before its buffers are rewritten.
    RW_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(AsEvent(set_done_[set_])), "staging wait");
    RW_RETURN_IF_ERROR(store_->Begin(layer, experts.subspan(w0, n), nullptr));
    // Each worker copies its blob into staging and queues its DMA at once, so transfers of the
    // first blobs overlap the host copies of the rest.
    std::vector<Status> errors(n);
    std::vector<uint8_t> direct(n, 0);
    auto copy_one = [&](size_t i) {
      Result<ExpertRef> ref = store_->Wait(layer, i);
      if (!ref.ok()) {
        errors[i] = ref.status();
        return;
      }
      const uint8_t* src = ref->blob;
      if (Pinned(src, bytes)) {
        direct[i] = 1;
      } else if (i < static_cast<size_t>(kStaging)) {
        std::memcpy(set + i * stride_, ref->blob, bytes);
        src = set + i * stride_;
      }  // else: from pageable memory (the driver stages it; slower, still correct)
      const cudaError_t e =
          cudaMemcpyAsync(device_ + static_cast<uint64_t>(slot_of[w0 + i]) * stride_, src, bytes,
                          cudaMemcpyHostToDevice, copy);
      if (e != cudaSuccess)
        errors[i] =
            Error(ErrorCode::kDevice, "CUDA error in expert copy: {}", cudaGetErrorString(e));
    };
    if (pool_ != nullptr && n > 1) {
      pool_->ParallelFor(n, 1, [&](size_t b, size_t e, int) {
        for (size_t i = b; i < e; ++i) copy_one(i);
      });
    } else {
      for (size_t i = 0; i < n; ++i) copy_one(i);
    }
    store_->Release(layer);
    for (const Status& s : errors) RW_RETURN_IF_ERROR(s);
    for (uint8_t d : direct) stats_.direct_copies += d;
    RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(set_done_[set_]), copy), "event");
    set_ ^= 1;
  }
  RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(copies_done_), copy), "event");
  RW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(AsStream(stream), AsEvent(copies_done_), 0), "wait");
  stats_.fill_seconds += sw.Seconds();
  return Status::Ok();
}

Result<const uint8_t* const*> CudaExpertCache::LoadAll(void* stream) {
  CHECK(all_resident());
  std::vector<const uint8_t*> table(static_cast<size_t>(layers_) * experts_);
  std::vector<int> ids;
  for (int l = 0; l < layers_; ++l) {
    for (int e0 = 0; e0 < experts_; e0 += 64) {
      ids.clear();
      for (int e = e0; e < std::min(experts_, e0 + 64); ++e) ids.push_back(e);
      RW_RETURN_IF_ERROR(Ensure(l, ids, &table[static_cast<size_t>(l) * experts_ + e0], stream));
    }
  }
  void* p = nullptr;
  RW_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, table.size() * sizeof(void*)), "expert table");
  table_ = static_cast<uint8_t**>(p);
  RW_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(table_, table.data(), table.size() * sizeof(void*), cudaMemcpyHostToDevice),
      "expert table");
  RW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(AsStream(stream)), "expert upload");
  stats_ = CudaExpertCacheStats{};  // the load is not traffic
  return const_cast<const uint8_t* const*>(table_);
}

}  // namespace rw
