// A fixed pool of worker threads with a blocking ParallelFor; the caller's thread takes part.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rw {

class ThreadPool {
 public:
  // n_threads includes the calling thread; 0 means hardware concurrency.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) over [0, n) split into contiguous chunks of at least
  // `grain` items, at most chunks_per_thread per thread; returns when all are done. Threads
  // take chunks in order as they come free, so with several chunks per thread a thread that
  // starts late (a worker waking up) takes fewer of them. Not reentrant.
  void ParallelFor(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& fn,
                   int chunks_per_thread = 1);

  // The process-wide pool (REDWING_THREADS or hardware concurrency).
  static ThreadPool& Default();

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunk_ = 0, job_chunks_ = 0;
  size_t next_chunk_ = 0;
  // Written under mu_; atomic so a thread can spin on them briefly before sleeping.
  std::atomic<size_t> chunks_done_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace rw
