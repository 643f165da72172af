#include "experts/read_queue.h"

#include <algorithm>

namespace rw {

ReadQueue::ReadQueue(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Loop(); });
}

ReadQueue::~ReadQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

uint64_t ReadQueue::Submit(std::function<void()> job, bool demand) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    (demand ? demand_ : early_).push_back(Job{id, std::move(job)});
  }
  cv_.notify_one();
  return id;
}

bool ReadQueue::Promote(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(early_.begin(), early_.end(), [&](const Job& j) { return j.id == id; });
  if (it == early_.end()) return false;
  demand_.push_back(std::move(*it));
  early_.erase(it);
  return true;
}

void ReadQueue::Loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !demand_.empty() || !early_.empty(); });
      // Queued work is finished even when stopping: a slot must never stay "loading".
      if (stop_ && demand_.empty() && early_.empty()) return;
      std::deque<Job>& q = !demand_.empty() ? demand_ : early_;
      job = std::move(q.front());
      q.pop_front();
    }
    job.fn();
  }
}

}  // namespace rw
