#include "engine/engine.h"

#include <algorithm>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "base/trace.h"
#include "format/model_dir.h"
#include "model/gemma4_weights.h"
#include "sample/sampler.h"

namespace rw {

Engine::~Engine() = default;
Session::~Session() = default;

Result<std::shared_ptr<Engine>> Engine::Load(const EngineOptions& o) {
  if (o.model_dir.empty()) return Error(ErrorCode::kInvalidArgument, "no model directory given");
  if (o.max_context <= 0)
    return Error(ErrorCode::kInvalidArgument, "max context must be positive, not {}",
                 o.max_context);
  if (o.prefill_chunk < 0 || o.prefill_chunk > 4096)
    return Error(ErrorCode::kInvalidArgument, "prefill chunk must be in 1..4096 (0: auto), not {}",
                 o.prefill_chunk);
  // Auto: 512 tokens share each weight read among many tokens, except on a GPU under a VRAM
  // budget, where a 512-token chunk's scratch would take ~100 experts' room from the VRAM
  // cache (decode 103 → 95 tok/s at 4G on an H200 for prefill 736 → 2,003 tok/s).
  const int64_t chunk = o.prefill_chunk > 0
                            ? o.prefill_chunk
                            : (o.backend == BackendKind::kCuda && o.vram_budget > 0 ? 128 : 512);
  if (o.prefill_span < 0)
    return Error(ErrorCode::kInvalidArgument, "prefill span must be >= 0 tokens, not {}",
                 o.prefill_span);
  if (o.threads < 0 || o.threads > 1024)
    return Error(ErrorCode::kInvalidArgument, "bad thread count {}", o.threads);
  const bool cuda = o.backend == BackendKind::kCuda;
  if (cuda) RW_RETURN_IF_ERROR(CudaBackendAvailable().Annotate("--backend cuda"));
  if (o.vram_budget > 0 && !cuda)
    return Error(ErrorCode::kInvalidArgument, "--vram-budget applies to --backend cuda");
  if (o.fault_policy == FaultPolicy::kFailoverCpu && !cuda)
    return Error(ErrorCode::kInvalidArgument,
                 "--fault-policy failover-cpu applies to --backend cuda (the CPU backend has no "
                 "GPU to fail over from)");
  auto e = std::shared_ptr<Engine>(new Engine());
  ModelOpenOptions mo;
  mo.experts.kind = o.expert_store;
  mo.experts.io_threads = o.io_threads;
  mo.experts.io_backend = o.io_backend;
  mo.early_expert_read = o.early_expert_read;
  if (cuda && o.kv_type != KvType::kF32)
    return Error(ErrorCode::kInvalidArgument,
                 "--kv-type {} applies to --backend cpu (the CUDA backend's KV cache is fp32)",
                 KvTypeName(o.kv_type));
  mo.kv_type = o.kv_type;
  if (cuda && o.precision != Precision::kExact)
    return Error(ErrorCode::kInvalidArgument,
                 "--precision {} applies to --backend cpu (the CUDA backend computes in fp32)",
                 PrecisionName(o.precision));
  mo.lock_core = o.lock_core;
  mo.memory_budget = o.memory_budget;
  mo.max_context = std::max<int64_t>(1, o.max_context);
  mo.prefill_chunk = chunk;
  // A span no longer than a chunk is just a chunk; none can exceed the context.
  const int64_t span = std::min(o.prefill_span, mo.max_context);
  mo.prefill_span = !cuda && span > chunk ? span : 0;
  RW_ASSIGN_OR_RETURN(e->model_, RuntimeModel::Open(o.model_dir, mo));
  e->max_context_ = std::min<int64_t>(o.max_context, e->model_->config().max_position_embeddings);
  e->prefill_chunk_ = std::min(chunk, e->max_context_);
  e->prefill_span_ =
      mo.prefill_span > e->prefill_chunk_ ? std::min(mo.prefill_span, e->max_context_) : 0;
  if (o.threads > 0) {
    e->own_pool_ = std::make_unique<ThreadPool>(o.threads);
    e->pool_ = e->own_pool_.get();
  } else {
    e->pool_ = &ThreadPool::Default();
  }
  if (cuda) {
    CudaBackendOptions co;
    co.vram_budget = o.vram_budget;
    co.max_context = e->max_context_;
    co.prefill_chunk = e->prefill_chunk_;
    co.graphs = o.cuda_graphs;
    co.experts = o.cuda_experts;
    co.promotions = o.cuda_promotions;
    co.prefill_in_place = o.cuda_prefill_in_place;
    RW_ASSIGN_OR_RETURN(e->device_, UploadCudaModel(*e->model_, co, e->pool_));
  }
  e->backend_ = o.backend;
  e->kv_type_ = o.kv_type;
  e->precision_ = o.precision;
  e->fault_policy_ = o.fault_policy;
  e->stop_ids_ = e->model_->config().eos_token_ids;
  if (o.load_tokenizer) {
    e->text_status_ = e->LoadText(o.model_dir);
  } else {
    e->text_status_ = Error(ErrorCode::kUnsupported, "the tokenizer was not loaded");
  }
  return e;
}

Result<ModelText> LoadModelText(const std::string& dir) {
  const std::string path = JoinPath(dir, "tokenizer.json");
  if (!PathExists(path))
    return Error(ErrorCode::kNotFound,
                 "{} has no tokenizer.json, so it takes token ids only (--prompt-ids); install "
                 "or convert a checkpoint that carries one",
                 dir);
  RW_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(path));
  RW_ASSIGN_OR_RETURN(ChatTemplate tpl, ChatTemplate::FromModelDirectory(dir));
  return ModelText{std::move(tok), std::move(tpl)};
}

