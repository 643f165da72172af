// The slots strategy: each layer owns a fixed pool of expert-sized buffers in private memory.
// A requested expert already in a slot is a hit; a miss takes the least valuable slot (LFU
// with decay, recency breaking ties) that no request holds and no read is filling, and a pread
// on the I/O pool fills it while the forward pass computes the experts it already has.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "base/check.h"
#include "base/hash.h"
#include "base/timer.h"
#include "experts/blob_read.h"
#include "experts/expert_store.h"
#include "experts/read_queue.h"

namespace rw {
namespace {

// Popularity halves after ~35 requests of a layer: recent routing dominates, old favourites fade.
constexpr double kDecay = 0.98;

class SlotExpertStore final : public ExpertStore {
 public:
  explicit SlotExpertStore(const ExpertStoreOptions& o) : opt_(o) {}
  ~SlotExpertStore() override {
    // Drain reads in flight before the buffers go away.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return loading_ == 0; });
    lock.unlock();
    for (Layer& L : layers_) {
      if (L.mem != nullptr) munmap(L.mem, L.mem_bytes);
      CloseBlobSource(L.src);
    }
  }

  Status Open(const ModelDir& dir) {
    RW_ASSIGN_OR_RETURN(io_, ReadQueue::Create(opt_.io_backend, opt_.io_threads));
    const ExpertIndex* idx = dir.experts();
    if (idx == nullptr)
      return Error(ErrorCode::kNotFound, "{}: the model has no routed experts", dir.path());
    num_experts_ = idx->num_experts;
    slots_ = opt_.slots_per_layer;
    if (slots_ < 1)
      return Error(ErrorCode::kInvalidArgument, "the slots store needs at least 1 slot per layer");
    slots_ = std::min(slots_, num_experts_);
    layers_ = std::vector<Layer>(idx->layers.size());
    for (size_t l = 0; l < idx->layers.size(); ++l) {
      const ExpertLayerInfo& info = idx->layers[l];
      Layer& L = layers_[l];
      L.info = &info;
      RW_ASSIGN_OR_RETURN(
          L.src, OpenBlobSource(dir.FilePath(info.file), info.layout.stride, num_experts_));
      L.mem_bytes = info.layout.stride * static_cast<uint64_t>(slots_);
      void* p =
          mmap(nullptr, L.mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED)
        return Error(ErrorCode::kResourceExhausted, "cannot reserve {} bytes of expert slots: {}",
                     L.mem_bytes, std::strerror(errno));
      L.mem = static_cast<uint8_t*>(p);
      L.slots.resize(slots_);
      L.pinned.assign(slots_, 0);
      L.slot_of.assign(num_experts_, -1);
      L.score.assign(num_experts_, 0.0);
      L.last_use.assign(num_experts_, 0);
    }
    return Status::Ok();
  }

  Status Begin(int layer, std::span<const int> experts, uint8_t* resident) override {
    RW_RETURN_IF_ERROR(CheckArgs(layer, experts));
    Layer& L = layers_[layer];
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !L.busy; });
    L.busy = true;
    ++tick_;
    for (double& s : L.score) s *= kDecay;
    const size_t n = experts.size();
    L.req.assign(n, -1);
    // Hits (and reads already under way) first, so misses never evict an expert asked for now.
    for (size_t i = 0; i < n; ++i) {
      const int e = experts[i];
      L.score[e] += 1.0;
      L.last_use[e] = tick_;
      const int s = L.slot_of[e];
      if (resident) resident[i] = 0;
      if (s < 0) continue;
      Slot& slot = L.slots[s];
      L.req[i] = s;
      L.pinned[s] = 1;
      if (slot.prefetched) {
        slot.prefetched = false;
        ++stats_.prefetch_used;
      }
      if (slot.state == State::kReady) {
        if (resident) resident[i] = 1;
        ++stats_.hits;
      } else if (slot.state == State::kFailed) {
        StartRead(layer, s, e, /*demand=*/true);  // a failed early read: try again
        ++stats_.misses;
      } else {
        io_->Promote(slot.job);  // an early read turned into a demand
        ++stats_.misses;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (L.req[i] >= 0) continue;
      int s = -1;
      cv_.wait(lock, [&] { return (s = Victim(L)) >= 0; });
      L.req[i] = s;
      L.pinned[s] = 1;
      StartRead(layer, s, experts[i], /*demand=*/true);
      ++stats_.misses;
    }
    stats_.acquires += n;
    stats_.bytes_acquired += n * L.info->layout.blob_size;
    return Status::Ok();
  }

  Result<ExpertRef> Wait(int layer, size_t i) override {
    Layer& L = layers_[layer];
    std::unique_lock<std::mutex> lock(mu_);
    CHECK(L.busy && i < L.req.size());
    const int s = L.req[i];
    Slot& slot = L.slots[s];
    if (slot.state == State::kLoading) {
      Stopwatch sw;
      cv_.wait(lock, [&] { return slot.state != State::kLoading; });
      stats_.wait_seconds += sw.Seconds();
    }
    if (slot.state == State::kFailed) {
      Status err = slot.error;
      // Forget the blob so a later request reads it again.
      L.slot_of[slot.expert] = -1;
      slot = Slot{};
      return err;
    }
    return ExpertRef{L.mem + L.info->layout.stride * static_cast<uint64_t>(s), &L.info->layout};
  }

