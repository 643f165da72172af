// The API the CLI and the server use; they never touch tensors.
//
// Engine: a loaded, immutable model (weights mapped, expert store open, threads). Session: one
// timeline over an Engine: its KV cache and position. Sessions of one Engine may run on
// different threads, but each Session is used by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "chat/chat_template.h"
#include "format/model_config.h"
#include "runtime/forward.h"
#include "runtime/forward_backend.h"
#include "tokenizer/tokenizer.h"

namespace rw {

struct EngineOptions {
  std::string model_dir;
  int threads = 0;             // 0: ThreadPool::Default() (REDWING_THREADS or all cores)
  int64_t max_context = 8192;  // capped by the model's max_position_embeddings
  // Tokens per forward call during prefill; 0: auto (512, or 128 on a GPU under a VRAM budget).
  // Bigger chunks share each weight read among more tokens: on two cores 512 prefills 1.2-1.5x
  // faster than 128 (docs/PERFORMANCE.md).
  int64_t prefill_chunk = 0;
  // CPU: a prompt longer than one chunk runs layer by layer over spans of up to this many tokens
  // (every chunk of the span through layer L before layer L+1), so each routed expert the span
  // uses is read once per span rather than once per chunk. 0: chunk by chunk. Costs
  // ~14 KB of scratch per token of span.
  int64_t prefill_span = 4096;
  // Load <model_dir>/tokenizer.json and the chat template. Without them only token ids work; a
  // damaged tokenizer is reported when text is asked for, not at load.
  bool load_tokenizer = true;
  // Routed experts: mmap (the page cache holds them) or slots (private slots sized by
  // memory_budget, read with parallel preads).
  ExpertStoreKind expert_store = ExpertStoreKind::kMmap;
  uint64_t memory_budget = 0;  // slots: bytes for core + KV + scratch + slots (0: no limit)
  int io_threads = 8;          // expert reads in flight
  IoBackend io_backend = IoBackend::kAuto;
  // Early reads for the next layer's experts (one token at a time). The router guesses right
  // ~52% of the time on the full-size synthetic model, the fitted transition table at chance
  // with uniform routing; at 8 GiB the router's reads halved demand misses and cut the stalls
  // 60% (docs/PERFORMANCE.md, issue 27).
  EarlyRead early_expert_read = EarlyRead::kRouter;
  // The CPU backend's KV cache type: fp32 (the reference) unless asked otherwise; the command
  // line's default is kDefaultKvType. The CUDA backend keeps its own fp32 cache, and its host
  // copy for failover must be fp32 too.
  KvType kv_type = KvType::kF32;
  // The CPU backend's affine matvec arithmetic for decode and verify rows: exact (fp32, the
  // reference) or fast (x as two int8 planes per block of 32, integer dot products; a mean KL
  // of at most ~1e-4 nats per position on the golden fixtures, docs/PERFORMANCE.md). Prefill's
  // matmuls stay fp32 either way. The CUDA backend has exact only.
  Precision precision = Precision::kExact;
  // Lock the core weights in memory (see ModelOpenOptions::lock_core).
  bool lock_core = true;
  // Where the forward pass runs (cuda needs a CUDA build and a usable GPU).
  BackendKind backend = BackendKind::kCpu;
  // cuda: bytes of GPU memory for the core, KV cache, scratch and the VRAM expert cache (0: every
  // expert resident).
  uint64_t vram_budget = 0;
  bool cuda_graphs = true;  // cuda: replay decode steps from a CUDA graph where possible
  // cuda, under a budget: how experts missing from VRAM reach the kernels (CudaExpertPath).
  // REDWING_CUDA_EXPERTS=mapped|copy overrides.
  CudaExpertPath cuda_experts = CudaExpertPath::kAuto;
  // cuda, mapped: experts promoted into VRAM slots per call at most (REDWING_CUDA_PROMOTIONS).
  int cuda_promotions = 16;
  // cuda, mapped: prefill reads missing experts in place instead of copying a chunk's experts
  // into VRAM (REDWING_CUDA_PREFILL_EXPERTS=mapped|copy overrides).
  bool cuda_prefill_in_place = false;
  // cuda: what a CUDA error in a Prefill/Decode does. kFailClosed: the call returns the error
  // and the session refuses further work. kFailoverCpu: the session finishes the call on the
  // CPU from the layer that failed and stays on the CPU; later sessions start there.
  FaultPolicy fault_policy = FaultPolicy::kFailClosed;
};

class Session;

// A model directory's tokenizer and chat template, loaded as run and serve load them.
struct ModelText {
  Tokenizer tokenizer;
  ChatTemplate chat_template;
};
Result<ModelText> LoadModelText(const std::string& model_dir);

// Every check opening a model for run and serve makes, without loading it for inference: the
// directory (ModelDir::Open), the weights and expert layouts against the config
// (BindGemma4Model), and, when the model has a tokenizer.json, the tokenizer and chat template.
// `redwing verify` runs this before re-hashing.
Status CheckModelOpens(const std::string& model_dir);

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static Result<std::shared_ptr<Engine>> Load(const EngineOptions& options);
  ~Engine();