Status CheckModelOpens(const std::string& model_dir) {
  RW_ASSIGN_OR_RETURN(ModelDir dir, ModelDir::Open(model_dir));
  RW_RETURN_IF_ERROR(BindGemma4Model(dir).status());
  // A model without a tokenizer still runs on token ids; one with a tokenizer must load it.
  if (PathExists(JoinPath(model_dir, "tokenizer.json")))
    RW_RETURN_IF_ERROR(LoadModelText(model_dir).status());
  return Status::Ok();
}

Status Engine::LoadText(const std::string& dir) {
  RW_ASSIGN_OR_RETURN(ModelText text, LoadModelText(dir));
  Tokenizer tok = std::move(text.tokenizer);
  // A tokenizer may name a few more ids than the model embeds (Gemma's <image_soft_token>);
  // Session rejects such ids with a clear error if they ever reach it.
  chat_template_ = std::move(text.chat_template);
  for (const char* name : {"<turn|>", "<eos>", "<|tool_response>"}) {
    const int id = tok.TokenToId(name);
    if (id >= 0 && id < config().vocab_size &&
        std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end())
      stop_ids_.push_back(id);
  }
  tokenizer_ = std::move(tok);
  return Status::Ok();
}

std::string Engine::cuda_expert_path() const {
  return device_ != nullptr ? device_->expert_path() : std::string();
}

ExpertStoreStats Engine::expert_stats() const {
  if (device_ != nullptr) return device_->expert_stats();
  const ExpertStore* s = model_->experts();
  return s != nullptr ? s->stats() : ExpertStoreStats{};
}

std::unique_ptr<Session> Engine::NewSession() const {
  return std::make_unique<Session>(shared_from_this());
}

Session::Session(std::shared_ptr<const Engine> engine) : engine_(std::move(engine)) {
  const DeviceModel* device = engine_->device_model();
  if (device != nullptr && !engine_->gpu_dropped()) {
    auto b = device->NewBackend(engine_->max_context(), engine_->prefill_chunk());
    if (b.ok()) {
      backend_ = std::move(*b);
      return;
    }
    if (b.status().code() != ErrorCode::kDevice ||
        engine_->fault_policy() != FaultPolicy::kFailoverCpu) {
      init_ = b.status();
      return;
    }
    RW_LOG_WARN("{}; --fault-policy failover-cpu: the GPU is dropped, sessions run on the CPU",
                b.status().message());
    engine_->gpu_dropped_.store(true);
  }
  backend_ = NewCpu();
}