  void Release(int layer) override {
    Layer& L = layers_[layer];
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int s : L.req)
        if (s >= 0) L.pinned[s] = 0;
      L.req.clear();
      L.busy = false;
    }
    cv_.notify_all();
  }

  void Prefetch(int layer, std::span<const int> experts) override {
    if (!CheckArgs(layer, experts).ok()) return;
    Layer& L = layers_[layer];
    std::lock_guard<std::mutex> lock(mu_);
    for (int e : experts) {
      if (L.slot_of[e] >= 0) continue;
      const int s = Victim(L);
      if (s < 0) return;
      // Only stale experts make room for a guess.
      const Slot& v = L.slots[s];
      if (v.expert >= 0 && L.score[v.expert] >= L.score[e] + 0.5) continue;
      StartRead(layer, s, e, /*demand=*/false);
      L.slots[s].prefetched = true;
      ++stats_.prefetches;
    }
  }

  int capacity_per_layer() const override { return slots_; }
  ExpertStoreStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  const char* kind() const override { return "slots"; }
  const char* io_backend() const override { return io_->backend(); }

 private:
  enum class State { kEmpty, kLoading, kReady, kFailed };
  struct Slot {
    int expert = -1;
    State state = State::kEmpty;
    uint64_t job = 0;
    bool prefetched = false;
    Status error;
  };
  struct Layer {
    const ExpertLayerInfo* info = nullptr;
    BlobSource src;
    uint8_t* mem = nullptr;
    uint64_t mem_bytes = 0;
    std::vector<Slot> slots;
    std::vector<uint8_t> pinned;  // per slot: held by the current request
    std::vector<int> slot_of;     // per expert: its slot or -1
    std::vector<double> score;    // per expert: decayed request count
    std::vector<uint64_t> last_use;
    bool busy = false;
    std::vector<int> req;  // the current request's slot per expert
  };

  Status CheckArgs(int layer, std::span<const int> experts) const {
    if (layer < 0 || layer >= static_cast<int>(layers_.size()))
      return Error(ErrorCode::kInvalidArgument, "expert layer {} out of range", layer);
    if (static_cast<int>(experts.size()) > slots_)
      return Error(ErrorCode::kInvalidArgument,
                   "{} experts requested at once but layers hold {} slots", experts.size(), slots_);
    for (int e : experts)
      if (e < 0 || e >= num_experts_)
        return Error(ErrorCode::kInvalidArgument, "expert {} out of range", e);
    return Status::Ok();
  }

  // The slot to refill: an empty one, else the least valuable one that is neither held by the
  // current request nor being filled. -1 when there is none right now. Caller holds mu_.
  int Victim(const Layer& L) const {
    int best = -1;
    for (int s = 0; s < slots_; ++s) {
      const Slot& slot = L.slots[s];
      if (L.pinned[s] || slot.state == State::kLoading) continue;
      if (slot.expert < 0) return s;
      if (best < 0) {
        best = s;
        continue;
      }
      const int a = slot.expert, b = L.slots[best].expert;
      if (L.score[a] < L.score[b] || (L.score[a] == L.score[b] && L.last_use[a] < L.last_use[b]))
        best = s;
    }
    return best;
  }

  // Caller holds mu_.
  void StartRead(int layer, int s, int e, bool demand) {
    Layer& L = layers_[layer];
    Slot& slot = L.slots[s];
    if (slot.expert >= 0) L.slot_of[slot.expert] = -1;
    slot = Slot{};
    slot.expert = e;
    slot.state = State::kLoading;
    L.slot_of[e] = s;
    ++loading_;
    slot.job = SubmitRead(layer, s, e, demand, /*attempt=*/0);
  }

  // Queues the read of expert e into slot s; a checksum mismatch is read once more.
  uint64_t SubmitRead(int layer, int s, int e, bool demand, int attempt) {
    Layer& L = layers_[layer];
    ReadJob job = BlobJob(L.src, e, L.mem + L.src.stride * static_cast<uint64_t>(s));
    job.done = [this, layer, s, e, demand, attempt](const Status& io, const uint8_t* data) {
      Layer& L = layers_[layer];
      const BlobCheck c =
          CheckBlobRead(L.src, layer, e, attempt, opt_.verify, L.info->xxh3[e], io, data);
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.bytes_read += L.src.stride;
        if (c.mismatch) ++stats_.checksum_failures;
      }
      if (c.retry) {
        SubmitRead(layer, s, e, true, 1);
        return;
      }
      const Status& st = c.status;
      {
        std::lock_guard<std::mutex> lock(mu_);
        Slot& slot = L.slots[s];
        slot.state = st.ok() ? State::kReady : State::kFailed;
        slot.error = st;
        --loading_;
      }
      cv_.notify_all();
    };
    return io_->Submit(std::move(job), demand);
  }

  ExpertStoreOptions opt_;
  int num_experts_ = 0, slots_ = 0;
  std::vector<Layer> layers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ExpertStoreStats stats_;
  uint64_t tick_ = 0;
  int loading_ = 0;
  std::unique_ptr<ReadQueue> io_;  // last: its threads stop before the layers go away
};

}  // namespace

Result<std::unique_ptr<ExpertStore>> OpenSlotExpertStore(const ModelDir& dir,
                                                         const ExpertStoreOptions& options) {
  auto store = std::make_unique<SlotExpertStore>(options);
  RW_RETURN_IF_ERROR(store->Open(dir));
  return std::unique_ptr<ExpertStore>(std::move(store));
}

}  // namespace rw
