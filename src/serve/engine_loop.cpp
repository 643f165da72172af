#include "serve/engine_loop.h"

#include <limits>

#include "serve/http.h"

namespace rw::serve {

Job::Update Job::Wait(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t events = prefill_events_;
  const bool started = started_;
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return done_ || !pending_.empty() || prefill_events_ != events || started_ != started;
  });
  Update u;
  u.text.swap(pending_);
  u.started = started_;
  u.done = done_;
  u.prefill_done = prefill_done_;
  u.prefill_total = prefill_total_;
  u.prefill_events = prefill_events_;
  return u;
}

void Job::MarkStarted(double queue_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  queue_seconds_ = queue_seconds;
  cv_.notify_all();
}

void Job::AddText(std::string_view text) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.append(text);
  cv_.notify_all();
}

void Job::Progress(int64_t done, int64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  prefill_done_ = done;
  prefill_total_ = total;
  ++prefill_events_;
  cv_.notify_all();
}

void Job::Finish(JobResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  result_ = std::move(result);
  if (started_) result_.queue_seconds = queue_seconds_;
  done_ = true;
  cv_.notify_all();
}

namespace {

// Expert-store figures, where the engine reports them (Engine::expert_stats(), which arrives
// with the expert cache); zeros otherwise.
struct ExpertFigures {
  uint64_t hits = 0, misses = 0, bytes_read = 0;
  double wait_seconds = 0;
};
template <typename E>
auto ReadExpertFigures(const E& e, int) -> decltype(e.expert_stats(), ExpertFigures()) {
  const auto s = e.expert_stats();
  return ExpertFigures{s.hits, s.misses, s.bytes_read, s.wait_seconds};
}
template <typename E>
ExpertFigures ReadExpertFigures(const E&, long) {
  return {};
}

// A timeline whose token choices are forced (tests): the real session runs every step, then the
// logits are replaced by a one-hot on the next forced id.
class ForcedTimeline final : public TokenTimeline {
 public:
  ForcedTimeline(TokenTimeline& inner, std::vector<int> forced, int64_t prompt_size, int stop_id)
      : inner_(inner), forced_(std::move(forced)), prompt_size_(prompt_size), stop_id_(stop_id) {}
  Result<std::vector<float>> Append(std::span<const int> ids,
                                    const std::atomic<bool>* cancel) override {
    RW_ASSIGN_OR_RETURN(std::vector<float> logits, inner_.Append(ids, cancel));
    const int64_t k = static_cast<int64_t>(inner_.tokens().size()) - prompt_size_;
    if (k < 0) return logits;
    const int id = k < static_cast<int64_t>(forced_.size()) ? forced_[k] : stop_id_;
    std::fill(logits.begin(), logits.end(), -1e30f);
    if (id >= 0 && id < static_cast<int>(logits.size())) logits[id] = 0.0f;
    return logits;
  }
  const std::vector<int>& tokens() const override { return inner_.tokens(); }
  bool CanRewind(int64_t pos) const override { return inner_.CanRewind(pos); }
  Status Rewind(int64_t pos) override { return inner_.Rewind(pos); }
  void Reset() override { inner_.Reset(); }
  int64_t max_context() const override { return inner_.max_context(); }
  int64_t chunk() const override { return inner_.chunk(); }

 private:
  TokenTimeline& inner_;
  std::vector<int> forced_;
  int64_t prompt_size_;
  int stop_id_;
};

}  // namespace

EngineLoop::EngineLoop(std::shared_ptr<const Engine> engine, EngineLoopOptions options)
    : engine_(std::move(engine)), options_(std::move(options)) {
  session_ = engine_->NewSession();
}

EngineLoop::~EngineLoop() {
  Stop();
}

void EngineLoop::Start() {
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::Stop() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (running_) running_->Cancel();
    dropped.swap(queue_);
    cv_.notify_all();
  }
  for (auto& job : dropped) {
    JobResult r;
    r.status = Status(ErrorCode::kCancelled, "the server is shutting down");
    job->Finish(std::move(r));
  }
  if (thread_.joinable()) thread_.join();
}

bool EngineLoop::Submit(const std::shared_ptr<Job>& job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || static_cast<int>(queue_.size()) >= options_.max_queue + (running_ ? 0 : 1))
    return false;
  job->submitted_ns = MonotonicNanos();
  queue_.push_back(job);
  cv_.notify_all();
  return true;
}