std::unique_ptr<ForwardBackend> Session::NewCpu() const {
  return NewCpuBackend(engine_->model(), engine_->max_context(), engine_->prefill_chunk(),
                       engine_->pool(), engine_->kv_type(), engine_->precision());
}

uint64_t Session::host_syncs() const {
  return gpu_syncs_ + (backend_ ? backend_->host_syncs() : 0);
}

bool Session::on_gpu() const {
  return backend_ && backend_->kind() != BackendKind::kCpu;
}

Status Session::RunChunk(const int* ids, int64_t m, LogitsRows rows, float* logits,
                         ForwardStats* st, const std::atomic<bool>* cancel) {
  Status s = backend_->Run(ids, m, position(), rows, logits, st, cancel);
  if (s.code() == ErrorCode::kDevice) return OnDeviceFault(s, ids, m, rows, logits, st);
  return s;
}

Status Session::OnDeviceFault(const Status& fault, const int* ids, int64_t m, LogitsRows rows,
                              float* logits, ForwardStats* st) {
  if (engine_->fault_policy() != FaultPolicy::kFailoverCpu || !on_gpu()) {
    // Nothing crashes and nothing more runs: the device's cache may be half written.
    closed_ =
        Error(ErrorCode::kDevice,
              "this session stopped at a CUDA error ({}); with --fault-policy fail-closed "
              "start a new session, or use --fault-policy failover-cpu to continue on the CPU",
              fault.message());
    return Error(fault.code(), "{} (--fault-policy fail-closed: this session is closed)",
                 fault.message());
  }
  const int64_t pos0 = position();
  gpu_syncs_ += backend_->host_syncs();
  std::unique_ptr<ForwardBackend> cpu = NewCpu();
  // Keep capturing the same layers on the CPU.
  if (!backend_->capture().layers.empty())
    RW_RETURN_IF_ERROR(cpu->SetCapture(backend_->capture().layers));
  std::vector<float> x;
  Result<int> layer = backend_->HandOver(*cpu, pos0, m, &x);
  backend_ = std::move(cpu);
  failed_over_ = true;
  engine_->gpu_dropped_.store(true);
  if (layer.ok()) {
    const int l = *layer;
    RW_LOG_WARN(
        "{}; --fault-policy failover-cpu: the GPU is dropped and this session continues on the "
        "CPU from {} of the call at position {}",
        fault.message(),
        l < 0                              ? std::string("the embedding")
        : l < engine_->config().num_layers ? fmt::format("layer {}", l)
                                           : std::string("the head"),
        pos0);
    if (l >= 0) return backend_->RunFrom(x.data(), l, m, pos0, rows, logits, st);
    return backend_->Run(ids, m, pos0, rows, logits, st, nullptr);
  }
  RW_LOG_WARN(
      "{}; --fault-policy failover-cpu: the GPU is dropped and cannot be read back ({}), so this "
      "session runs its {} earlier tokens again on the CPU",
      fault.message(), layer.status().message(), pos0);
  // The same calls as before, so the cache holds what a session on the CPU all along would.
  int64_t p = 0;
  for (const int32_t n : calls_) {
    Status replay = backend_->Run(&tokens_[static_cast<size_t>(p)], n, p, LogitsRows::kNone,
                                  nullptr, nullptr, nullptr);
    if (!replay.ok()) {
      closed_ = replay.Annotate("this session could not rebuild its cache on the CPU");
      return closed_;
    }
    p += n;
  }
  return backend_->Run(ids, m, pos0, rows, logits, st, nullptr);
}

Status Session::Check(std::span<const int> ids) const {
  const int vocab = engine_->config().vocab_size;
  if (ids.empty())
    return Error(ErrorCode::kInvalidArgument, "empty prompt: give at least one token id");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return Error(ErrorCode::kOutOfRange,
                   "token id {} (at index {}) is outside the vocabulary [0, {})", ids[i], i, vocab);
  if (position() + static_cast<int64_t>(ids.size()) > engine_->max_context())
    return Error(ErrorCode::kOutOfRange,
                 "context of {} tokens exceeds the maximum of {} (--max-context)",
                 position() + static_cast<int64_t>(ids.size()), engine_->max_context());
  return Status::Ok();
}

