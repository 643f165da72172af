#include "runtime/cuda_forward.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/activity_trace.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"
#include "base/log.h"
#include "base/timer.h"
#include "base/trace.h"

namespace rw {
namespace {

cudaStream_t S(void* s) {
  return static_cast<cudaStream_t>(s);
}

}  // namespace

// Launches one op; with REDWING_CUDA_TIMING=1 also marks its end for the per-op GPU times.
#define RW_K(expr, what)                         \
  do {                                           \
    RW_CUDA_RETURN_IF_ERROR(expr, "{}", what);   \
    if (timing_) RW_RETURN_IF_ERROR(Mark(what)); \
  } while (0)

Result<std::unique_ptr<CudaForwardPass>> CudaForwardPass::Create(const CudaModel& model,
                                                                 int64_t max_context,
                                                                 int64_t max_chunk) {
  // A REDWING_CUDA_* variable with a bad value: refused, rather than measuring the default
  // under a name that says otherwise.
  if (const std::string& bad = cuda::TuningErrors(); !bad.empty())
    return Error(ErrorCode::kInvalidArgument, "{}", bad);
  auto f = std::unique_ptr<CudaForwardPass>(new CudaForwardPass(model));
  f->tuning_ = cuda::CurrentTuning();
  RW_RETURN_IF_ERROR(f->Allocate(max_context, max_chunk));
  RW_RETURN_IF_ERROR(f->ReadInjectedFault());
  return f;
}

CudaForwardPass::~CudaForwardPass() {
  if (stream_ != nullptr) cudaStreamSynchronize(S(stream_));
  if (timing_) {
    // REDWING_CUDA_TIMING=1: GPU time per op, from events between consecutive launches.
    for (const auto* t : {&prefill_times_, &decode_times_}) {
      const bool dec = t == &decode_times_;
      double sum = 0;
      for (const auto& [label, v] : *t) sum += v.second;
      std::fprintf(
          stderr, "[cuda timing] %s: %.3f ms GPU in total%s\n", dec ? "decode" : "prefill", sum,
          dec ? fmt::format(", {:.3f} ms per step over {} steps",
                            sum / std::max<uint64_t>(1, timed_decode_steps_), timed_decode_steps_)
                    .c_str()
              : "");
      std::vector<std::pair<std::string, std::pair<uint64_t, double>>> rows(t->begin(), t->end());
      std::sort(rows.begin(), rows.end(),
                [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
      for (const auto& [label, v] : rows)
        std::fprintf(stderr, "[cuda timing]   %9.3f ms %7llu x %8.2f us  %s\n", v.second,
                     static_cast<unsigned long long>(v.first), 1e3 * v.second / v.first,
                     label.c_str());
    }
  }
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  DropGraphs();
  for (void* p :
       {static_cast<void*>(h_params_), static_cast<void*>(h_plan_), static_cast<void*>(h_ptrs_),
        static_cast<void*>(h_idx_), static_cast<void*>(h_logits_), static_cast<void*>(h_token_),
        static_cast<void*>(h_route_), static_cast<void*>(h_cand_), static_cast<void*>(h_penalty_),
        static_cast<void*>(h_capture_)})
    if (p != nullptr) cudaFreeHost(p);
  buffers_.clear();
  for (void* e : {routed_, fork_, join_})
    if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (side_ != nullptr) cudaStreamDestroy(S(side_));
  if (stream_ != nullptr) cudaStreamDestroy(S(stream_));
}

float* CudaForwardPass::Floats(int64_t n) {
  auto b = cuda::DeviceBuffer::Alloc(static_cast<size_t>(std::max<int64_t>(n, 4)) * 4);
  if (!b.ok()) {
    alloc_failed_ = true;
    return nullptr;
  }
  buffers_.push_back(std::move(*b));
  return static_cast<float*>(buffers_.back().data());
}

Status CudaForwardPass::Allocate(int64_t max_context, int64_t M) {
  CHECK(M >= 1 && max_context >= 1);
  max_chunk_ = M;
  cudaStream_t s;
  RW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  stream_ = s;
  cudaEvent_t ev;
  RW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
  routed_ = ev;
  timing_ = tuning_.timing;
  mapped_ = model_.experts() != nullptr && model_.experts()->mapped();
  // Decode from a table runs the experts beside the dense MLP (both chains are latency-bound;
  // resident 183 -> 193 tok/s on the H200); REDWING_CUDA_OVERLAP=0 turns it off.
  overlap_ = tuning_.overlap;
  const int64_t H = c_.hidden_size, nh = c_.num_heads, E = c_.num_experts, k = c_.top_k;
  const int64_t hd_max = std::max(c_.sliding.head_dim, c_.full.head_dim);
  const int64_t kv_max = std::max(int64_t{c_.sliding.num_kv_heads} * c_.sliding.head_dim,
                                  int64_t{c_.full.num_kv_heads} * c_.full.head_dim);
  // KV cache, KvCache's capacities.
  sliding_capacity_ = std::min<int64_t>(max_context, int64_t{c_.sliding_window} + M - 1);
  bool any_sliding = false;
  for (int i = 0; i < c_.num_layers; ++i) {
    const AttentionGeometry& g = c_.geometry(i);
    const int64_t cap = c_.is_full(i) ? max_context : sliding_capacity_;
    any_sliding |= !c_.is_full(i);
    capacity_.push_back(cap);
    k_cache_.push_back(Floats(int64_t{g.num_kv_heads} * cap * g.head_dim));
    v_cache_.push_back(Floats(int64_t{g.num_kv_heads} * cap * g.head_dim));
  }
  if (!any_sliding) sliding_capacity_ = 0;
  x_ = Floats(M * H);
  a_ = Floats(M * H);
  a2_ = Floats(M * H);
  q_ = Floats(M * nh * hd_max);
  att_ = Floats(M * nh * hd_max);
  k_ = Floats(M * kv_max);
  v_ = Floats(M * kv_max);
  o_ = Floats(M * H);
  g_ = Floats(M * c_.intermediate_size);
  u_ = Floats(M * c_.intermediate_size);
  m1_ = Floats(M * H);
  r_ = Floats(M * H);
  if (M >= 16) {
    split_bytes_ = SplitBytes(c_, M);
    split_ = Floats(static_cast<int64_t>(split_bytes_ / 4));
  }
  int max_splits = 1;
  for (int i = 0; i < c_.num_layers; ++i) max_splits = std::max(max_splits, Splits(i, 1));
  // Prefill: a split per query; decode and a verify's rows (RowsPath): max_splits per query.
  partial_ = Floats(cuda::AttentionPartialFloats(
      std::max<int64_t>(M, std::min<int64_t>(M, kRowsPathMax) * max_splits), nh,
      static_cast<int>(hd_max), 1));
  rope_cos_s_ = Floats(M * c_.sliding.head_dim / 2);
  rope_sin_s_ = Floats(M * c_.sliding.head_dim / 2);
  rope_cos_f_ = Floats(M * c_.full.head_dim / 2);
  rope_sin_f_ = Floats(M * c_.full.head_dim / 2);
  // Rows for a verify's logits from the start (16 MiB at Gemma 4's vocabulary): growing the
  // buffer later drops the captured decode graph, and capturing it again costs a speculative
  // run's first verify several decode steps.
  logits_rows_ = std::min<int64_t>(M, kRowsPathMax);
  logits_ = Floats(logits_rows_ * c_.vocab_size);
  auto bytes = cuda::DeviceBuffer::Alloc(8 + 4 * static_cast<size_t>(M));
  RW_RETURN_IF_ERROR(bytes.status());
  buffers_.push_back(std::move(*bytes));
  params_ = static_cast<uint8_t*>(buffers_.back().data());
  RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_params_, 8 + 4 * static_cast<size_t>(M)), "pinned");
  RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_logits_, 4 * static_cast<size_t>(c_.vocab_size)),
                          "pinned");
  sample_scratch_ = Floats(static_cast<int64_t>(cuda::GumbelSampleScratchBytes() / 4 + 1));
  // One token or candidate list per row of a verify (VerifyAndPick), the first for a decode step.
  d_token_ = reinterpret_cast<int*>(Floats(kMaxVerifyPicks));
  RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_token_, kMaxVerifyPicks * sizeof(int)), "pinned");
  topk_scratch_ = Floats(static_cast<int64_t>(cuda::TopKScratchBytes() / 4 + 1));
  d_cand_ = reinterpret_cast<int*>(Floats(kMaxVerifyPicks * (1 + 2 * kTopKCap)));
  RW_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(&h_cand_, kMaxVerifyPicks * (1 + 2 * kTopKCap) * sizeof(int)), "pinned");
  penalty_cap_ = max_context + 1;
  d_penalty_ = reinterpret_cast<int*>(Floats(penalty_cap_));
  RW_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(&h_penalty_, static_cast<size_t>(penalty_cap_) * sizeof(int)), "pinned");
  if (c_.enable_moe) {
    const int64_t I = c_.moe_intermediate_size;
    router_logits_ = Floats(M * E);
    topk_w_ = Floats(M * k);
    topk_idx_ = reinterpret_cast<int*>(Floats(std::max<int64_t>(M, c_.num_layers) * k));
    ex_g_ = Floats(M * k * I);
    ex_u_ = Floats(M * k * I);
    ex_y_ = Floats(M * k * H);
    plan_ints_ = 2 * M * k + 2 * E;
    plan_ = reinterpret_cast<int*>(Floats(c_.num_layers * plan_ints_));
    ptrs_ = reinterpret_cast<const uint8_t**>(Floats(2 * c_.num_layers * E));
    const size_t L = static_cast<size_t>(c_.num_layers);
    RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_plan_, L * plan_ints_ * 4), "pinned");
    RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_ptrs_, L * E * sizeof(void*)), "pinned");
    RW_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_idx_, static_cast<size_t>(M * k) * 4), "pinned");
    RW_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(&h_route_, static_cast<size_t>(c_.num_layers * k) * sizeof(int)), "pinned");
    RW_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    side_ = s;
    for (void** e : {&fork_, &join_}) {
      RW_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
      *e = ev;
    }
  }
  if (alloc_failed_)
    return Error(ErrorCode::kResourceExhausted,
                 "the KV cache and scratch of a session do not fit on the GPU (--max-context, "
                 "--prefill-chunk or --vram-budget)");
  return Status::Ok();
}