void EngineLoop::Cancel(const std::shared_ptr<Job>& job) {
  job->Cancel();
  bool removed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (*it == job) {
        queue_.erase(it);
        removed = true;
        break;
      }
    }
  }
  if (removed) {
    JobResult r;
    r.status = Status(ErrorCode::kCancelled, "the client went away while queued");
    job->Finish(std::move(r));
  }
}

int EngineLoop::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

bool EngineLoop::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_ != nullptr;
}

void EngineLoop::Run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
    }
    JobResult r = RunJob(*job);
    context_tokens_.store(r.context_tokens);
    jobs_done_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.reset();
    }
    job->Finish(std::move(r));
  }
}

JobResult EngineLoop::RunJob(Job& job) {
  JobResult out;
  const double queued = static_cast<double>(MonotonicNanos() - job.submitted_ns) * 1e-9;
  job.MarkStarted(queued);
  out.queue_seconds = queued;
  if (job.cancelled()) {
    out.status = Status(ErrorCode::kCancelled, "cancelled before it started");
    return out;
  }
  // The cache holds another client's prompt: start afresh, so nothing of it is reused (nor
  // reported as cached) for this one.
  if (job.client() != session_client_) {
    session_->Reset();
    session_client_ = job.client();
  }
  const CallStats before_p = session_->prefill_total(), before_d = session_->decode_total();
  const ExpertFigures before_x = ReadExpertFigures(*engine_, 0);
  GenerateCallbacks cb;
  cb.cancel = job.cancel_flag();
  cb.on_text = [&job](std::string_view text) {
    job.AddText(text);
    return !job.cancelled();
  };
  cb.on_prefill_progress = [&job](int64_t done, int64_t total) { job.Progress(done, total); };
  SessionTimeline timeline(*session_);
  Result<GenerateResult> r = Status(ErrorCode::kInternal, "not run");
  if (!options_.forced_replies.empty() && engine_->tokenizer() != nullptr) {
    const std::string& text =
        options_.forced_replies[next_forced_++ % options_.forced_replies.size()];
    std::vector<int> ids;
    for (int32_t id : engine_->tokenizer()->Encode(text)) ids.push_back(id);
    const int stop = engine_->stop_ids().empty() ? 1 : engine_->stop_ids().front();
    ForcedTimeline forced(timeline, std::move(ids), static_cast<int64_t>(job.prompt().size()),
                          stop);
    r = Generate(forced, engine_->tokenizer(), job.prompt(), job.options(), cb);
  } else if (options_.drafter != nullptr && options_.draft_tokens != 0) {
    GenerateOptions o = job.options();
    o.drafter = options_.drafter;
    o.draft_tokens = options_.draft_tokens;
    if (o.draft_tokens == kDraftTokensAuto) {
      if (draft_policy_ == nullptr) draft_policy_ = std::make_shared<DraftPolicy>();
      o.draft_policy = draft_policy_;
    }
    out.drafter = o.drafter->name();
    r = Generate(timeline, engine_->tokenizer(), job.prompt(), o, cb);
  } else {
    r = Generate(timeline, engine_->tokenizer(), job.prompt(), job.options(), cb);
  }
  if (!r.ok()) {
    out.status = r.status();
    // A failed step may leave the cache partly written; start the next request afresh (in a
    // new session where a CUDA error closed this one: --fault-policy fail-closed).
    if (session_->closed())
      session_ = engine_->NewSession();
    else
      session_->Reset();
  } else {
    out.gen = std::move(*r);
  }
  const CallStats& p = session_->prefill_total();
  const CallStats& d = session_->decode_total();
  out.experts_run = p.parts.experts_run + d.parts.experts_run - before_p.parts.experts_run -
                    before_d.parts.experts_run;
  out.expert_seconds = p.parts.moe_s + d.parts.moe_s - before_p.parts.moe_s - before_d.parts.moe_s;
  const ExpertFigures after_x = ReadExpertFigures(*engine_, 0);
  out.expert_hits = after_x.hits - before_x.hits;
  out.expert_misses = after_x.misses - before_x.misses;
  out.expert_bytes_read = after_x.bytes_read - before_x.bytes_read;
  out.expert_wait_seconds = after_x.wait_seconds - before_x.wait_seconds;
  out.context_tokens = session_->position();
  return out;
}

}  // namespace rw::serve