Result<std::vector<float>> Session::Prefill(std::span<const int> ids, bool all_logits,
                                            const std::atomic<bool>* cancel) {
  RW_RETURN_IF_ERROR(init_);
  RW_RETURN_IF_ERROR(closed_);
  RW_RETURN_IF_ERROR(Check(ids));
  const int64_t n = static_cast<int64_t>(ids.size()), V = engine_->config().vocab_size;
  const int64_t chunk = engine_->prefill_chunk();
  // Layer-major spans on the CPU when the input is longer than a chunk.
  const int64_t span = backend_->layer_major() && n > chunk ? engine_->prefill_span() : 0;
  const int64_t step = span > 0 ? span : chunk;
  std::vector<float> logits(static_cast<size_t>((all_logits ? n : 1) * V));
  CallStats call;
  Stopwatch sw;
  for (int64_t i = 0; i < n; i += step) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed))
      return Error(ErrorCode::kCancelled, "prefill cancelled after {} of {} tokens", i, n);
    const int64_t m = std::min(step, n - i);
    const bool last = i + m == n;
    LogitsRows rows =
        all_logits ? LogitsRows::kAll : (last ? LogitsRows::kLast : LogitsRows::kNone);
    float* out = all_logits ? &logits[i * V] : logits.data();
    if (span > 0 && m > 1) {
      Status st = backend_->RunLayerMajor(&ids[i], m, position(), rows, out, &call.parts, cancel);
      if (!st.ok()) {
        // Layers before the failing one hold the span's positions and the rest do not: no
        // prefix of the timeline is intact in every layer, so start over.
        Reset();
        return st;
      }
    } else {
      Status st = RunChunk(&ids[i], m, rows, out, &call.parts, cancel);
      // On failure (or a cancel inside the chunk) the session keeps the chunks that completed:
      // the failed chunk's K/V sit past position() and overwrote nothing it still needs.
      if (!st.ok()) return st;
    }
    tokens_.insert(tokens_.end(), ids.begin() + i, ids.begin() + i + m);
    calls_.push_back(static_cast<int32_t>(m));
  }
  call.seconds = sw.Seconds();
  call.tokens = n;
  last_ = call;
  prefill_total_.Add(call);
  return logits;
}

void Session::RecordDecode(std::span<const int> ids, CallStats call, double seconds) {
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  calls_.push_back(static_cast<int32_t>(ids.size()));
  call.seconds = seconds;
  call.tokens = static_cast<int64_t>(ids.size());
  last_ = call;
  decode_total_.Add(call);
}

Result<std::vector<float>> Session::Decode(int id) {
  RW_RETURN_IF_ERROR(init_);
  RW_RETURN_IF_ERROR(closed_);
  RW_RETURN_IF_ERROR(Check(std::span<const int>(&id, 1)));
  std::vector<float> logits(engine_->config().vocab_size);
  CallStats call;
  Stopwatch sw;
  RW_RETURN_IF_ERROR(RunChunk(&id, 1, LogitsRows::kLast, logits.data(), &call.parts));
  RecordDecode(std::span<const int>(&id, 1), call, sw.Seconds());
  return logits;
}

Result<std::vector<float>> Session::Verify(std::span<const int> ids) {
  RW_RETURN_IF_ERROR(init_);
  RW_RETURN_IF_ERROR(closed_);
  RW_RETURN_IF_ERROR(Check(ids));
  const int64_t k = static_cast<int64_t>(ids.size());
  if (k > backend_->max_chunk())
    return Error(ErrorCode::kInvalidArgument, "verify of {} tokens: at most {} in one call", k,
                 backend_->max_chunk());
  std::vector<float> logits(static_cast<size_t>(k * engine_->config().vocab_size));
  CallStats call;
  Stopwatch sw;
  Status s = backend_->Verify(ids.data(), k, position(), logits.data(), &call.parts);
  if (s.code() == ErrorCode::kDevice)
    s = OnDeviceFault(s, ids.data(), k, LogitsRows::kAll, logits.data(), &call.parts);
  RW_RETURN_IF_ERROR(s);
  RecordDecode(ids, call, sw.Seconds());
  return logits;
}