  const ModelConfig& config() const { return model_->config(); }
  const RuntimeModel& model() const { return *model_; }
  int64_t max_context() const { return max_context_; }
  int64_t prefill_chunk() const { return prefill_chunk_; }
  // Tokens per layer-major prefill call (0: chunk by chunk; the CUDA backend always is).
  int64_t prefill_span() const { return prefill_span_; }
  // The CPU backend's KV cache type.
  KvType kv_type() const { return kv_type_; }
  Precision precision() const { return precision_; }
  ThreadPool* pool() const { return pool_; }
  BackendKind backend() const { return backend_; }
  // The device backend's weights (null on the CPU backend).
  const DeviceModel* device_model() const { return device_.get(); }
  // How routed experts reach the GPU's kernels: "resident", "mapped" or "copy" ("" on the CPU).
  std::string cuda_expert_path() const;
  FaultPolicy fault_policy() const { return fault_policy_; }
  // Whether a CUDA error made a session fail over (failover-cpu): sessions created since run on
  // the CPU. Sessions already on the GPU stay there until they fail themselves.
  bool gpu_dropped() const { return gpu_dropped_.load(); }
  // Expert store figures (on CUDA: the VRAM expert cache's hits, misses and bytes copied) (hits,
  // bytes read, waits) since load.
  ExpertStoreStats expert_stats() const;
  std::unique_ptr<Session> NewSession() const;

  // Text: the tokenizer (null when the model directory has none or it failed to load; then
  // text_status() says why) and the chat template (the directory's own, else the built-in
  // Gemma 4 format).
  const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const Status& text_status() const { return text_status_; }
  const ChatTemplate& chat_template() const { return chat_template_; }
  // Ids that end a turn: the config's eos ids plus <turn|>, <eos> and <|tool_response> (Gemma 4
  // ends a turn with 106 and starts awaiting a tool result with 50).
  const std::vector<int>& stop_ids() const { return stop_ids_; }

 private:
  Engine() = default;
  Status LoadText(const std::string& model_dir);
  std::unique_ptr<RuntimeModel> model_;
  std::unique_ptr<DeviceModel> device_;
  BackendKind backend_ = BackendKind::kCpu;
  KvType kv_type_ = KvType::kF32;
  Precision precision_ = Precision::kExact;
  FaultPolicy fault_policy_ = FaultPolicy::kFailClosed;
  mutable std::atomic<bool> gpu_dropped_{false};  // set by a Session failing over
  friend class Session;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  int64_t max_context_ = 0, prefill_chunk_ = 0, prefill_span_ = 0;
  std::optional<Tokenizer> tokenizer_;
  Status text_status_;
  ChatTemplate chat_template_ = ChatTemplate::Native();
  std::vector<int> stop_ids_;
};

// Timing of one Prefill/Decode call (or a sum of them).
struct CallStats {
  double seconds = 0;
  int64_t tokens = 0;
  ForwardStats parts;  // attention, dense MLP, router+experts, head
  void Add(const CallStats& o) {
    seconds += o.seconds;
    tokens += o.tokens;
    parts.Add(o.parts);
  }
};

class Session {
 public:
  explicit Session(std::shared_ptr<const Engine> engine);
  ~Session();

  // Appends ids at the current position. Returns logits [n][vocab] when all_logits, else the
  // last position's [vocab]. Empty input, ids outside the vocabulary or a context beyond
  // max_context are errors that leave the session unchanged. `cancel` (may be null) is polled
  // before every layer (CPU) and between chunks; a cancelled call returns kCancelled. A call
  // that fails or is cancelled part way keeps the chunks it completed, except inside a
  // layer-major span (Engine::prefill_span), where the session starts over (position 0): the
  // span's layers were part updated.
  Result<std::vector<float>> Prefill(std::span<const int> ids, bool all_logits = false,
                                     const std::atomic<bool>* cancel = nullptr);
  // Appends one token; returns its logits [vocab].
  Result<std::vector<float>> Decode(int id);
  // Speculative decoding's verify: appends ids (the last accepted token, then drafts; at most
  // Engine::prefill_chunk() of them) in one forward call and returns their logits
  // [ids.size()][vocab]. Rewind drops the rejected ones afterwards.
  Result<std::vector<float>> Verify(std::span<const int> ids);
  // Verify with the picks made on the device (the CUDA backend), so no row of logits crosses
  // PCIe: row r's pick as DecodeSampled (top_k = 0: the draw at `temperature`) or DecodeTopK
  // (top_k candidates) would make it after a decode step, with no repetition penalty. After a
  // failover to the CPU the rows come back whole (RowPick::logits). At most
  // max_verify_picks() ids; kUnsupported when the backend has no device picks.
  Result<std::vector<RowPick>> VerifyPicks(std::span<const int> ids, uint64_t seed,
                                           double temperature, int top_k);
  int64_t max_verify_picks() const;
  // Whether DecodeSampled is available, and DecodeTopK cuts on the device: the CUDA backend.
  bool samples_on_device() const;
  // Appends one token and returns the next one drawn on the device at `temperature` (> 0) with
  // nothing filtered but the repetition penalty over the session's tokens (the token Sampler
  // would draw with `seed` at the new position), without copying the logits to the host. An
  // error unless samples_on_device().
  Result<int> DecodeSampled(int id, uint64_t seed, double temperature = 1.0,
                            float repetition_penalty = 1.0f);
  // Appends one token and returns the step's top-k candidates after the repetition penalty over
  // the session's tokens: every logit at or above the k-th largest (NaN skipped) in ids/values,
  // cut on the device so that only they cross PCIe (Sampler::SampleCandidates draws from them);
  // or the whole penalized row in logits (a CPU session, or more ties than the device keeps).
  // 1 <= k <= kMaxDeviceTopK.
  struct TopKStep {
    std::vector<int> ids;
    std::vector<float> values;
    std::vector<float> logits;
  };
  static constexpr int kMaxDeviceTopK = 64;
  Status DecodeTopK(int id, int k, float repetition_penalty, TopKStep* out);