int CudaForwardPass::Splits(int li, int64_t m) const {
  // Decode: enough key splits to spread a long context over the GPU, a function of the
  // capacity only so a captured graph stays valid at every position; a verify's rows as decode
  // steps (each row's attention is then a decode step's bit for bit, and 2..16 queries fill the
  // GPU better as splits than as one tile of the prefill kernel). Prefill: one per query.
  // 64 keys a split: two tiles of the attention kernel, whose tiles run one after another
  // (REDWING_CUDA_SPLIT_KEYS for comparisons).
  if (m > 1 && !RowsPath(m)) return 1;
  return cuda::DecodeAttentionSplits(capacity_[static_cast<size_t>(li)], tuning_.split_keys);
}

Status CudaForwardPass::Sync() {
  TraceScope t("host sync", "cuda");
  ++syncs_;
  RW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(S(stream_)), "forward pass");
  return Status::Ok();
}

Status CudaForwardPass::Mark(const char* what) {
  cuda::CountPath(cuda::Path::kTimingMark);
  if (marks_ >= events_.size()) {
    cudaEvent_t ev;
    RW_CUDA_RETURN_IF_ERROR(cudaEventCreate(&ev), "timing event");
    events_.push_back(ev);
    labels_.push_back(what);
    mark_layers_.push_back(-1);
  }
  labels_[marks_] = what;
  mark_layers_[marks_] = layer_ >= 0 && layer_ < c_.num_layers ? layer_ : -1;
  // Inside a graph capture only an "external" record becomes a node that records on replay.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(S(stream_), &capture);
  RW_CUDA_RETURN_IF_ERROR(
      cudaEventRecordWithFlags(static_cast<cudaEvent_t>(events_[marks_]), S(stream_),
                               capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal
                                                                        : cudaEventRecordDefault),
      "timing event");
  ++marks_;
  return Status::Ok();
}

void CudaForwardPass::CollectTimes(bool decode) {
  auto& table = decode ? decode_times_ : prefill_times_;
  for (size_t i = 1; i < marks_; ++i) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events_[i - 1]),
                             static_cast<cudaEvent_t>(events_[i])) != cudaSuccess)
      continue;
    auto& [n, total] = table[labels_[i]];
    ++n;
    total += ms;
    // --profile: each op's GPU time under "gpu op", per layer.
    trace::AddToProfile(labels_[i], "gpu op", mark_layers_[i], static_cast<int64_t>(ms * 1e6));
  }
  if (decode) ++timed_decode_steps_;
}

Status CudaForwardPass::WaitRouting() {
  TraceScope t("host sync", "cuda", "layer", layer_);
  ++syncs_;
  RW_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(routed_)),
                          "routing read-back");
  return Status::Ok();
}

Status CudaForwardPass::Linear(const cuda::DevMat& w, const float* x, int64_t m, float* y,
                               const cuda::XPlanes* xp) {
  const cudaError_t e = m == 1        ? cuda::LaunchMatVec(w, x, y, S(stream_))
                        : RowsPath(m) ? cuda::LaunchMatVecRows(w, x, m, y, S(stream_))
                                      : cuda::LaunchMatMul(w, x, m, y, S(stream_), xp);
  RW_CUDA_RETURN_IF_ERROR(e, "linear {}x{} on {} rows", w.rows, w.cols, m);
  if (timing_) return Mark(m == 1 ? "matvec" : "matmul");
  return Status::Ok();
}