Result<std::vector<RowPick>> Session::VerifyPicks(std::span<const int> ids, uint64_t seed,
                                                  double temperature, int top_k) {
  RW_RETURN_IF_ERROR(init_);
  RW_RETURN_IF_ERROR(closed_);
  RW_RETURN_IF_ERROR(Check(ids));
  const int64_t k = static_cast<int64_t>(ids.size());
  if (k > backend_->max_verify_picks())
    return Error(ErrorCode::kUnsupported, "a verify of {} tokens with device picks (at most {})", k,
                 backend_->max_verify_picks());
  std::vector<RowPick> picks;
  CallStats call;
  Stopwatch sw;
  Status s = backend_->VerifyAndPick(ids.data(), k, position(), seed, temperature, top_k, &picks,
                                     &call.parts);
  if (s.code() == ErrorCode::kDevice) {
    // The CPU finishes the call (failover): its rows come back whole, to be picked on the host.
    const size_t V = static_cast<size_t>(engine_->config().vocab_size);
    std::vector<float> logits(static_cast<size_t>(k) * V);
    s = OnDeviceFault(s, ids.data(), k, LogitsRows::kAll, logits.data(), &call.parts);
    if (s.ok()) {
      picks.assign(static_cast<size_t>(k), RowPick{});
      for (size_t r = 0; r < picks.size(); ++r)
        picks[r].logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(r * V),
                               logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
    }
  }
  RW_RETURN_IF_ERROR(s);
  RecordDecode(ids, call, sw.Seconds());
  return picks;
}

int64_t Session::max_verify_picks() const {
  return backend_->max_verify_picks();
}

bool Session::samples_on_device() const {
  return on_gpu();  // the draw runs wherever the forward pass does
}

std::vector<int32_t> Session::PenaltyIds(float repetition_penalty,
                                         const std::vector<int>& context) const {
  if (repetition_penalty == 1.0f) return {};
  return Sampler::PenalizedIds(context, engine_->config().vocab_size);
}

Result<int> Session::DecodeSampled(int id, uint64_t seed, double temperature,
                                   float repetition_penalty) {
  RW_RETURN_IF_ERROR(init_);
  RW_RETURN_IF_ERROR(closed_);
  if (!samples_on_device() && !failed_over_)
    return Error(ErrorCode::kUnsupported, "drawing tokens on the device needs --backend cuda");
  RW_RETURN_IF_ERROR(Check(std::span<const int>(&id, 1)));
  int next = 0;
  CallStats call;
  Stopwatch sw;
  // The penalty's context: the session's tokens and this one.
  std::vector<int> context = tokens_;
  context.push_back(id);
  // After a failover the CPU's logits and the same draw on the host (Sampler).
  std::vector<float> logits;
  if (backend_->samples_on_device()) {
    const std::vector<int32_t> penalized = PenaltyIds(repetition_penalty, context);
    backend_->SetPenalty(repetition_penalty, penalized);  // read by the Run call below
    Status s = backend_->RunAndSample(id, position(), seed, temperature, position() + 1, &next,
                                      &call.parts);
    if (s.code() == ErrorCode::kDevice) {
      logits.resize(static_cast<size_t>(engine_->config().vocab_size));
      s = OnDeviceFault(s, &id, 1, LogitsRows::kLast, logits.data(), &call.parts);
    }
    RW_RETURN_IF_ERROR(s);
  } else {
    logits.resize(static_cast<size_t>(engine_->config().vocab_size));
    RW_RETURN_IF_ERROR(RunChunk(&id, 1, LogitsRows::kLast, logits.data(), &call.parts));
  }
  if (!logits.empty()) {
    SamplingParams p;
    p.temperature = static_cast<float>(temperature);
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = repetition_penalty;
    p.seed = seed;
    next = Sampler(p).Sample(logits, position() + 1, context);
  }
  RecordDecode(std::span<const int>(&id, 1), call, sw.Seconds());
  return next;
}