  int64_t position() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<int>& tokens() const { return tokens_; }
  void Reset();
  // Whether the timeline can be cut back to its first `pos` tokens while keeping the cache:
  // full-attention layers always can; sliding-window rings only while the keys the next query
  // needs (the `window` positions before pos) have not been overwritten, i.e. roughly when at
  // most prefill_chunk tokens are dropped after the ring has wrapped.
  bool CanRewind(int64_t pos) const;
  Status Rewind(int64_t pos);

  // Records the experts every layer chooses for every token run from now on (null: stop).
  // (CPU backend only.)
  void set_routing_trace(RoutingTrace* trace) {
    if (backend_) backend_->set_routing_trace(trace);
  }
  // Calls hook(layer) before every decoder layer the CPU forward pass runs (tests).
  void set_before_layer(std::function<void(int layer)> hook) {
    if (backend_) backend_->set_before_layer(std::move(hook));
  }
  // The backend this session runs on (null when it could not be built: Prefill says why).
  ForwardBackend* backend() { return backend_.get(); }
  // Times this session's forward pass waited for the GPU (0 on the CPU backend).
  uint64_t host_syncs() const;
  // Whether this session runs on the GPU (false on the CPU backend and after a failover).
  bool on_gpu() const;
  // Whether a CUDA error closed this session (--fault-policy fail-closed): Prefill and Decode
  // return an error saying so from then on; a new session may use the GPU again.
  bool closed() const { return !closed_.ok(); }

  const CallStats& last_call() const { return last_; }
  const CallStats& prefill_total() const { return prefill_total_; }
  const CallStats& decode_total() const { return decode_total_; }
  const Engine& engine() const { return *engine_; }

 private:
  Status Check(std::span<const int> ids) const;
  // The timeline and the stats after a decode step (or a verify) of ids that took `seconds`.
  void RecordDecode(std::span<const int> ids, CallStats call, double seconds);
  // The distinct ids a repetition penalty touches in this context (none when it is 1).
  std::vector<int32_t> PenaltyIds(float repetition_penalty, const std::vector<int>& context) const;
  // `cancel` (may be null) is polled before every layer on the CPU; the GPU runs a chunk whole.
  Status RunChunk(const int* ids, int64_t m, LogitsRows rows, float* logits, ForwardStats* st,
                  const std::atomic<bool>* cancel = nullptr);
  std::unique_ptr<ForwardBackend> NewCpu() const;
  // The call at position() (ids[0..m)) met a device error: close the session, or finish the
  // call on the CPU and stay there (the engine's fault policy).
  Status OnDeviceFault(const Status& fault, const int* ids, int64_t m, LogitsRows rows,
                       float* logits, ForwardStats* st);

  std::shared_ptr<const Engine> engine_;
  // The forward pass and its KV cache (the CPU's, or a device's). init_ says why the chosen one
  // could not be built.
  std::unique_ptr<ForwardBackend> backend_;
  Status init_;
  Status closed_;             // fail-closed: why the session refuses work
  bool failed_over_ = false;  // moved from the GPU to the CPU
  uint64_t gpu_syncs_ = 0;    // host_syncs() of the GPU pass before a failover
  std::vector<int> tokens_;
  // The size of every forward call that made tokens_ (summing to position()), so a failover
  // that cannot read the GPU back replays the same calls on the CPU.
  std::vector<int32_t> calls_;
  CallStats last_, prefill_total_, decode_total_;
};

// Index of the largest logit (the first on ties, as torch.argmax).
int Argmax(std::span<const float> logits);

// Greedy generation: prefills prompt, then appends argmax tokens until max_new tokens or a
// stop id (which is included in the result). Returns the generated ids only.
Result<std::vector<int>> GenerateGreedy(Session& session, std::span<const int> prompt, int max_new,
                                        std::span<const int> stop_ids);

}  // namespace rw
