// The mmap strategy: layer files mapped read-only, the page cache is the expert cache. Begin asks
// the kernel which requested blobs are fully resident (mincore); the others are read with pread
// on the I/O pool (which fills the page cache the mapping then hits), so compute can start on the
// resident experts at once. Each blob is checked against its XXH3 the first time it is used.
//
// Under memory pressure (a memory cgroup smaller than the model) the kernel's page LRU picks
// what to evict, and it keeps fewer useful experts than fit: measured at 8 GiB, the hit rate
// matched an ideal LRU over ~1,500 experts where ~2,000 fit. Once the store sees the kernel
// evict an expert it had read, it counts the experts that are resident, aims a little below
// that, and before each read drops the least valuable resident expert itself (LFU with decay,
// recency breaking ties, as the slots store): whole blobs chosen by use, not pages by age. The
// aim grows slowly while the kernel evicts nothing and is recounted when it evicts again.
// The drops themselves run on a thread of their own, off the computing thread and the lock.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "base/check.h"
#include "base/hash.h"
#include "base/timer.h"
#include "base/trace.h"
#include "experts/blob_read.h"
#include "experts/expert_store.h"
#include "experts/read_queue.h"

namespace rw {
namespace {

bool Resident(const uint8_t* p, uint64_t n, std::vector<unsigned char>* vec) {
  const uint64_t page = 4096;
  vec->resize((n + page - 1) / page);
  if (mincore(const_cast<uint8_t*>(p), n, vec->data()) != 0) return false;
  for (unsigned char c : *vec)
    if ((c & 1) == 0) return false;
  return true;
}

class MmapExpertStore final : public ExpertStore {
 public:
  explicit MmapExpertStore(const ExpertStoreOptions& o) : opt_(o) {}
  ~MmapExpertStore() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return loading_ == 0; });
    stop_drops_ = true;
    drops_.clear();
    lock.unlock();
    drop_cv_.notify_all();
    if (dropper_.joinable()) dropper_.join();
    for (Layer& L : layers_) CloseBlobSource(L.src);
  }

  Status Open(const ModelDir& dir) {
    RW_ASSIGN_OR_RETURN(io_, ReadQueue::Create(opt_.io_backend, opt_.io_threads));
    dropper_ = std::thread([this] { DropLoop(); });
    const ExpertIndex* idx = dir.experts();
    if (idx == nullptr)
      return Error(ErrorCode::kNotFound, "{}: the model has no routed experts", dir.path());
    num_experts_ = idx->num_experts;
    layers_ = std::vector<Layer>(idx->layers.size());
    for (size_t l = 0; l < idx->layers.size(); ++l) {
      const ExpertLayerInfo& info = idx->layers[l];
      Layer& L = layers_[l];
      L.info = &info;
      RW_ASSIGN_OR_RETURN(
          L.src, OpenBlobSource(dir.FilePath(info.file), info.layout.stride, num_experts_));
      RW_ASSIGN_OR_RETURN(L.map, MappedFile::Open(L.src.path));
      L.verified.assign(num_experts_, 0);
      L.prefetched.assign(num_experts_, 0);
      L.held.assign(num_experts_, 0);
      L.score.assign(num_experts_, 0.0);
      L.last_use.assign(num_experts_, 0);
      L.dropped.assign(num_experts_, 0);
    }
    return Status::Ok();
  }

  std::vector<std::pair<const uint8_t*, uint64_t>> MappedRegions() const override {
    // A caller may now hold the mappings (a GPU pinning them): never drop pages under it.
    regions_out_ = true;
    std::vector<std::pair<const uint8_t*, uint64_t>> out;
    for (const Layer& L : layers_) out.push_back({L.map.data(), L.map.size()});
    return out;
  }

  Status Begin(int layer, std::span<const int> experts, uint8_t* resident) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()))
      return Error(ErrorCode::kInvalidArgument, "expert layer {} out of range", layer);
    for (int e : experts)
      if (e < 0 || e >= num_experts_)
        return Error(ErrorCode::kInvalidArgument, "expert {} out of range", e);
    Layer& L = layers_[layer];
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !L.busy; });
    L.busy = true;
    const size_t n = experts.size();
    L.req.assign(n, Req{});
    ++tick_;
    for (double& s : L.score) s *= kDecay;
    for (int e : experts) {
      L.score[e] += 1.0;
      L.last_use[e] = tick_;
    }
    for (size_t i = 0; i < n; ++i) {
      const int e = experts[i];
      Req& r = L.req[i];
      r.expert = e;
      if (L.prefetched[e]) {
        L.prefetched[e] = 0;
        ++stats_.prefetch_used;
      }
      const bool in_memory = Resident(Blob(L, e), L.src.stride, &mincore_buf_);
      if (resident) resident[i] = in_memory ? 1 : 0;
      if (in_memory) {
        ++stats_.hits;
        Hold(L, e);
        r.state = ReqState::kReady;
        continue;
      }
      if (L.held[e]) KernelEvicted(L, e);
      if (L.dropped[e]) ++stats_.dropped_reread;
      MakeRoom(layer, experts);
      Hold(L, e);
      ++stats_.misses;
      r.state = ReqState::kLoading;
      ++loading_;
      SubmitRead(layer, e, /*demand=*/true, /*attempt=*/0, static_cast<int>(i));
    }
    stats_.acquires += n;
    stats_.bytes_acquired += n * L.info->layout.blob_size;
    return Status::Ok();
  }

  Result<ExpertRef> Wait(int layer, size_t i) override {
    Layer& L = layers_[layer];
    std::unique_lock<std::mutex> lock(mu_);
    CHECK(L.busy && i < L.req.size());
    Req& r = L.req[i];
    if (r.state == ReqState::kLoading) {
      Stopwatch sw;
      cv_.wait(lock, [&] { return r.state != ReqState::kLoading; });
      stats_.wait_seconds += sw.Seconds();
    }
    if (r.state == ReqState::kFailed) return r.error;
    const int e = r.expert;
    if (opt_.verify && !L.verified[e]) {
      // Resident but never checked: hash it from the mapping; on a mismatch drop the cached
      // pages and read the file again.
      lock.unlock();
      Status st = VerifyMapped(L, layer, e);
      lock.lock();
      if (!st.ok()) return st;
      L.verified[e] = 1;
    }
    return ExpertRef{Blob(L, e), &L.info->layout};
  }

  void Release(int layer) override {
    Layer& L = layers_[layer];
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Reads still under way (after an early error return) finish before the request goes.
      cv_.wait(lock, [&] {
        for (const Req& r : L.req)
          if (r.state == ReqState::kLoading) return false;
        return true;
      });
      L.req.clear();
      L.busy = false;
    }
    cv_.notify_all();
  }

  void Prefetch(int layer, std::span<const int> experts) override {
    if (layer < 0 || layer >= static_cast<int>(layers_.size())) return;
    Layer& L = layers_[layer];
    std::lock_guard<std::mutex> lock(mu_);
    for (int e : experts) {
      if (e < 0 || e >= num_experts_ || Resident(Blob(L, e), L.src.stride, &mincore_buf_)) continue;
      ++stats_.prefetches;
      if (L.dropped[e]) {
        ++stats_.dropped_reread;
        L.dropped[e] = 0;
      }
      ++loading_;
      L.prefetched[e] = 1;
      SubmitRead(layer, e, /*demand=*/false, /*attempt=*/0, /*req=*/-1);
    }
  }

  int capacity_per_layer() const override { return num_experts_; }
  ExpertStoreStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  const char* kind() const override { return "mmap"; }
  const char* io_backend() const override { return io_->backend(); }

 private:
  enum class ReqState { kReady, kLoading, kFailed };
  struct Req {
    int expert = -1;
    ReqState state = ReqState::kReady;
    Status error;
  };
  struct Layer {
    const ExpertLayerInfo* info = nullptr;
    MappedFile map;
    BlobSource src;
    std::vector<uint8_t> verified;    // per expert: its XXH3 matched once
    std::vector<uint8_t> prefetched;  // per expert: read early, not yet requested
    std::vector<uint8_t> held;        // per expert: read or seen resident, not dropped since
    std::vector<double> score;        // per expert: decayed request count
    std::vector<uint64_t> last_use;   // per expert: tick_ of its last request
    std::vector<uint8_t> dropped;     // per expert: the store dropped it and has not read it since
    bool busy = false;
    std::vector<Req> req;
  };

  static const uint8_t* Blob(const Layer& L, int e) {
    return L.map.data() + L.src.stride * static_cast<uint64_t>(e);
  }

  // Per request of a layer, every expert's score of that layer decays by this much.
  static constexpr double kDecay = 0.98;

  // Caller holds mu_ (for all of the residency bookkeeping below).
  void Hold(Layer& L, int e) {
    L.dropped[e] = 0;
    if (L.held[e]) return;
    L.held[e] = 1;
    ++held_count_;
  }

  void Unhold(Layer& L, int e) {
    if (!L.held[e]) return;
    L.held[e] = 0;
    --held_count_;
  }

  // Expert e, read or seen resident before, is gone: the kernel is reclaiming. Recount what is
  // resident (at most every kRecountTicks requests: the count costs a few milliseconds) and
  // aim a little below it.
  void KernelEvicted(Layer& L, int e) {
    Unhold(L, e);
    ++stats_.evicted;
    if (regions_out_) return;
    if (target_ >= 0 && tick_ - last_recount_ < kRecountTicks) return;
    last_recount_ = tick_;
    Recount();
    target_ = std::max<int64_t>(1, held_count_ - std::max<int64_t>(1, held_count_ / 128));
    misses_since_aim_ = 0;
  }

  // Which blobs are resident, judged by their first and last pages (the kernel reclaims a blob
  // read in one go mostly as a whole; Begin checks every page of the blobs it hands out).
  void Recount() {
    unsigned char v = 0;
    for (Layer& L : layers_) {
      for (int e = 0; e < num_experts_; ++e) {
        const uint8_t* b = Blob(L, e);
        const uint64_t last = (L.src.stride - 1) / 4096 * 4096;
        const bool in = mincore(const_cast<uint8_t*>(b), 1, &v) == 0 && (v & 1) &&
                        mincore(const_cast<uint8_t*>(b + last), 1, &v) == 0 && (v & 1);
        if (in)
          Hold(L, e);
        else
          Unhold(L, e);
      }
    }
  }

  // Before a read: at or above the aim, drop the least valuable resident expert that is not
  // part of the current request, of a layer another request holds, nor being read early.
  void MakeRoom(int layer, std::span<const int> requested) {
    if (target_ < 0 || regions_out_) return;
    if (++misses_since_aim_ >= kGrowEvery) {
      target_ += kGrowBy;
      misses_since_aim_ = 0;
    }
    while (held_count_ >= target_) {
      int vl = -1, ve = -1;
      for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
        const Layer& L = layers_[l];
        // Another session's request may be computing on this layer's experts right now.
        if (L.busy && l != layer) continue;
        for (int e = 0; e < num_experts_; ++e) {
          if (!L.held[e] || L.prefetched[e]) continue;
          if (l == layer && std::find(requested.begin(), requested.end(), e) != requested.end())
            continue;
          if (vl >= 0) {
            const Layer& V = layers_[vl];
            if (L.score[e] > V.score[ve] ||
                (L.score[e] == V.score[ve] && L.last_use[e] >= V.last_use[ve]))
              continue;
          }
          vl = l;
          ve = e;
        }
      }
      if (vl < 0) return;
      Layer& V = layers_[vl];
      // The drop itself (~0.75 ms of kernel work) is the dropper thread's: done here it held
      // mu_, so reads could not complete and other threads could not Wait meanwhile; done on
      // the read's I/O thread the read waited behind it.
      Unhold(V, ve);
      V.dropped[ve] = 1;
      ++stats_.dropped;
      drops_.push_back({vl, ve});
      drop_cv_.notify_one();
    }
  }

  // Unmaps each queued victim from this process, then drops its clean pages from the page
  // cache, unless it was requested again since it was chosen (the bytes stay right either way:
  // a dropped page a computation touches is read back from the file).
  void DropLoop() {
    trace::SetThreadName("expert-drop");
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      drop_cv_.wait(lock, [&] { return stop_drops_ || !drops_.empty(); });
      if (drops_.empty()) return;  // stopping
      const auto [l, e] = drops_.front();
      drops_.pop_front();
      Layer& V = layers_[l];
      if (V.dropped[e] && !regions_out_) {
        dropping_ = true;
        lock.unlock();
        {
          TraceScope t("drop", "io", "expert", e);
          madvise(const_cast<uint8_t*>(Blob(V, e)), V.src.stride, MADV_DONTNEED);
          posix_fadvise(V.src.fd, static_cast<off_t>(V.src.stride * e),
                        static_cast<off_t>(V.src.stride), POSIX_FADV_DONTNEED);
        }
        lock.lock();
        dropping_ = false;
      }
      if (drops_.empty()) drop_cv_.notify_all();  // Settle
    }
  }

  void Settle() override {
    std::unique_lock<std::mutex> lock(mu_);
    drop_cv_.wait(lock, [&] { return drops_.empty() && !dropping_; });
  }

  static constexpr uint64_t kRecountTicks = 64;  // ~2 tokens of decode
  static constexpr int kGrowEvery = 256;         // misses without an eviction...
  static constexpr int64_t kGrowBy = 8;          // ...raise the aim by this many experts

  // Reads expert e through the page cache (the bytes land in a queue buffer; the mapping then
  // finds the pages resident) and checks its XXH3; a mismatch is read once more. req >= 0: the
  // index of the current request waiting for it; -1: an early read.
  void SubmitRead(int layer, int e, bool demand, int attempt, int req) {
    Layer& L = layers_[layer];
    ReadJob job = BlobJob(L.src, e, nullptr);
    job.done = [this, layer, e, demand, attempt, req](const Status& io, const uint8_t* data) {
      Layer& L = layers_[layer];
      const BlobCheck c =
          CheckBlobRead(L.src, layer, e, attempt, opt_.verify, L.info->xxh3[e], io, data);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.bytes_read += L.src.stride;
        if (c.mismatch) ++stats_.checksum_failures;
      }
      if (c.retry) {
        posix_fadvise(L.src.fd, static_cast<off_t>(L.src.stride * e),
                      static_cast<off_t>(L.src.stride), POSIX_FADV_DONTNEED);
        SubmitRead(layer, e, demand, 1, req);
        return;
      }
      const Status& st = c.status;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (st.ok() && opt_.verify) L.verified[e] = 1;
        if (req >= 0) {
          Req& r = L.req[req];
          r.state = st.ok() ? ReqState::kReady : ReqState::kFailed;
          r.error = st;
        }
        --loading_;
      }
      cv_.notify_all();
    };
    io_->Submit(std::move(job), demand);
  }

  Status VerifyMapped(Layer& L, int layer, int e) {
    if (Xxh3_64(Blob(L, e), L.src.stride) == L.info->xxh3[e]) return Status::Ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.checksum_failures;
    }
    posix_fadvise(L.src.fd, static_cast<off_t>(L.src.stride * e), static_cast<off_t>(L.src.stride),
                  POSIX_FADV_DONTNEED);
    std::vector<uint8_t> buf(L.src.stride);
    int fails = 0;
    // The mapped bytes were the first read; this is the one re-read.
    Status st = ReadExpertBlob(L.src, layer, e, buf.data(), true, L.info->xxh3[e], &fails, 1);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.checksum_failures += fails;
    if (!st.ok()) return st;
    // The file is good now; the mapping sees the re-read pages.
    if (Xxh3_64(Blob(L, e), L.src.stride) != L.info->xxh3[e])
      return Error(ErrorCode::kCorrupt, "{}: expert {} of layer {} fails its checksum", L.src.path,
                   e, layer);
    return Status::Ok();
  }

  ExpertStoreOptions opt_;
  int num_experts_ = 0;
  std::vector<Layer> layers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ExpertStoreStats stats_;
  std::vector<unsigned char> mincore_buf_;
  int loading_ = 0;
  uint64_t tick_ = 0, last_recount_ = 0;
  int64_t held_count_ = 0;
  int64_t target_ = -1;  // experts to keep resident; -1: no pressure seen, the kernel decides
  int misses_since_aim_ = 0;
  mutable std::atomic<bool> regions_out_{false};
  // Victims MakeRoom chose, for the dropper thread.
  std::deque<std::pair<int, int>> drops_;
  std::condition_variable drop_cv_;
  bool stop_drops_ = false, dropping_ = false;
  std::thread dropper_;
  std::unique_ptr<ReadQueue> io_;
};

}  // namespace

Result<std::unique_ptr<ExpertStore>> OpenMmapExpertStore(const ModelDir& dir,
                                                         const ExpertStoreOptions& options) {
  auto store = std::make_unique<MmapExpertStore>(options);
  RW_RETURN_IF_ERROR(store->Open(dir));
  return std::unique_ptr<ExpertStore>(std::move(store));
}

}  // namespace rw
