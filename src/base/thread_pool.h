// A fixed pool of worker threads with a blocking ParallelFor; the caller's thread takes part.
#pragma once

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
  // `grain` items; returns when all are done. Not reentrant.
  void ParallelFor(size_t n, size_t grain, const std::function<void(size_t, size_t, int)>& fn);

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
  size_t next_chunk_ = 0, chunks_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace rw
