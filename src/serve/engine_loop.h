// The engine thread: the only thread that runs inference. It owns the Session (so the KV cache
// of the last conversation survives between requests) and runs queued jobs one at a time, in
// the order they came. HTTP threads submit jobs, read their streamed text, and cancel them
// (a client gone: the job leaves the queue, or generation stops between tokens or prefill
// chunks).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/generate.h"

namespace rw::serve {

// What the engine reports about a finished job.
struct JobResult {
  Status status;
  GenerateResult gen;
  double queue_seconds = 0;   // submitted to started
  int64_t experts_run = 0;    // (token, expert) pairs computed for this job
  double expert_seconds = 0;  // time in the router and experts
  // The expert store over this job: experts found resident vs read, bytes read, read waits.
  uint64_t expert_hits = 0, expert_misses = 0, expert_bytes_read = 0;
  double expert_wait_seconds = 0;
  int64_t context_tokens = 0;  // the session's length afterwards
  std::string drafter;         // the speculative drafter's name; empty: plain decoding
};

class Job {
 public:
  // client: who asked. The cached prompt of one client is never reused for another, so that
  // no client can learn from cached_tokens (or timing) what another one sent.
  Job(std::vector<int> prompt, GenerateOptions options, std::string client = "")
      : prompt_(std::move(prompt)), options_(std::move(options)), client_(std::move(client)) {}

  const std::vector<int>& prompt() const { return prompt_; }
  const std::string& client() const { return client_; }
  const GenerateOptions& options() const { return options_; }

  // HTTP side. A snapshot of what happened since the last call: waits up to timeout_ms for
  // something new.
  struct Update {
    std::string text;  // text produced since the last update
    bool started = false;
    bool done = false;
    int64_t prefill_done = 0, prefill_total = 0;
    int64_t prefill_events = 0;  // prefill chunks seen so far (changes mean progress)
  };
  Update Wait(int timeout_ms);
  void Cancel() { cancel_.store(true); }
  bool cancelled() const { return cancel_.load(); }
  // Valid once an Update said done.
  const JobResult& result() const { return result_; }

  // Engine side.
  void MarkStarted(double queue_seconds);
  void AddText(std::string_view text);
  void Progress(int64_t done, int64_t total);
  void Finish(JobResult result);
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }
  int64_t submitted_ns = 0;

 private:
  std::vector<int> prompt_;
  GenerateOptions options_;
  std::string client_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool started_ = false, done_ = false;
  int64_t prefill_done_ = 0, prefill_total_ = 0, prefill_events_ = 0;
  double queue_seconds_ = 0;
  JobResult result_;
};

struct EngineLoopOptions {
  int max_queue = 8;  // jobs waiting behind the running one
  // For tests only: each answer is forced to be these texts in turn (tokenized; the model still
  // runs every step, only the choice of token is overridden). Empty: the model chooses.
  std::vector<std::string> forced_replies;
  // Speculative decoding for every request (greedy and sampled alike; the output is plain
  // decoding's): a drafter (null: off) and draft_tokens (kDraftTokensAuto: one DraftPolicy kept
  // across requests, so what it measured and learned carries over).
  std::shared_ptr<Drafter> drafter;
  int draft_tokens = 0;
};

class EngineLoop {
 public:
  EngineLoop(std::shared_ptr<const Engine> engine, EngineLoopOptions options);
  ~EngineLoop();

  void Start();
  // Cancels the running job, fails the queued ones, joins the thread.
  void Stop();

  // Queues the job. False when the queue is full (the caller answers 503).
  bool Submit(const std::shared_ptr<Job>& job);
  // The client has gone: drop the job from the queue or stop it at the next token.
  void Cancel(const std::shared_ptr<Job>& job);

  int queued() const;
  bool busy() const;
  int64_t jobs_done() const { return jobs_done_.load(); }
  int64_t context_tokens() const { return context_tokens_.load(); }

 private:
  void Run();
  JobResult RunJob(Job& job);

  std::shared_ptr<const Engine> engine_;
  EngineLoopOptions options_;
  std::unique_ptr<Session> session_;
  std::shared_ptr<DraftPolicy> draft_policy_;  // --draft-tokens auto
  std::string session_client_;                 // whose prompts the session holds
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false;
  std::thread thread_;
  std::atomic<int64_t> jobs_done_{0}, context_tokens_{0};
  size_t next_forced_ = 0;
};

}  // namespace rw::serve
