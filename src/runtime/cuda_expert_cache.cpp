#include "runtime/cuda_expert_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"

namespace rw {
namespace {

// Per Ensure call (one layer of one token): a use 2,000 calls ago (~66 tokens of a 30-layer
// model) counts e^-1 of a use now.
constexpr double kDecayPerTick = 0.9995;
// Mapped path, per Maintain (one decode step of 30 layers): the same half-life in tokens.
constexpr double kDecayPerStep = 0.985;

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
                                                                 int64_t slots, ThreadPool* pool,
                                                                 const CudaExpertCacheOptions& o) {
  CHECK(store != nullptr && layers > 0 && experts > 0 && slots >= 1);
  auto c = std::unique_ptr<CudaExpertCache>(new CudaExpertCache());
  c->store_ = store;
  c->pool_ = pool;
  c->layers_ = layers;
  c->experts_ = experts;
  c->stride_ = stride;
  c->blob_sizes_ = std::move(blob_sizes);
  c->max_promotions_ = std::max(0, o.max_promotions);
  c->prefill_in_place_ = o.prefill_in_place;
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
    // Pin the store's mappings (and map them for kernels) so misses are copied, or read, straight
    // from the page cache. Optional: on failure (no read-only registration, a locked-memory
    // limit) the staging path is used.
    int ro = 0;
    cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, 0);
    for (const auto& [base, size] : store->MappedRegions()) {
      if (ro == 0 || size == 0) break;
      const cudaError_t e = cudaHostRegister(
          const_cast<uint8_t*>(base), size,
          cudaHostRegisterReadOnly | cudaHostRegisterPortable | cudaHostRegisterMapped);
      if (e != cudaSuccess) {
        cudaGetLastError();
        break;
      }
      c->pinned_.push_back({base, size});
      void* dev = nullptr;
      if (cudaHostGetDevicePointer(&dev, const_cast<uint8_t*>(base), 0) != cudaSuccess) {
        cudaGetLastError();
        dev = nullptr;
      }
      c->pinned_dev_.push_back(static_cast<const uint8_t*>(dev));
    }
  }
  for (void** e : {&c->set_done_[0], &c->set_done_[1], &c->compute_mark_, &c->copies_done_,
                   &c->table_uploaded_}) {
    cudaEvent_t ev;
    RW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
    *e = ev;
  }
  if (o.mapped && !c->all_resident() && !c->pinned_.empty()) RW_RETURN_IF_ERROR(c->MapAll());
  return c;
}

Status CudaExpertCache::MapAll() {
  // Every blob once through the store: Wait checks its XXH3 (kernels will read it in place, never
  // through the store again) and hands out its address in the pinned mapping.
  const size_t n = static_cast<size_t>(layers_) * experts_;
  host_blob_.assign(n, nullptr);
  std::vector<Status> errors(static_cast<size_t>(layers_));
  auto one_layer = [&](int l) {
    const int cap = std::max(1, store_->capacity_per_layer());
    std::vector<int> ids;
    for (int e0 = 0; e0 < experts_; e0 += cap) {
      ids.clear();
      for (int e = e0; e < std::min(experts_, e0 + cap); ++e) ids.push_back(e);
      Status st = store_->Begin(l, ids, nullptr);
      const bool begun = st.ok();
      for (size_t i = 0; st.ok() && i < ids.size(); ++i) {
        Result<ExpertRef> r = store_->Wait(l, i);
        if (r.ok()) {
          host_blob_[static_cast<size_t>(l) * experts_ + ids[i]] = r->blob;
        } else {
          st = r.status();
        }
      }
      if (begun) store_->Release(l);
      if (!st.ok()) {
        errors[static_cast<size_t>(l)] = st;
        return;
      }
    }
  };
  if (pool_ != nullptr) {
    pool_->ParallelFor(static_cast<size_t>(layers_), 1, [&](size_t b, size_t e, int) {
      for (size_t l = b; l < e; ++l) one_layer(static_cast<int>(l));
    });
  } else {
    for (int l = 0; l < layers_; ++l) one_layer(l);
  }
  for (const Status& st : errors) RW_RETURN_IF_ERROR(st);
  host_dev_.assign(n, nullptr);
  for (size_t key = 0; key < n; ++key) {
    const uint8_t* p = host_blob_[key];
    const uint64_t bytes = blob_sizes_[key / static_cast<size_t>(experts_)];
    for (size_t r = 0; r < pinned_.size(); ++r) {
      const auto& [base, size] = pinned_[r];
      if (p >= base && p + bytes <= base + size && pinned_dev_[r] != nullptr)
        host_dev_[key] = pinned_dev_[r] + (p - base);
    }
    if (host_dev_[key] == nullptr) {
      RW_LOG_WARN("expert blob outside the pinned mappings; missing experts are copied instead");
      host_blob_.clear();
      host_dev_.clear();
      return Status::Ok();
    }
  }
  void* p = nullptr;
  RW_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n * sizeof(void*)), "expert table");
  table_ = static_cast<uint8_t**>(p);
  RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, n * sizeof(void*)), "expert table mirror");
  h_table_ = static_cast<const uint8_t**>(p);
  std::copy(host_dev_.begin(), host_dev_.end(), h_table_);
  RW_CUDA_RETURN_IF_ERROR(cudaMemcpy(table_, h_table_, n * sizeof(void*), cudaMemcpyHostToDevice),
                          "expert table");
  key_score_.assign(n, 0.0);
  key_last_.assign(n, 0);
  candidate_.assign(n, 0);
  loading_.assign(n, 0);
  mapped_ = true;
  return Status::Ok();
}

