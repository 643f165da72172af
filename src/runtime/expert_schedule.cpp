#include "runtime/expert_schedule.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <span>

#include "backend/cpu/ops.h"
#include "base/timer.h"
#include "base/trace.h"
#include "runtime/forward.h"

namespace rw {
ExpertSchedule::ExpertSchedule(const RuntimeModel& model, int64_t max_chunk)
    : model_(model), c_(model.config()), max_chunk_(max_chunk) {
  if (!c_.enable_moe) return;
  y_.resize(max_chunk * c_.top_k * c_.hidden_size);  // every (token, expert) output until summed
  early_r_.resize(c_.hidden_size);
  early_logits_.resize(c_.num_experts);
}

int64_t ExpertSchedule::ScratchFloats(const ModelConfig& c, int64_t M, int threads) {
  if (!c.enable_moe) return 0;
  // The outputs, and each thread's scratch (RunExpert).
  return M * c.top_k * c.hidden_size +
         std::max(threads, 1) * M * (c.hidden_size + 2 * c.moe_intermediate_size);
}

Status ExpertSchedule::Begin(int li, int64_t m, const int* idx, const float* w, const float* h) {
  const int64_t k = c_.top_k, E = c_.num_experts;
  single_token_ = m == 1;
  exact_rows_ = m <= cpu::kExactRows;
  if (m == 1 && early_guess_layer_ == li) {
    early_counts_.guessed += static_cast<int64_t>(early_guess_.size());
    early_counts_.chosen += k;
    for (int g : early_guess_) early_counts_.right += std::count(idx, idx + k, g);
  }
  early_guess_layer_ = -1;
  users_.resize(E);
  for (auto& u : users_) u.clear();
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < k; ++j)
      users_[idx[t * k + j]].push_back({static_cast<int>(t), w[t * k + j]});
  used_.clear();
  row0_.clear();
  int64_t rows = 0;
  for (int e = 0; e < E; ++e) {
    if (users_[e].empty()) continue;
    used_.push_back(e);
    row0_.push_back(rows);
    rows += static_cast<int64_t>(users_[e].size());
  }
  // A store with fewer slots than the chunk's distinct experts gets them in batches.
  ExpertStore* store = model_.experts();
  const size_t cap = static_cast<size_t>(std::max(1, store->capacity_per_layer()));
  batches_.clear();
  for (size_t i = 0; i < used_.size(); i += cap)
    batches_.push_back({i, std::min(used_.size(), i + cap)});
  resident_.assign(used_.size(), 0);
  const auto [b0, b1] = batches_[0];
  RW_RETURN_IF_ERROR(store->Begin(li, std::span<const int>(&used_[b0], b1 - b0), &resident_[b0]));
  if (m == 1 && li + 1 < c_.num_layers) {
    if (model_.early_reads_by_router()) {
      EarlyReads(li + 1, h);
      early_guess_layer_ = li + 1;
    } else if (const ExpertPredictor* p = model_.predictor()) {
      p->Predict(li, std::span<const int>(idx, k), static_cast<int>(k), &early_guess_);
      store->Prefetch(li + 1, early_guess_);
      early_guess_layer_ = li + 1;
    }
  }
  return Status::Ok();
}

// Guesses layer `next`'s experts by applying its router to the current residual (the real input
// will differ by this layer's update) and asks the store to read them at low priority.
void ExpertSchedule::EarlyReads(int next, const float* h) {
  const LayerView& N = model_.layer(next);
  const int64_t H = c_.hidden_size, E = c_.num_experts, k = c_.top_k;
  cpu::RmsNormRows(h, early_r_.data(), 1, H, nullptr, static_cast<float>(c_.rms_norm_eps));
  cpu::Mul(early_r_.data(), N.router_scale.data(), H);
  cpu::Scale(early_r_.data(), static_cast<float>(std::pow(static_cast<double>(H), -0.5)), H);
  cpu::MatVec(N.router, early_r_.data(), early_logits_.data(), nullptr);
  early_guess_.resize(k);
  std::vector<float> w(k);
  RouteTopK(early_logits_.data(), static_cast<int>(E), static_cast<int>(k),
            N.per_expert_scale.data(), early_guess_.data(), w.data());
  model_.experts()->Prefetch(next, early_guess_);
}

