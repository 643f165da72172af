#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace rw {
namespace {

// How long a thread polls for its next event (a new job, the end of a job) before sleeping on
// the condition variable. Decode issues small jobs back to back, microseconds apart, and waking
// a sleeping thread costs tens of microseconds on a virtual machine (the futex wake has to
// reschedule an idle vCPU). Short enough that an idle pool costs nothing and a busy machine
// loses little: workers spinning for milliseconds cost decode a third on a 2-core machine
// shared with a build.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls done() for up to kSpin; true when it became true.
template <typename Pred>
bool SpinFor(Pred done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    lock.unlock();
    SpinFor([&] {
      return stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_relaxed) != seen;
    });
    lock.lock();
    cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_chunk_ < job_chunks_) {
      size_t c = next_chunk_++;
      const auto* job = job_;
      size_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
      lock.unlock();
      (*job)(b, e, index);
      lock.lock();
      if (++chunks_done_ == job_chunks_) cv_done_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(size_t n, size_t grain,
                             const std::function<void(size_t, size_t, int)>& fn,
                             int chunks_per_thread) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  size_t max_chunks =
      static_cast<size_t>(n_threads_) * static_cast<size_t>(std::max(1, chunks_per_thread));
  size_t chunks = std::min(max_chunks, (n + grain - 1) / grain);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n, 0);
    return;
  }
  size_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  job_chunks_ = chunks;
  next_chunk_ = 0;
  chunks_done_ = 0;
  ++generation_;
  cv_start_.notify_all();
  while (next_chunk_ < job_chunks_) {
    size_t c = next_chunk_++;
    size_t b = c * chunk, e = std::min(n, b + chunk);
    lock.unlock();
    fn(b, e, 0);
    lock.lock();
    ++chunks_done_;
  }
  if (chunks_done_ != job_chunks_) {
    lock.unlock();
    SpinFor([&] { return chunks_done_.load(std::memory_order_relaxed) == chunks; });
    lock.lock();
  }
  cv_done_.wait(lock, [&] { return chunks_done_ == job_chunks_; });
  job_ = nullptr;
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool pool([] {
    const char* env = std::getenv("REDWING_THREADS");
    return env != nullptr ? std::atoi(env) : 0;
  }());
  return pool;
}

}  // namespace rw