CudaExpertCache::~CudaExpertCache() {
  if (copy_stream_ != nullptr) cudaStreamSynchronize(AsStream(copy_stream_));
  for (const auto& r : pinned_) cudaHostUnregister(const_cast<uint8_t*>(r.first));
  for (const Batch& b : batches_) free_events_.push_back(b.done);
  for (void* e : free_events_) cudaEventDestroy(AsEvent(e));
  for (void* e : {set_done_[0], set_done_[1], compute_mark_, copies_done_, table_uploaded_})
    if (e != nullptr) cudaEventDestroy(AsEvent(e));
  if (h_table_ != nullptr) cudaFreeHost(const_cast<uint8_t**>(h_table_));
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
    if ((!busy.empty() && busy[i]) || slots_[i].loading) continue;
    if (slots_[i].key < 0) return static_cast<int64_t>(i);  // an empty slot first
    if (mapped_) {
      // The key's score, recency breaking ties (no pow per slot: scores are pre-scaled).
      const size_t k = static_cast<size_t>(slots_[i].key);
      const double s = key_score_[k];
      if (best < 0 || s < best_score ||
          (s == best_score &&
           key_last_[k] < key_last_[static_cast<size_t>(slots_[static_cast<size_t>(best)].key)])) {
        best = static_cast<int64_t>(i);
        best_score = s;
      }
      continue;
    }
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
  // Mapped: promotions in flight land first, so every slot is settled before Ensure picks.
  if (mapped_) RW_RETURN_IF_ERROR(FinishPromotions(/*wait=*/true));
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
      // Mapped: the table's mirror follows (uploaded by the next Maintain, after these copies).
      if (mapped_ && s.key >= 0) PointAtHost(s.key);
      s.key = key;
      s.score = 0;
      slot_of_key_[static_cast<size_t>(key)] = v;
      if (mapped_) PointAtSlot(key, v);
      busy[static_cast<size_t>(v)] = 1;
      slot_of[i] = v;
      missing.push_back(experts[i]);
      missing_slot.push_back(v);
    }
    Slot& s = slots_[static_cast<size_t>(slot_of[i])];
    s.score = Decayed(s) + 1.0;
    s.last = tick_;
    if (mapped_) {
      key_score_[static_cast<size_t>(key)] += inc_;
      key_last_[static_cast<size_t>(key)] = step_;
    }
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
      if (mapped_) PointAtHost(s.key);
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

const uint8_t* CudaExpertCache::Entry(int layer, int e) const {
  std::lock_guard<std::mutex> lock(mu_);
  return h_table_[static_cast<size_t>(layer) * experts_ + e];
}

void CudaExpertCache::PointAtHost(int key) {
  slot_of_key_[static_cast<size_t>(key)] = -1;
  h_table_[static_cast<size_t>(key)] = host_dev_[static_cast<size_t>(key)];
  table_dirty_ = true;
}

void CudaExpertCache::PointAtSlot(int key, int64_t slot) {
  slot_of_key_[static_cast<size_t>(key)] = slot;
  h_table_[static_cast<size_t>(key)] = device_ + static_cast<uint64_t>(slot) * stride_;
  table_dirty_ = true;
}