void ExpertSchedule::StallClock::Update(int64_t now) {
  const bool stalled = waiting_ > 0 && computing_ == 0;
  if (stalled && since_ < 0) since_ = now;
  if (!stalled && since_ >= 0) {
    total_ns_ += now - since_;
    since_ = -1;
  }
}

void ExpertSchedule::StallClock::Enter(bool waiting) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(waiting ? waiting_ : computing_);
  Update(NowNanos());
}

void ExpertSchedule::StallClock::Leave(bool waiting) {
  std::lock_guard<std::mutex> lock(mu_);
  --(waiting ? waiting_ : computing_);
  Update(NowNanos());
}

double ExpertSchedule::StallClock::TakeSeconds() {
  std::lock_guard<std::mutex> lock(mu_);
  const double s = static_cast<double>(total_ns_) * 1e-9;
  total_ns_ = 0;
  return s;
}

Status ExpertSchedule::Run(int li, int64_t m, const float* u2, float* moe, ThreadPool* pool,
                           int64_t* pairs, double* stall_s) {
  const int64_t H = c_.hidden_size;
  ExpertStore* store = model_.experts();
  for (size_t b = 0; b < batches_.size(); ++b) {
    if (b > 0) {
      const auto [b0, b1] = batches_[b];
      RW_RETURN_IF_ERROR(
          store->Begin(li, std::span<const int>(&used_[b0], b1 - b0), &resident_[b0]));
    }
    Status s = RunBatch(li, b, u2, pool);
    store->Release(li);
    *stall_s += stall_.TakeSeconds();
    RW_RETURN_IF_ERROR(s);
  }
  std::fill(moe, moe + m * H, 0.0f);
  for (size_t i = 0; i < used_.size(); ++i) {
    const auto& list = users_[used_[i]];
    for (size_t r = 0; r < list.size(); ++r)
      cpu::Axpy(&moe[list[r].first * H], list[r].second, &y_[(row0_[i] + r) * H], H);
    *pairs += static_cast<int64_t>(list.size());
  }
  return Status::Ok();
}

// Expert i's output rows for its users: gate and up, GeGLU, down into y_ (one expert of
// Gemma4TextExperts). One user reads its row of u2 in place (two matvecs share it); several are
// gathered into the scratch first. pool: null when the caller runs experts side by side.
void ExpertSchedule::RunExpert(size_t i, const ExpertRef& ref, const float* u2, Scratch& s,
                               ThreadPool* pool) {
  const int64_t H = c_.hidden_size, I = c_.moe_intermediate_size;
  const auto& list = users_[used_[i]];
  const int64_t n = static_cast<int64_t>(list.size());
  const WeightView gate = ViewOf(ref.blob, ref.layout->gate);
  const WeightView up = ViewOf(ref.blob, ref.layout->up);
  float* const y = &y_[row0_[i] * H];
  if (n == 1) {
    const WeightView gate_up[2] = {gate, up};
    float* const outs[2] = {s.g.data(), s.u.data()};
    cpu::MatVecMulti(gate_up, 2, &u2[list[0].first * H], outs, pool, precision_);
    cpu::GegluInPlace(s.g.data(), s.u.data(), I);
    cpu::MatVec(ViewOf(ref.blob, ref.layout->down), s.g.data(), y, pool, precision_);
    return;
  }
  for (int64_t r = 0; r < n; ++r) std::copy_n(&u2[list[r].first * H], H, &s.in[r * H]);
  auto linear = [&](const WeightView& w, const float* x, int64_t m, float* out, ThreadPool* p) {
    if (exact_rows_)
      cpu::MatVecBatch(w, x, m, out, p, precision_);
    else
      cpu::MatMul(w, x, m, out, p);
  };
  linear(gate, s.in.data(), n, s.g.data(), pool);
  linear(up, s.in.data(), n, s.u.data(), pool);
  cpu::GegluInPlace(s.g.data(), s.u.data(), n * I);
  linear(ViewOf(ref.blob, ref.layout->down), s.g.data(), n, y, pool);
}

