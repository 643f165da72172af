// A small pool of I/O threads with two priorities: demand reads (a layer is waiting) go before
// early reads (prefetch). A queued early read can be promoted when it turns out to be needed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rw {

class ReadQueue {
 public:
  explicit ReadQueue(int threads);
  ~ReadQueue();
  ReadQueue(const ReadQueue&) = delete;
  ReadQueue& operator=(const ReadQueue&) = delete;

  // Returns an id for Promote.
  uint64_t Submit(std::function<void()> job, bool demand);
  // Moves a queued early read to the demand queue; false if it already started or finished.
  bool Promote(uint64_t id);

 private:
  struct Job {
    uint64_t id;
    std::function<void()> fn;
  };
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> demand_, early_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rw