void CudaExpertCache::Record(int layer, std::span<const int> experts) {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(mapped_);
  const uint64_t bytes = blob_sizes_[static_cast<size_t>(layer)];
  for (int e : experts) {
    const size_t key = static_cast<size_t>(layer) * experts_ + e;
    ++stats_.requests;
    if (slot_of_key_[key] >= 0) {
      ++stats_.hits;
    } else {
      ++stats_.misses;
      stats_.bytes_mapped += bytes;
      if (!candidate_[key]) {
        candidate_[key] = 1;
        candidates_.push_back(static_cast<int>(key));
      }
    }
    key_score_[key] += inc_;
    key_last_[key] = step_;
  }
}

Status CudaExpertCache::FinishPromotions(bool wait) {
  while (!batches_.empty()) {
    Batch& b = batches_.front();
    const cudaError_t q =
        wait ? cudaEventSynchronize(AsEvent(b.done)) : cudaEventQuery(AsEvent(b.done));
    if (q == cudaErrorNotReady) break;
    RW_CUDA_RETURN_IF_ERROR(q, "expert promotion");
    for (const auto& [slot, key] : b.items) {
      slots_[static_cast<size_t>(slot)].loading = false;
      loading_[static_cast<size_t>(key)] = 0;
      PointAtSlot(key, slot);
    }
    free_events_.push_back(b.done);
    batches_.erase(batches_.begin());
  }
  return Status::Ok();
}

Status CudaExpertCache::Maintain(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!mapped_) return Status::Ok();
  RW_RETURN_IF_ERROR(FinishPromotions(/*wait=*/false));
  // Hottest candidates first, each against the coldest settled slot; a candidate no hotter than
  // that slot's expert ends the round (the rest are colder still).
  Batch batch;
  if (max_promotions_ > 0 && batches_.size() < kMaxBatches && !candidates_.empty()) {
    std::sort(candidates_.begin(), candidates_.end(), [&](int a, int b) {
      const size_t ka = static_cast<size_t>(a), kb = static_cast<size_t>(b);
      if (key_score_[ka] != key_score_[kb]) return key_score_[ka] > key_score_[kb];
      if (key_last_[ka] != key_last_[kb]) return key_last_[ka] > key_last_[kb];
      return a < b;
    });
    const std::vector<uint8_t> none;
    for (int key : candidates_) {
      if (static_cast<int>(batch.items.size()) >= max_promotions_) break;
      const size_t k = static_cast<size_t>(key);
      if (slot_of_key_[k] >= 0 || loading_[k]) continue;
      const int64_t v = Victim(none);
      if (v < 0) break;
      Slot& s = slots_[static_cast<size_t>(v)];
      if (s.key >= 0) {
        if (!(key_score_[k] > key_score_[static_cast<size_t>(s.key)])) break;
        PointAtHost(s.key);  // uploaded below, before the copy may overwrite the slot
      }
      s.key = key;
      s.loading = true;
      loading_[k] = 1;
      batch.items.push_back({v, key});
    }
  }
  for (int key : candidates_) candidate_[static_cast<size_t>(key)] = 0;
  candidates_.clear();
  cudaStream_t s = AsStream(stream);
  const size_t n = static_cast<size_t>(layers_) * experts_;
  if (table_dirty_) {
    // In stream order: work queued after this reads the new table, work before it the old one.
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(table_, h_table_, n * sizeof(void*), cudaMemcpyHostToDevice, s),
        "expert table");
    table_dirty_ = false;
  }
  if (!batch.items.empty()) {
    // A victim slot is overwritten only after every kernel queued so far (which may still read
    // it through the old table) and the table upload that points its expert back at the host.
    cudaStream_t copy = AsStream(copy_stream_);
    RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(table_uploaded_), s), "event");
    RW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy, AsEvent(table_uploaded_), 0), "wait");
    for (const auto& [slot, key] : batch.items) {
      const uint64_t bytes = blob_sizes_[static_cast<size_t>(key / experts_)];
      RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_ + static_cast<uint64_t>(slot) * stride_,
                                              host_blob_[static_cast<size_t>(key)], bytes,
                                              cudaMemcpyHostToDevice, copy),
                              "expert promotion");
      ++stats_.promotions;
      ++stats_.direct_copies;
      stats_.bytes_copied += bytes;
    }
    if (free_events_.empty()) {
      cudaEvent_t ev;
      RW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
      free_events_.push_back(ev);
    }
    batch.done = free_events_.back();
    free_events_.pop_back();
    RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(AsEvent(batch.done), copy), "event");
    batches_.push_back(std::move(batch));
  }
  ++step_;
  inc_ /= kDecayPerStep;
  if (inc_ > 1e100) {
    for (double& x : key_score_) x /= inc_;
    inc_ = 1.0;
  }
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