Status CudaForwardPass::LinearMulti(const cuda::DevMat* w, float* const* y, int n, const float* x,
                                    int64_t m, const cuda::XPlanes* xp, const char* what) {
  RW_CUDA_RETURN_IF_ERROR(cuda::LaunchMatMulMulti(w, y, n, x, m, S(stream_), xp), "{} on {} rows",
                          what, m);
  if (timing_) return Mark("matmul");
  return Status::Ok();
}

uint64_t CudaForwardPass::SplitBytes(const ModelConfig& c, int64_t M) {
  // The widest input of a prefill matmul: the residual, the attention output, the dense MLP's
  // intermediate, or the experts' (token, choice) rows.
  const int64_t hd_max = std::max(c.sliding.head_dim, c.full.head_dim);
  size_t bytes =
      std::max({cuda::SplitXBytes(M, c.hidden_size), cuda::SplitXBytes(M, c.num_heads * hd_max),
                cuda::SplitXBytes(M, c.intermediate_size)});
  if (c.enable_moe)
    bytes = std::max(bytes, cuda::SplitXBytes(M * c.top_k, c.moe_intermediate_size));
  return bytes;
}

Result<const cuda::XPlanes*> CudaForwardPass::SplitX(const float* x, int64_t m, int64_t cols) {
  planes_ = cuda::XPlanes{};
  if (m < cuda::kMinTensorCoreRows || RowsPath(m) || split_ == nullptr)
    return static_cast<const cuda::XPlanes*>(nullptr);
  const cudaError_t e = cuda::LaunchSplitX(x, m, cols, split_, split_bytes_, &planes_, S(stream_));
  if (e == cudaErrorNotSupported) return static_cast<const cuda::XPlanes*>(nullptr);
  RW_CUDA_RETURN_IF_ERROR(e, "x split for the matmuls ({}x{})", m, cols);
  if (timing_) RW_RETURN_IF_ERROR(Mark("split"));
  return static_cast<const cuda::XPlanes*>(&planes_);
}

Status CudaForwardPass::RunCall(const int* ids, int64_t m, int64_t pos0, LogitsRows rows,
                                float* logits, ForwardStats* stats) {
  CHECK_MSG(m >= 1 && m <= max_chunk_, "chunk of {} tokens (max {})", m, max_chunk_);
  const bool gpu_traced = trace::Enabled() && cuda::TraceGpuForCall(m);
  // A sampled recorded call runs kernel by kernel (activity_trace.h says why).
  const bool eager_for_trace = gpu_traced && cuda::GpuTraceSampled();
  TraceScope call_scope("forward call", "cuda", "tokens", m, "gpu_traced", gpu_traced ? 1 : 0);
  Stopwatch sw;
  std::memcpy(h_params_, &pos0, 8);
  std::memcpy(h_params_ + 8, ids, static_cast<size_t>(m) * 4);
  RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_, h_params_, 8 + 4 * static_cast<size_t>(m),
                                          cudaMemcpyHostToDevice, S(stream_)),
                          "parameters");
  const int64_t V = c_.vocab_size;
  int64_t out_rows = rows == LogitsRows::kAll ? m : rows == LogitsRows::kLast ? 1 : 0;
  if (out_rows > logits_rows_) {
    logits_ = Floats(out_rows * V);
    if (logits_ == nullptr) return Error(ErrorCode::kResourceExhausted, "GPU logits");
    logits_rows_ = out_rows;
    // A captured decode step writes its logits into the old buffer, while the draw, the top-k
    // and the copy after it read logits_: capture it again (a verify of k rows, or a prefill
    // asking for every row, after decode steps would otherwise leave the draw reading stale rows).
    DropGraphs();
  }
  // One decode step, or one verify of m rows (a graph per m), as a graph when nothing in it
  // needs the host (experts resident or mapped).
  const bool graphable = use_graphs_ && !graph_failed_ && fault_layer_ < 0 && !eager_for_trace &&
                         (!c_.enable_moe || model_.decode_table() != nullptr) &&
                         ((m == 1 && rows == LogitsRows::kLast) ||
                          (RowsPath(m) && rows == LogitsRows::kAll && !timing_));
  void*& graph_exec = m == 1 ? graph_exec_ : verify_graphs_[static_cast<size_t>(graphable ? m : 0)];
  if (graphable && graph_exec == nullptr) {
    cudaGraph_t graph = nullptr;
    RW_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(S(stream_), cudaStreamCaptureModeThreadLocal),
                            "graph capture");
    marks_ = 0;
    Status body = timing_ ? Mark("start") : Status::Ok();
    if (body.ok()) body = Body(m, rows);
    graph_marks_ = marks_;
    const cudaError_t end = cudaStreamEndCapture(S(stream_), &graph);
    cudaGraphExec_t exec = nullptr;
    if (body.ok() && end == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      graph_exec = exec;
    } else {
      graph_failed_ = true;  // run kernel by kernel from now on
      RW_LOG_WARN("CUDA graph capture of a {} failed ({}); running kernel by kernel",
                  m == 1 ? "decode step" : "verify",
                  body.ok() ? cudaGetErrorString(end) : body.ToString());
      cudaGetLastError();
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    layer_ = -1;  // nothing captured has run
    residual_intact_ = false;
  }
  if (graphable && graph_exec != nullptr) {
    marks_ = graph_marks_;  // the events captured in the graph are recorded again
    RW_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec), S(stream_)),
                            "{} graph", m == 1 ? "decode" : "verify");
    captured_m_ = capture_layers_.empty() ? 0 : m;  // what Body sets on the host
    if (m == 1) ++graph_steps_;
  } else {
    marks_ = 0;
    if (timing_) RW_RETURN_IF_ERROR(Mark("start"));
    RW_RETURN_IF_ERROR(Body(m, rows));
  }
  if (mapped_ && m == 1) {
    // Every layer's choice comes back with the step's result (no extra sync) for the cache.
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_route_, topk_idx_, static_cast<size_t>(c_.num_layers * c_.top_k) * 4,
                        cudaMemcpyDeviceToHost, S(stream_)),
        "routing read-back");
  }
  bool copy_row = out_rows == 1 && sample_ == nullptr;
  bool synced = false;  // a Sync() after the last work this call enqueued
  if (sample_ != nullptr && sample_->picks != nullptr) {
    RW_RETURN_IF_ERROR(PickRows(m));
    synced = true;
    out_rows = 0;  // nothing else to copy back
  }
  if (out_rows == 1 && sample_ != nullptr && penalty_ != 1.0f && !penalty_ids_.empty()) {
    if (static_cast<int64_t>(penalty_ids_.size()) > penalty_cap_)
      return Error(ErrorCode::kInternal, "{} penalized ids for a context of {}",
                   penalty_ids_.size(), penalty_cap_ - 1);
    std::memcpy(h_penalty_, penalty_ids_.data(), penalty_ids_.size() * sizeof(int));
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_penalty_, h_penalty_, penalty_ids_.size() * sizeof(int),
                        cudaMemcpyHostToDevice, S(stream_)),
        "penalized ids");
    RW_K(cuda::LaunchRepetitionPenalty(logits_, V, d_penalty_,
                                       static_cast<int>(penalty_ids_.size()), penalty_, S(stream_)),
         "repetition penalty");
  }
  if (out_rows == 1 && sample_ != nullptr && sample_->k > 0) {
    const cudaError_t e = cuda::LaunchTopKCandidates(
        logits_, V, sample_->k, topk_scratch_, kTopKCap, d_cand_ + 1,
        reinterpret_cast<float*>(d_cand_ + 1 + kTopKCap), d_cand_, S(stream_));
    sample_->ids->clear();
    sample_->values->clear();
    sample_->logits->clear();
    if (e == cudaErrorNotSupported) {
      cudaGetLastError();
      copy_row = true;
    } else {
      RW_K(e, "top-k candidates");
      RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_cand_, d_cand_, (1 + 2 * kTopKCap) * sizeof(int),
                                              cudaMemcpyDeviceToHost, S(stream_)),
                              "top-k candidates");
      RW_RETURN_IF_ERROR(Sync());
      synced = true;
      const int count = h_cand_[0];
      if (count >= 0 && count <= kTopKCap) {
        sample_->ids->assign(h_cand_ + 1, h_cand_ + 1 + count);
        const float* vals = reinterpret_cast<const float*>(h_cand_ + 1 + kTopKCap);
        sample_->values->assign(vals, vals + count);
      } else {
        copy_row = true;  // more ties than fit: the whole row
      }
    }
    if (copy_row) {
      sample_->logits->resize(static_cast<size_t>(V));
      logits = sample_->logits->data();
    }
  } else if (out_rows == 1 && sample_ != nullptr) {
    RW_K(cuda::LaunchGumbelSample(logits_, V, sample_->seed, sample_->position,
                                  sample_->temperature, sample_scratch_, d_token_, S(stream_)),
         "sample");
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_token_, d_token_, sizeof(int), cudaMemcpyDeviceToHost, S(stream_)),
        "sampled token");
    RW_RETURN_IF_ERROR(Sync());
    synced = true;
    *sample_->token = *h_token_;
  }
  if (copy_row) {
    RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_logits_, logits_, static_cast<size_t>(V) * 4,
                                            cudaMemcpyDeviceToHost, S(stream_)),
                            "logits");
    RW_RETURN_IF_ERROR(Sync());
    std::memcpy(logits, h_logits_, static_cast<size_t>(V) * 4);
  } else if (out_rows > 1) {
    RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, logits_, static_cast<size_t>(out_rows * V) * 4,
                                            cudaMemcpyDeviceToHost, S(stream_)),
                            "logits");
    RW_RETURN_IF_ERROR(Sync());
  } else if (!synced) {
    RW_RETURN_IF_ERROR(Sync());  // the pinned parameters are reused by the next call
  }
  if (mapped_) RW_RETURN_IF_ERROR(AfterCall(m));
  if (timing_) CollectTimes(m == 1);
  if (stats != nullptr) {
    // The GPU's parts overlap and are not timed apart: the whole call counts as attention.
    stats->attention_s += sw.Seconds();
    stats->tokens += m;
    if (c_.enable_moe) stats->experts_run += m * c_.top_k * c_.num_layers;
  }
  return Status::Ok();
}