Status Session::DecodeTopK(int id, int k, float repetition_penalty, TopKStep* out) {
  RW_RETURN_IF_ERROR(init_);
  RW_RETURN_IF_ERROR(closed_);
  if (k < 1 || k > kMaxDeviceTopK)
    return Error(ErrorCode::kInvalidArgument, "top-k on the device needs 1 <= k <= {}, got {}",
                 kMaxDeviceTopK, k);
  RW_RETURN_IF_ERROR(Check(std::span<const int>(&id, 1)));
  out->ids.clear();
  out->values.clear();
  out->logits.clear();
  CallStats call;
  Stopwatch sw;
  // The penalty's context: the session's tokens and this one. The device penalizes its row; a
  // row computed on the CPU is penalized here.
  std::vector<int> context = tokens_;
  context.push_back(id);
  bool host_row = true;
  if (backend_->samples_on_device()) {
    if (k > backend_->max_top_k())
      return Error(ErrorCode::kInvalidArgument, "top-k on the device needs k <= {}, got {}",
                   backend_->max_top_k(), k);
    const std::vector<int32_t> penalized = PenaltyIds(repetition_penalty, context);
    backend_->SetPenalty(repetition_penalty, penalized);  // read by the Run call below
    Status s =
        backend_->RunAndTopK(id, position(), k, &out->ids, &out->values, &out->logits, &call.parts);
    host_row = false;
    if (s.code() == ErrorCode::kDevice) {
      out->ids.clear();
      out->values.clear();
      out->logits.resize(static_cast<size_t>(engine_->config().vocab_size));
      s = OnDeviceFault(s, &id, 1, LogitsRows::kLast, out->logits.data(), &call.parts);
      host_row = true;
    }
    RW_RETURN_IF_ERROR(s);
  } else {
    out->logits.resize(static_cast<size_t>(engine_->config().vocab_size));
    RW_RETURN_IF_ERROR(RunChunk(&id, 1, LogitsRows::kLast, out->logits.data(), &call.parts));
  }
  if (host_row && repetition_penalty != 1.0f)
    Sampler::ApplyRepetitionPenalty(out->logits, context, repetition_penalty);
  RecordDecode(std::span<const int>(&id, 1), call, sw.Seconds());
  return Status::Ok();
}

void Session::Reset() {
  tokens_.clear();
  calls_.clear();
  last_ = prefill_total_ = decode_total_ = CallStats{};
}

bool Session::CanRewind(int64_t pos) const {
  return backend_ != nullptr &&
         backend_->CanTruncate(position(), pos, engine_->config().sliding_window);
}

Status Session::Rewind(int64_t pos) {
  if (!CanRewind(pos))
    return Error(
        ErrorCode::kOutOfRange,
        "cannot rewind from position {} to {}: the sliding-window cache no longer holds it",
        position(), pos);
  RW_RETURN_IF_ERROR(backend_->Truncate(pos));
  tokens_.resize(static_cast<size_t>(pos));
  // calls_ keeps summing to position(): the call that pos cuts stays in part.
  int64_t sum = 0;
  size_t i = 0;
  while (i < calls_.size() && sum + calls_[i] <= pos) sum += calls_[i++];
  calls_.resize(i);
  if (sum < pos) calls_.push_back(static_cast<int32_t>(pos - sum));
  return Status::Ok();
}

int Argmax(std::span<const float> logits) {
  int best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int>(i);
  return best;
}

Result<std::vector<int>> GenerateGreedy(Session& session, std::span<const int> prompt, int max_new,
                                        std::span<const int> stop_ids) {
  if (max_new < 0)
    return Error(ErrorCode::kInvalidArgument, "max_new must be >= 0, not {}", max_new);
  if (session.position() + static_cast<int64_t>(prompt.size()) + std::max(0, max_new - 1) >
      session.engine().max_context())
    return Error(
        ErrorCode::kOutOfRange,
        "prompt of {} tokens plus {} new exceeds the maximum context of {} (--max-context)",
        prompt.size(), max_new, session.engine().max_context());
  RW_ASSIGN_OR_RETURN(std::vector<float> logits, session.Prefill(prompt, false));
  std::vector<int> out;
  while (static_cast<int>(out.size()) < max_new) {
    const int next = Argmax(logits);
    out.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    if (static_cast<int>(out.size()) == max_new) break;
    RW_ASSIGN_OR_RETURN(logits, session.Decode(next));
  }
  return out;
}

}  // namespace rw