// Whether batch [b0, b1) runs one expert per thread at a time rather than each expert split
// across the threads: it saves three pool dispatches per expert and every thread packing the
// same input rows, and it pays when the work is spread over many experts (always for one token,
// and for a prefill chunk unless one expert takes a large share of its tokens).
bool ExpertSchedule::SideBySide(size_t b0, size_t b1, int threads) const {
  if (threads <= 1) return false;
  if (single_token_) return true;
  size_t total = 0, largest = 0;
  for (size_t i = b0; i < b1; ++i) {
    const size_t n = users_[used_[i]].size();
    total += n;
    largest = std::max(largest, n);
  }
  return largest * 4 * static_cast<size_t>(threads) <= total;
}

// Computes batch b (already Begun): experts that were resident first, the rest as they arrive.
Status ExpertSchedule::RunBatch(int li, size_t b, const float* u2, ThreadPool* pool) {
  ExpertStore* store = model_.experts();
  const auto [b0, b1] = batches_[b];
  std::vector<size_t> order;
  for (size_t i = b0; i < b1; ++i)
    if (resident_[i]) order.push_back(i);
  for (size_t i = b0; i < b1; ++i)
    if (!resident_[i]) order.push_back(i);
  const int threads = pool != nullptr ? pool->size() : 1;
  auto wait = [&](size_t i) {
    TraceScope t("wait", "experts", "layer", li, "expert", used_[i]);
    // A resident expert's Wait is work (at most its first checksum), not a wait for a read.
    const bool reading = !resident_[i];
    stall_.Enter(reading);
    Result<ExpertRef> r = store->Wait(li, i - b0);
    stall_.Leave(reading);
    return r;
  };
  // Brackets one expert's compute for the stall clock.
  struct Computing {
    StallClock& c;
    explicit Computing(StallClock& clock) : c(clock) { c.Enter(false); }
    ~Computing() { c.Leave(false); }
  };
  if (SideBySide(b0, b1, threads)) {
    // Every expert is its own chunk, taken by whichever thread is free (a late-waking worker,
    // or a thread waiting on a read, takes fewer). Each thread has its own scratch.
    EnsureScratch(threads);
    std::mutex mu;
    Status first_error;
    pool->ParallelFor(
        order.size(), 1,
        [&](size_t s, size_t e, int thread) {
          for (size_t q = s; q < e; ++q) {
            const size_t i = order[q];
            Result<ExpertRef> ref = wait(i);
            if (!ref.ok()) {
              std::lock_guard<std::mutex> lock(mu);
              if (first_error.ok()) first_error = ref.status();
              continue;
            }
            TraceScope t("expert", "experts", "layer", li, "expert", used_[i]);
            Computing busy(stall_);
            RunExpert(i, *ref, u2, scratch_[thread], nullptr);
          }
        },
        static_cast<int>(order.size()));
    return first_error;
  }
  EnsureScratch(1);
  for (size_t i : order) {
    RW_ASSIGN_OR_RETURN(ExpertRef ref, wait(i));
    TraceScope t("expert", "experts", "layer", li, "expert", used_[i]);
    Computing busy(stall_);
    RunExpert(i, ref, u2, scratch_[0], pool);
  }
  return Status::Ok();
}

// Per-thread scratch, each sized for a whole chunk choosing one expert.
void ExpertSchedule::EnsureScratch(int threads) {
  const int64_t rows = std::max<int64_t>(max_chunk_, 1);
  while (static_cast<int>(scratch_.size()) < threads) {
    Scratch s;
    s.in.resize(rows * c_.hidden_size);
    s.g.resize(rows * c_.moe_intermediate_size);
    s.u.resize(rows * c_.moe_intermediate_size);
    scratch_.push_back(std::move(s));
  }
}

}  // namespace rw