Status CudaForwardPass::RunAndSample(int id, int64_t pos0, uint64_t seed, double temperature,
                                     int64_t sample_position, int* token, ForwardStats* stats) {
  const SampleArgs args{seed, sample_position, temperature, token};
  sample_ = &args;
  Status st = Run(&id, 1, pos0, LogitsRows::kLast, nullptr, stats);
  sample_ = nullptr;
  SetPenalty(1.0f, {});
  return st;
}

Status CudaForwardPass::VerifyAndPick(const int* ids, int64_t m, int64_t pos0, uint64_t seed,
                                      double temperature, int k, std::vector<RowPick>* picks,
                                      ForwardStats* stats) {
  if (m < 1 || m > kMaxVerifyPicks || k < 0 || k > kMaxTopK)
    return Error(ErrorCode::kInvalidArgument,
                 "a verify with device picks takes 1..{} tokens and 0..{} candidates, got {}, {}",
                 kMaxVerifyPicks, kMaxTopK, m, k);
  SampleArgs args{seed, pos0 + 1, temperature, nullptr};
  args.k = k;
  args.picks = picks;
  sample_ = &args;
  verify_ = true;
  Status st = Run(ids, m, pos0, LogitsRows::kAll, nullptr, stats);
  verify_ = false;
  sample_ = nullptr;
  SetPenalty(1.0f, {});
  return st;
}

Status CudaForwardPass::Verify(const int* ids, int64_t m, int64_t pos0, float* logits,
                               ForwardStats* stats) {
  verify_ = true;
  Status st = Run(ids, m, pos0, LogitsRows::kAll, logits, stats);
  verify_ = false;
  return st;
}

Status CudaForwardPass::PickRows(int64_t m) {
  const SampleArgs& a = *sample_;
  const int64_t V = c_.vocab_size;
  const size_t stride = 1 + 2 * kTopKCap;
  cudaStream_t s = S(stream_);
  bool whole_rows = false;  // the top-k kernel does not take this vocabulary: every row back
  for (int64_t r = 0; r < m && !whole_rows; ++r) {
    const float* row = logits_ + r * V;
    if (a.k == 0) {
      RW_K(cuda::LaunchGumbelSample(row, V, a.seed, a.position + r, a.temperature, sample_scratch_,
                                    d_token_ + r, s),
           "sample");
      continue;
    }
    int* cand = d_cand_ + static_cast<size_t>(r) * stride;
    const cudaError_t e =
        cuda::LaunchTopKCandidates(row, V, a.k, topk_scratch_, kTopKCap, cand + 1,
                                   reinterpret_cast<float*>(cand + 1 + kTopKCap), cand, s);
    if (e == cudaErrorNotSupported) {
      cudaGetLastError();
      whole_rows = true;
    } else {
      RW_K(e, "top-k candidates");
    }
  }
  if (a.k == 0) {
    RW_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_token_, d_token_, static_cast<size_t>(m) * 4, cudaMemcpyDeviceToHost, s),
        "sampled tokens");
  } else if (!whole_rows) {
    RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_cand_, d_cand_, static_cast<size_t>(m) * stride * 4,
                                            cudaMemcpyDeviceToHost, s),
                            "top-k candidates");
  }
  RW_RETURN_IF_ERROR(Sync());
  std::vector<RowPick>& out = *a.picks;
  out.assign(static_cast<size_t>(m), RowPick{});
  for (int64_t r = 0; r < m; ++r) {
    RowPick& p = out[static_cast<size_t>(r)];
    if (a.k == 0) {
      p.token = h_token_[r];
      continue;
    }
    const int* cand = h_cand_ + static_cast<size_t>(r) * stride;
    const int count = whole_rows ? -1 : cand[0];
    if (count >= 0 && count <= kTopKCap) {
      p.ids.assign(cand + 1, cand + 1 + count);
      const float* vals = reinterpret_cast<const float*>(cand + 1 + kTopKCap);
      p.values.assign(vals, vals + count);
      continue;
    }
    // More ties than fit (or no top-k kernel): the whole row, as RunAndTopK gives it.
    p.logits.resize(static_cast<size_t>(V));
    RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_logits_, logits_ + r * V, static_cast<size_t>(V) * 4,
                                            cudaMemcpyDeviceToHost, s),
                            "logits");
    RW_RETURN_IF_ERROR(Sync());
    std::memcpy(p.logits.data(), h_logits_, static_cast<size_t>(V) * 4);
  }
  return Status::Ok();
}

