#include "experts/read_queue.h"

#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/timer.h"
#include "base/trace.h"

namespace rw {
namespace {

// The two-priority queue both backends pull from.
class QueueBase : public ReadQueue {
 public:
  uint64_t Submit(ReadJob job, bool demand) override {
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = next_id_++;
      (demand ? demand_ : early_).push_back(Entry{id, std::move(job)});
    }
    cv_.notify_one();
    Wake();
    return id;
  }

  bool Promote(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it =
        std::find_if(early_.begin(), early_.end(), [&](const Entry& e) { return e.id == id; });
    if (it == early_.end()) return false;
    demand_.push_back(std::move(*it));
    early_.erase(it);
    return true;
  }

 protected:
  struct Entry {
    uint64_t id = 0;
    ReadJob job;
  };
  virtual void Wake() {}

  // Next job, demand first. block: wait for one (false once stopping and empty).
  bool Pop(Entry* out, bool block) {
    std::unique_lock<std::mutex> lock(mu_);
    if (block) cv_.wait(lock, [&] { return stop_ || !demand_.empty() || !early_.empty(); });
    std::deque<Entry>* q = !demand_.empty() ? &demand_ : !early_.empty() ? &early_ : nullptr;
    if (q == nullptr) return false;
    *out = std::move(q->front());
    q->pop_front();
    return true;
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    Wake();
  }
  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> demand_, early_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
};

Status PreadAll(const ReadJob& j, uint8_t* dst) {
  uint64_t done = 0;
  while (done < j.length) {
    const ssize_t r =
        ::pread(j.fd, dst + done, j.length - done, static_cast<off_t>(j.offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Error(ErrorCode::kIo, "{}: read of {} bytes at {} failed: {}", j.path, j.length - done,
                   j.offset + done, std::strerror(errno));
    }
    if (r == 0)
      return Error(ErrorCode::kCorrupt, "{}: file ends at {} (expected {} more bytes)", j.path,
                   j.offset + done, j.length - done);
    done += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

class PreadQueue final : public QueueBase {
 public:
  explicit PreadQueue(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~PreadQueue() override {
    Stop();
    for (std::thread& t : threads_) t.join();
  }
  const char* backend() const override { return "pread"; }

 private:
  void Loop() {
    trace::SetThreadName("expert-io");
    std::vector<uint8_t> scratch;
    Entry e;
    // Queued work is finished even when stopping: callers wait for their reads.
    while (Pop(&e, /*block=*/true)) {
      uint8_t* dst = e.job.dst;
      if (dst == nullptr) {
        if (scratch.size() < e.job.length) scratch.resize(e.job.length);
        dst = scratch.data();
      }
      const int64_t t0 = NowNanos();
      const Status st = PreadAll(e.job, dst);
      trace::Complete("read", "io", t0, NowNanos(), "bytes", static_cast<int64_t>(e.job.length));
      e.job.done(st, dst);
    }
  }
  std::vector<std::thread> threads_;
};

// One thread keeps up to `depth` reads in flight. Submit wakes it through an eventfd the ring
// polls, so new work never waits for a completion.
class UringQueue final : public QueueBase {
 public:
  ~UringQueue() override {
    if (thread_.joinable()) {
      Stop();
      thread_.join();
    }
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (efd_ >= 0) close(efd_);
  }
  const char* backend() const override { return "io_uring"; }

  Status Init(int depth) {
    if (const char* off = std::getenv("REDWING_DISABLE_IO_URING"); off != nullptr && *off != '\0')
      return Error(ErrorCode::kUnsupported, "io_uring disabled by REDWING_DISABLE_IO_URING");
    depth_ = std::max(1, depth);
    const int r = io_uring_queue_init(static_cast<unsigned>(depth_ + 1), &ring_, 0);
    if (r < 0) return Error(ErrorCode::kUnsupported, "io_uring_queue_init: {}", std::strerror(-r));
    ring_ok_ = true;
    efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd_ < 0) return Error(ErrorCode::kIo, "eventfd: {}", std::strerror(errno));
    RW_RETURN_IF_ERROR(Probe());
    slots_.resize(depth_);
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

 private:
  static constexpr uint64_t kWakeTag = ~uint64_t{0};
  struct InFlight {
    bool busy = false;
    Entry e;
    uint8_t* dst = nullptr;
    std::vector<uint8_t> scratch;
    uint64_t done = 0;
    int64_t started_ns = 0;
  };

  void Wake() override {
    if (efd_ >= 0) {
      const uint64_t one = 1;
      (void)!write(efd_, &one, sizeof one);
    }
  }

  // A kernel can offer io_uring yet refuse reads (seccomp, old kernels): read a byte for real.
  Status Probe() {
    const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error(ErrorCode::kIo, "probe open: {}", std::strerror(errno));
    char b[16];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, fd, b, sizeof b, 0);
    io_uring_sqe_set_data64(sqe, 1);
    int r = io_uring_submit(&ring_);
    io_uring_cqe* cqe = nullptr;
    if (r >= 0) r = io_uring_wait_cqe(&ring_, &cqe);
    const int res = (r >= 0 && cqe != nullptr) ? cqe->res : r;
    if (cqe != nullptr) io_uring_cqe_seen(&ring_, cqe);
    close(fd);
    if (res != static_cast<int>(sizeof b))
      return Error(ErrorCode::kUnsupported, "io_uring read probe returned {}", res);
    return Status::Ok();
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_poll_add(sqe, efd_, POLLIN);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void SubmitRead(size_t i) {
    InFlight& f = slots_[i];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, f.e.job.fd, f.dst + f.done,
                       static_cast<unsigned>(f.e.job.length - f.done), f.e.job.offset + f.done);
    io_uring_sqe_set_data64(sqe, i);
  }

  void Loop() {
    trace::SetThreadName("expert-io_uring");
    ArmWake();
    int in_flight = 0;
    for (;;) {
      // Fill free slots from the queue.
      for (size_t i = 0; i < slots_.size() && in_flight < depth_; ++i) {
        if (slots_[i].busy) continue;
        Entry e;
        if (!Pop(&e, /*block=*/false)) break;
        InFlight& f = slots_[i];
        f.busy = true;
        f.e = std::move(e);
        f.done = 0;
        f.started_ns = NowNanos();
        f.dst = f.e.job.dst;
        if (f.dst == nullptr) {
          if (f.scratch.size() < f.e.job.length) f.scratch.resize(f.e.job.length);
          f.dst = f.scratch.data();
        }
        SubmitRead(i);
        ++in_flight;
      }
      if (in_flight == 0 && stopping()) return;  // the queue is empty: the fill took it all
      io_uring_submit(&ring_);
      io_uring_cqe* cqe = nullptr;
      const int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r < 0) {
        RW_LOG_WARN("io_uring wait failed: {}", std::strerror(-r));
        continue;
      }
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (tag == kWakeTag) {
        uint64_t v;
        (void)!read(efd_, &v, sizeof v);
        ArmWake();
        continue;
      }
      InFlight& f = slots_[tag];
      if (res == -EINTR || res == -EAGAIN) {
        SubmitRead(tag);
        continue;
      }
      Status st;
      if (res < 0) {
        st = Error(ErrorCode::kIo, "{}: read of {} bytes at {} failed: {}", f.e.job.path,
                   f.e.job.length - f.done, f.e.job.offset + f.done, std::strerror(-res));
      } else if (res == 0) {
        st = Error(ErrorCode::kCorrupt, "{}: file ends at {} (expected {} more bytes)",
                   f.e.job.path, f.e.job.offset + f.done, f.e.job.length - f.done);
      } else {
        f.done += static_cast<uint64_t>(res);
        if (f.done < f.e.job.length) {  // a short read: ask for the rest
          SubmitRead(tag);
          continue;
        }
      }
      f.busy = false;
      --in_flight;
      trace::Complete("read", "io", f.started_ns, NowNanos(), "bytes",
                      static_cast<int64_t>(f.e.job.length));
      f.e.job.done(st, f.dst);
    }
  }

  io_uring ring_{};
  bool ring_ok_ = false;
  int efd_ = -1;
  int depth_ = 1;
  std::vector<InFlight> slots_;
  std::thread thread_;
};

}  // namespace

const char* IoBackendName(IoBackend backend) {
  switch (backend) {
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kPread:
      return "pread";
    case IoBackend::kAuto:
      break;
  }
  return "auto";
}

Result<IoBackend> ParseIoBackend(std::string_view name) {
  if (name == "auto") return IoBackend::kAuto;
  if (name == "io_uring") return IoBackend::kIoUring;
  if (name == "pread") return IoBackend::kPread;
  return Error(ErrorCode::kInvalidArgument, "I/O backend must be auto, io_uring or pread, not '{}'",
               name);
}

Result<std::unique_ptr<ReadQueue>> ReadQueue::Create(IoBackend backend, int depth) {
  if (backend != IoBackend::kPread) {
    auto q = std::make_unique<UringQueue>();
    Status st = q->Init(depth);
    if (st.ok()) return std::unique_ptr<ReadQueue>(std::move(q));
    if (backend == IoBackend::kIoUring) return st;
    RW_LOG_DEBUG("io_uring unavailable ({}); expert reads use pread threads", st.message());
  }
  return std::unique_ptr<ReadQueue>(std::make_unique<PreadQueue>(depth));
}

}  // namespace rw