static_assert(CudaForwardPass::kMaxTopK == cuda::kMaxTopK);

Status CudaForwardPass::RunAndTopK(int id, int64_t pos0, int k, std::vector<int>* ids,
                                   std::vector<float>* values, std::vector<float>* logits,
                                   ForwardStats* stats) {
  SampleArgs args{0, 0, 1.0, nullptr};
  args.k = k;
  args.ids = ids;
  args.values = values;
  args.logits = logits;
  sample_ = &args;
  Status st = Run(&id, 1, pos0, LogitsRows::kLast, nullptr, stats);
  sample_ = nullptr;
  SetPenalty(1.0f, {});
  return st;
}

Status CudaForwardPass::AfterCall(int64_t m) {
  CudaExpertCache* cache = model_.experts();
  if (m == 1) {
    const size_t k = static_cast<size_t>(c_.top_k);
    for (int li = 0; li < c_.num_layers; ++li)
      cache->Record(li, std::span<const int>(h_route_ + li * k, k));
  }
  // The stream is idle: the table and the promotions' copies are queued before the next call.
  return cache->Maintain(stream_);
}

void CudaForwardPass::DropGraphs() {
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec_));
  graph_exec_ = nullptr;
  for (void*& g : verify_graphs_) {
    if (g != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
    g = nullptr;
  }
}

Status CudaForwardPass::Body(int64_t m, LogitsRows rows) {
  cuda::SetOverlappedLaunches(m == 1);
  RW_RETURN_IF_ERROR(Embed(m));
  RW_RETURN_IF_ERROR(RopeTables(m));
  for (int li = 0; li < c_.num_layers; ++li) {
    // The CPU's side of a layer: launches, and the waits for routing or expert copies.
    TraceScope t("layer", "cuda", "layer", li);
    RW_RETURN_IF_ERROR(AtLayer(li));
    RW_RETURN_IF_ERROR(DecoderLayer(li, m));
    RW_RETURN_IF_ERROR(CaptureLayer(li, m));
  }
  captured_m_ = capture_layers_.empty() ? 0 : m;
  RW_RETURN_IF_ERROR(AtLayer(c_.num_layers));  // the head reads x_ without changing it
  if (rows == LogitsRows::kAll) return Head(0, m);
  if (rows == LogitsRows::kLast) return Head(m - 1, 1);
  return Status::Ok();
}

Status CudaForwardPass::SetCapture(const std::vector<int>& layers) {
  for (size_t i = 0; i < layers.size(); ++i)
    if (layers[i] < 0 || layers[i] >= c_.num_layers || (i > 0 && layers[i] <= layers[i - 1]))
      return Error(ErrorCode::kInvalidArgument,
                   "capture layers must be ascending and distinct in [0, {})", c_.num_layers);
  if (h_capture_ != nullptr) {
    RW_RETURN_IF_ERROR(Sync());
    cudaFreeHost(h_capture_);
    h_capture_ = nullptr;
  }
  capture_layers_ = layers;
  captured_m_ = 0;
  if (!layers.empty())
    RW_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(
            &h_capture_,
            layers.size() * static_cast<size_t>(max_chunk_ * c_.hidden_size) * sizeof(float)),
        "pinned hidden-state capture");
  // A captured graph holds the old copies (or none): capture it again.
  DropGraphs();
  return Status::Ok();
}

// The residual after layer li, copied to the pinned capture in stream order (every call ends
// with a sync, so it has arrived when Run returns).
Status CudaForwardPass::CaptureLayer(int li, int64_t m) {
  const auto it = std::lower_bound(capture_layers_.begin(), capture_layers_.end(), li);
  if (it == capture_layers_.end() || *it != li) return Status::Ok();
  const int64_t H = c_.hidden_size, slot = it - capture_layers_.begin();
  RW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_capture_ + slot * max_chunk_ * H, x_,
                                          static_cast<size_t>(m * H) * sizeof(float),
                                          cudaMemcpyDeviceToHost, S(stream_)),
                          "hidden-state capture of layer {}", li);
  return Status::Ok();
}

// E0 (Gemma4TextScaledWordEmbedding): h = E[id] · embed_scale.
Status CudaForwardPass::Embed(int64_t m) {
  const int* ids = reinterpret_cast<const int*>(params_ + 8);
  RW_K(cuda::LaunchEmbed(model_.embed(), ids, m, c_.embed_scale, x_, S(stream_)), "embed");
  return Status::Ok();
}

// cos/sin of float(pos)·inv_freq for both attention kinds (Gemma4TextRotaryEmbedding).
Status CudaForwardPass::RopeTables(int64_t m) {
  const int64_t* pos0 = reinterpret_cast<const int64_t*>(params_);
  RW_K(cuda::LaunchRopeTable(pos0, m, model_.inv_freq(false), c_.sliding.head_dim / 2, rope_cos_s_,
                             rope_sin_s_, S(stream_)),
       "rope table");
  RW_K(cuda::LaunchRopeTable(pos0, m, model_.inv_freq(true), c_.full.head_dim / 2, rope_cos_f_,
                             rope_sin_f_, S(stream_)),
       "rope table");
  return Status::Ok();
}

// Gemma4TextDecoderLayer: attention block, then the dense MLP and the routed experts read the
// same residual h; h += RMS_post_ff(m1 + m2); h *= layer_scalar.
Status CudaForwardPass::DecoderLayer(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  const int64_t H = c_.hidden_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const float scalar = model_.host().layer(li).layer_scalar;
  RW_RETURN_IF_ERROR(Attention(li, m));
  // The three readers of h (dense MLP, experts, router) normalize it in one pass.
  const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  if (tuning_.fuse_rows) {  // with A8 (Attention left it)
    RW_K(cuda::LaunchResidualFfnInputs(x_, o_, m, static_cast<int>(H), L.post_attn_ln, L.pre_ff_ln,
                                       L.pre_ff_ln2, L.router_scale, root, eps, a_,
                                       c_.enable_moe ? a2_ : nullptr, c_.enable_moe ? r_ : nullptr,
                                       S(stream_)),
         "post attention and feed-forward inputs");
  } else {
    RW_K(cuda::LaunchFfnInputs(x_, m, static_cast<int>(H), L.pre_ff_ln, L.pre_ff_ln2,
                               L.router_scale, root, eps, a_, c_.enable_moe ? a2_ : nullptr,
                               c_.enable_moe ? r_ : nullptr, S(stream_)),
         "feed-forward inputs");
  }
  if (c_.enable_moe) RW_RETURN_IF_ERROR(Router(li, m));
  // Decode from a table: the experts (which may wait on PCIe) run on a side stream beside the
  // dense MLP; a graph captures the fork and the join.
  const bool fork =
      c_.enable_moe && m == 1 && overlap_ && !timing_ && model_.decode_table() != nullptr;
  if (fork) {
    cuda::CountPath(cuda::Path::kExpertsBeside);
    RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(fork_), S(stream_)), "fork");
    RW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(S(side_), static_cast<cudaEvent_t>(fork_), 0),
                            "fork");
    RW_RETURN_IF_ERROR(ExpertsDecode(li, side_));
    RW_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(join_), S(side_)), "join");
  }
  RW_RETURN_IF_ERROR(DenseMlp(li, m));
  if (fork) {
    RW_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(S(stream_), static_cast<cudaEvent_t>(join_), 0),
                            "join");
    return MoeFinish(li, m);
  }
  if (!c_.enable_moe) {
    // F5 without experts: h = (h + RMS_post_ff(m1))·layer_scalar.
    RW_K(cuda::LaunchAddRmsNorm(x_, m1_, m, static_cast<int>(H), L.post_ff_ln, eps, scalar,
                                S(stream_)),
         "post ff");
    return Status::Ok();
  }
  return Experts(li, m);
}

// Gemma4TextAttention (A1–A8): h += RMS_post_attn(o_proj(attn(RoPE(q_norm(q)), RoPE(k_norm(k)),
// RMS_0(v)))), scale 1.0, causal, sliding window on sliding layers, GQA.
Status CudaForwardPass::Attention(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  const AttentionGeometry& g = c_.geometry(li);
  const bool full = c_.is_full(li);
  const int64_t H = c_.hidden_size;
  const int hd = g.head_dim, nh = c_.num_heads, nkv = g.num_kv_heads;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  cudaStream_t s = S(stream_);
  // A1 (after a MoE layer, that layer's last kernel wrote it: MoeFinish).
  if (!tuning_.fuse_rows || li == 0 || !c_.enable_moe)
    RW_K(cuda::LaunchRmsNormRows(x_, a_, m, static_cast<int>(H), L.input_ln, eps, s), "input norm");
  // A2–A4: projections; V from v_proj, or (k_eq_v) from the raw K before k_norm.
  if (m == 1) {
    // Decode: the projections in one launch.
    const cuda::DevMat w[3] = {L.q, L.k, L.v};
    float* const y[3] = {q_, k_, v_};
    RW_K(cuda::LaunchMatVecMulti(w, y, g.k_eq_v ? 2 : 3, a_, s), "q/k/v");
  } else if (RowsPath(m)) {
    // A verify: the same products as decode, for its m rows in one launch.
    const cuda::DevMat w[3] = {L.q, L.k, L.v};
    float* const y[3] = {q_, k_, v_};
    RW_K(cuda::LaunchMatVecMultiRows(w, y, g.k_eq_v ? 2 : 3, a_, m, s), "q/k/v");
  } else {
    // Prefill: the projections stacked in one launch where the kernel allows.
    RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xp, SplitX(a_, m, H));
    const cuda::DevMat w[3] = {L.q, L.k, L.v};
    float* const y[3] = {q_, k_, v_};
    RW_RETURN_IF_ERROR(LinearMulti(w, y, g.k_eq_v ? 2 : 3, a_, m, xp, "q/k/v"));
  }
  if (g.k_eq_v) {
    RW_K(
        cudaMemcpyAsync(v_, k_, static_cast<size_t>(m * nkv * hd) * 4, cudaMemcpyDeviceToDevice, s),
        "k_eq_v");
  }
  // A3–A4 fused: q/k norms, RMS_0(v), RoPE, and the K/V store.
  const float* cos = full ? rope_cos_f_ : rope_cos_s_;
  const float* sin = full ? rope_sin_f_ : rope_sin_s_;
  const int64_t* pos0 = reinterpret_cast<const int64_t*>(params_);
  const int64_t cap = capacity_[static_cast<size_t>(li)];
  RW_K(cuda::LaunchQkvPost(q_, k_, v_, m, nh, nkv, hd, L.q_norm, L.k_norm, cos, sin,
                           k_cache_[static_cast<size_t>(li)], v_cache_[static_cast<size_t>(li)],
                           cap, pos0, eps, s),
       "q/k/v norms, RoPE, KV store");
  // A5–A7.
  const int64_t window = full ? 0 : c_.sliding_window;
  RW_K(cuda::LaunchAttention(q_, m, nh, k_cache_[static_cast<size_t>(li)],
                             v_cache_[static_cast<size_t>(li)], nkv, hd, cap, pos0, window, 1.0f,
                             Splits(li, m), partial_, att_, s),
       "attention");
  RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xo, SplitX(att_, m, int64_t{nh} * hd));
  RW_RETURN_IF_ERROR(Linear(L.o, att_, m, o_, xo));
  residual_intact_ = false;  // x_ stops being this layer's input (see resume_layer)
  // A8 (fused into DecoderLayer's next kernel unless REDWING_CUDA_FUSE=0).
  if (!tuning_.fuse_rows)
    RW_K(cuda::LaunchAddRmsNorm(x_, o_, m, static_cast<int>(H), L.post_attn_ln, eps, 1.0f, s),
         "post attention");
  return Status::Ok();
}

// Gemma4TextMLP (F1): m1 = RMS_post_ff_1(down(gelu_tanh(gate u) ⊙ up u)), u = RMS_pre_ff(h).
Status CudaForwardPass::DenseMlp(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  const int64_t I = c_.intermediate_size;
  cudaStream_t s = S(stream_);
  if (m == 1) {
    RW_K(cuda::LaunchGateUpGeglu(L.gate, L.up, a_, g_, s), "gate/up");
  } else if (RowsPath(m)) {
    RW_K(cuda::LaunchGateUpGegluRows(L.gate, L.up, a_, m, g_, s), "gate/up");
  } else {
    RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xp, SplitX(a_, m, c_.hidden_size));
    const cuda::DevMat w[2] = {L.gate, L.up};
    float* const y[2] = {g_, u_};
    RW_RETURN_IF_ERROR(LinearMulti(w, y, 2, a_, m, xp, "gate/up"));
    RW_K(cuda::LaunchGeglu(g_, u_, m * I, s), "geglu");
  }
  RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xd, SplitX(g_, m, I));
  RW_RETURN_IF_ERROR(Linear(L.down, g_, m, m1_, xd));
  // With experts, RMS_post_ff_1 is applied by Experts' final kernel (LaunchMoeFinish).
  return Status::Ok();
}

// Gemma4TextRouter (F2), on the raw residual h: r = RMS_0(h) ⊙ scale · H^-½; P = softmax(proj·r);
// top-k of P, renormalized to sum 1, times per_expert_scale.
Status CudaForwardPass::Router(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  cudaStream_t s = S(stream_);
  RW_RETURN_IF_ERROR(Linear(L.router, r_, m, router_logits_));
  RW_K(cuda::LaunchRouteTopK(router_logits_, router_logits_, m, c_.num_experts, c_.top_k,
                             L.per_expert_scale, Idx(li, m), topk_w_, s),
       "route top-k");
  if ((m > 1 && !RowsPath(m) && !GpuPlan()) || model_.decode_table() == nullptr) {
    // The host groups a chunk's tokens by expert, and the copy path must fetch missing experts:
    // read the choice back, and let the dense MLP run on the GPU meanwhile (Experts waits).
    RW_K(cudaMemcpyAsync(h_idx_, Idx(li, m), static_cast<size_t>(m * c_.top_k) * 4,
                         cudaMemcpyDeviceToHost, s),
         "routing read-back");
    RW_K(cudaEventRecord(static_cast<cudaEvent_t>(routed_), s), "routing event");
  }
  return Status::Ok();
}

// Gemma4TextExperts (F3): moe = Σ_e w_e · down_e(gelu_tanh(gate_e u2) ⊙ up_e u2) with
// u2 = RMS_pre_ff_2(h); m2 = RMS_post_ff_2(moe), summed per token in ascending expert order.
Status CudaForwardPass::Experts(int li, int64_t m) {
  if (m == 1) {
    RW_RETURN_IF_ERROR(ExpertsDecode(li, stream_));
  } else if (RowsPath(m) && model_.decode_table() != nullptr) {
    RW_RETURN_IF_ERROR(ExpertsRows(li, m));
  } else {
    RW_RETURN_IF_ERROR(ExpertsPrefill(li, m));
  }
  return MoeFinish(li, m);
}

Status CudaForwardPass::MoeFinish(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  // F1's RMS_post_ff_1, F3–F5: the sum, RMS_post_ff_2, m1 + m2, RMS_post_ff, the residual and
  // layer_scalar, in one kernel; with the next layer's A1 too.
  const int* rows = m == 1 ? nullptr : rows_of_;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const float scalar = model_.host().layer(li).layer_scalar;
  if (tuning_.fuse_rows && li + 1 < c_.num_layers) {
    RW_K(cuda::LaunchMoeFinishNorm(Idx(li, m), topk_w_, rows, ex_y_, m, c_.top_k, c_.hidden_size,
                                   L.post_ff_ln1, L.post_ff_ln2, m1_, L.post_ff_ln, x_, eps, scalar,
                                   model_.layer(li + 1).input_ln, a_, S(stream_)),
         "expert sum, residual and next input norm");
    return Status::Ok();
  }
  RW_K(cuda::LaunchMoeFinish(Idx(li, m), topk_w_, rows, ex_y_, m, c_.top_k, c_.hidden_size,
                             L.post_ff_ln1, L.post_ff_ln2, m1_, L.post_ff_ln, x_, eps, scalar,
                             S(stream_)),
       "expert sum and residual");
  return Status::Ok();
}

// One token: its k experts in one launch per matrix, blob addresses from the decode table (on
// the GPU, no sync) or from the cache after reading the choice back (copy path).
Status CudaForwardPass::ExpertsDecode(int li, void* stream) {
  const CudaLayer& L = model_.layer(li);
  const int k = c_.top_k, E = c_.num_experts;
  cudaStream_t s = S(stream);
  if (const uint8_t* const* table = model_.decode_table()) {
    // The kernels pick the blobs from the table by the router's choice on the GPU: VRAM for
    // cached experts, pinned host memory read over PCIe for the rest (mapped path).
    const uint8_t* const* layer_table = table + static_cast<size_t>(li) * E;
    RW_K(cuda::LaunchExpertGateUp(L.experts, layer_table, Idx(li, 1), k, a2_, 0, ex_g_, s),
         "expert gate/up");
    RW_K(cuda::LaunchExpertDown(L.experts, layer_table, Idx(li, 1), k, ex_g_, ex_y_, s),
         "expert down");
    return Status::Ok();
  }
  RW_RETURN_IF_ERROR(WaitRouting());
  const uint8_t** ptrs = ptrs_ + static_cast<size_t>(li) * E;
  const uint8_t** hp = h_ptrs_ + static_cast<size_t>(li) * E;
  RW_RETURN_IF_ERROR(
      model_.experts()->Ensure(li, std::span<const int>(h_idx_, static_cast<size_t>(k)), hp, s));
  RW_K(cudaMemcpyAsync(ptrs, hp, static_cast<size_t>(k) * sizeof(void*), cudaMemcpyHostToDevice, s),
       "expert pointers");
  RW_K(cuda::LaunchExpertGateUp(L.experts, ptrs, nullptr, k, a2_, 0, ex_g_, s), "expert gate/up");
  RW_K(cuda::LaunchExpertDown(L.experts, ptrs, nullptr, k, ex_g_, ex_y_, s), "expert down");
  return Status::Ok();
}

// A verify's m tokens as m decode steps' experts in one launch per matrix: slot t·k + j is token
// t's j-th choice (the decode table picks its blob on the GPU), so each (token, expert) product
// is the decode step's. An expert two tokens chose is read twice, from L2 the second time.
Status CudaForwardPass::ExpertsRows(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  const int k = c_.top_k, E = c_.num_experts;
  cudaStream_t s = S(stream_);
  const uint8_t* const* layer_table = model_.decode_table() + static_cast<size_t>(li) * E;
  const int slots = static_cast<int>(m) * k;
  RW_K(cuda::LaunchExpertGateUp(L.experts, layer_table, Idx(li, m), slots, a2_, c_.hidden_size,
                                ex_g_, s, k),
       "expert gate/up");
  RW_K(cuda::LaunchExpertDown(L.experts, layer_table, Idx(li, m), slots, ex_g_, ex_y_, s),
       "expert down");
  rows_of_ = nullptr;  // MoeFinish: token t's j-th result is row t·k + j
  return Status::Ok();
}

// A chunk: the choice is read back, the chunk's (token, expert) pairs grouped by expert (each
// expert's weights read once for all its tokens), experts fetched in batches the cache can hold.
bool CudaForwardPass::GpuPlan() const {
  // REDWING_CUDA_GPU_PLAN=0: the host's plan (comparisons).
  return tuning_.gpu_plan && model_.resident_table() != nullptr &&
         c_.num_experts <= cuda::kMaxPlanExperts;
}

Status CudaForwardPass::ExpertsPrefill(int li, int64_t m) {
  const CudaLayer& L = model_.layer(li);
  const int k = c_.top_k, E = c_.num_experts;
  const int64_t I = c_.moe_intermediate_size;
  cudaStream_t s = S(stream_);
  if (GpuPlan()) {
    // Every expert resident: the plan is made on the GPU (no read-back, no sync) over all E
    // experts, from the resident table; any expert may have up to m rows, and the m·k rows in
    // all bound the grid of the kernels that take a tile list.
    int* d_plan = plan_ + static_cast<size_t>(li) * plan_ints_;
    int* d_gather = d_plan;
    int* d_row_of = d_plan + m * k;
    int* d_row0 = d_plan + 2 * m * k;
    int* d_rows = d_row0 + E;
    RW_K(cuda::LaunchExpertPlan(Idx(li, m), m, k, E, d_gather, d_row_of, d_row0, d_rows, s),
         "expert plan");
    const uint8_t* const* table = model_.resident_table() + static_cast<size_t>(li) * E;
    const int max_rows = static_cast<int>(m);
    RW_ASSIGN_OR_RETURN(const cuda::XPlanes* x2, SplitX(a2_, m, c_.hidden_size));
    RW_K(cuda::LaunchExpertGateUpMatMul(L.experts, table, E, d_row0, d_rows, max_rows, d_gather,
                                        a2_, ex_g_, ex_u_, s, x2, m * k),
         "expert gate/up");
    RW_K(cuda::LaunchGeglu(ex_g_, ex_u_, m * k * I, s), "expert geglu");
    RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xh, SplitX(ex_g_, m * k, I));
    RW_K(cuda::LaunchExpertMatMul(L.experts, 2, table, E, d_row0, d_rows, max_rows, nullptr, ex_g_,
                                  ex_y_, s, xh, m * k),
         "expert down");
    rows_of_ = d_row_of;
    return Status::Ok();
  }
  RW_K(cudaMemcpyAsync(h_idx_, Idx(li, m), static_cast<size_t>(m * k) * 4, cudaMemcpyDeviceToHost,
                       s),
       "routing read-back");
  RW_RETURN_IF_ERROR(Sync());
  // Plan: gather[row] = token, row_of[t·k + j] = row, then per used expert row0 and rows.
  int* plan = h_plan_ + static_cast<size_t>(li) * plan_ints_;
  int* gather = plan;
  int* row_of = plan + m * k;
  int* row0 = plan + 2 * m * k;
  int* rows = row0 + E;
  std::vector<int> count(static_cast<size_t>(E), 0), start(static_cast<size_t>(E), 0);
  for (int64_t i = 0; i < m * k; ++i) ++count[static_cast<size_t>(h_idx_[i])];
  std::vector<int> used;
  int total = 0;
  for (int e = 0; e < E; ++e) {
    if (count[static_cast<size_t>(e)] == 0) continue;
    row0[used.size()] = total;
    rows[used.size()] = count[static_cast<size_t>(e)];
    start[static_cast<size_t>(e)] = total;
    total += count[static_cast<size_t>(e)];
    used.push_back(e);
  }
  for (int64_t t = 0; t < m; ++t)
    for (int j = 0; j < k; ++j) {
      const int e = h_idx_[t * k + j];
      const int r = start[static_cast<size_t>(e)]++;
      gather[r] = static_cast<int>(t);
      row_of[t * k + j] = r;
    }
  int* d_plan = plan_ + static_cast<size_t>(li) * plan_ints_;
  RW_K(
      cudaMemcpyAsync(d_plan, plan, static_cast<size_t>(plan_ints_) * 4, cudaMemcpyHostToDevice, s),
      "expert plan");
  const int* d_gather = d_plan;
  const int* d_row_of = d_plan + m * k;
  const int* d_row0 = d_plan + 2 * m * k;
  const int* d_rows = d_row0 + E;
  CudaExpertCache* cache = model_.experts();
  // Mapped with in-place prefill: one batch over the table's entries, missing experts read from
  // host memory. Otherwise the chunk's experts are copied into slots, in batches the cache holds.
  const bool in_place = cache->prefill_in_place();
  const size_t per_batch =
      in_place ? used.size() : static_cast<size_t>(std::min<int64_t>(cache->slots(), E));
  const uint8_t** hp = h_ptrs_ + static_cast<size_t>(li) * E;
  const uint8_t** dp = ptrs_ + static_cast<size_t>(li) * E;
  if (in_place) {
    for (size_t i = 0; i < used.size(); ++i) hp[i] = cache->Entry(li, used[i]);
    cache->Record(li, used);
  }
  // The experts' input split once for every batch's gate and up (re-split after a batch's down
  // used the scratch).
  RW_ASSIGN_OR_RETURN(const cuda::XPlanes* x2, SplitX(a2_, m, c_.hidden_size));
  for (size_t b0 = 0; b0 < used.size(); b0 += per_batch) {
    const size_t b1 = std::min(used.size(), b0 + per_batch);
    const int groups = static_cast<int>(b1 - b0);
    if (!in_place)
      RW_RETURN_IF_ERROR(cache->Ensure(li, std::span<const int>(&used[b0], b1 - b0), hp + b0, s));
    RW_K(cudaMemcpyAsync(dp + b0, hp + b0, (b1 - b0) * sizeof(void*), cudaMemcpyHostToDevice, s),
         "expert pointers");
    int max_rows = 0;
    for (size_t i = b0; i < b1; ++i) max_rows = std::max(max_rows, rows[i]);
    RW_K(cuda::LaunchExpertGateUpMatMul(L.experts, dp + b0, groups, d_row0 + b0, d_rows + b0,
                                        max_rows, d_gather, a2_, ex_g_, ex_u_, s, x2),
         "expert gate/up");
    const int64_t r0 = row0[b0], nrows = int64_t{row0[b1 - 1]} + rows[b1 - 1] - r0;
    RW_K(cuda::LaunchGeglu(ex_g_ + r0 * I, ex_u_ + r0 * I, nrows * I, s), "expert geglu");
    // The split covers the grouped rows up to this batch's end (row0s index it directly).
    RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xh, SplitX(ex_g_, r0 + nrows, I));
    RW_K(cuda::LaunchExpertMatMul(L.experts, 2, dp + b0, groups, d_row0 + b0, d_rows + b0, max_rows,
                                  nullptr, ex_g_, ex_y_, s, xh),
         "expert down");
    if (b1 < used.size()) {
      RW_ASSIGN_OR_RETURN(x2, SplitX(a2_, m, c_.hidden_size));
    }
  }
  rows_of_ = d_row_of;
  return Status::Ok();
}

// Final norm, tied LM head (the embedding as a linear layer), 30·tanh(z/30).
Status CudaForwardPass::Head(int64_t row0, int64_t rows) {
  const int64_t H = c_.hidden_size, V = c_.vocab_size;
  cudaStream_t s = S(stream_);
  RW_K(cuda::LaunchRmsNormRows(x_ + row0 * H, a_, rows, static_cast<int>(H), model_.final_norm(),
                               static_cast<float>(c_.rms_norm_eps), s),
       "final norm");
  RW_ASSIGN_OR_RETURN(const cuda::XPlanes* xp, SplitX(a_, rows, H));
  RW_RETURN_IF_ERROR(Linear(model_.embed(), a_, rows, logits_, xp));
  if (c_.final_logit_softcapping > 0)
    RW_K(cuda::LaunchSoftcap(logits_, rows * V, static_cast<float>(c_.final_logit_softcapping), s),
         "softcap");
  return Status::Ok();
}

}  // namespace rw
