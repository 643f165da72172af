// The Gemma 4 forward pass on the GPU: CudaForwardPass mirrors ForwardPass (runtime/forward.h)
// block by block, with the same function names and the same reference modules, over weights a
// CudaModel holds. fp32 activations and accumulation; the KV cache lives in device memory with
// KvCache's slot rule (position p in slot p % capacity; sliding layers keep window + chunk − 1
// slots); logits are copied back to the host.
//
// Routed experts: with every expert resident, or on the mapped path under a budget (kernels read
// experts missing from VRAM in place from pinned host memory), the router's choice never leaves
// the GPU during a step and a decode step is one CUDA graph (one host sync per token: the logits
// or the drawn token, with all layers' routing copied back alongside for the cache's upkeep).
// On the copy path the chosen indices are copied back per layer (a host sync each) so the VRAM
// expert cache can fetch the missing ones. Expert outputs are summed per token in ascending
// expert order, so the logits do not depend on what the cache held.
//
// Plain C++ interface: engine code includes it without CUDA headers.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/cuda/tuning.h"
#include "runtime/cuda_model.h"
#include "runtime/forward.h"

namespace rw {

class CudaForwardPass {
 public:
  static Result<std::unique_ptr<CudaForwardPass>> Create(const CudaModel& model,
                                                         int64_t max_context, int64_t max_chunk);
  ~CudaForwardPass();

  int64_t max_chunk() const { return max_chunk_; }
  int64_t config_hidden() const { return c_.hidden_size; }
  // Slots of the sliding rings (0 without sliding layers), as KvCache::sliding_capacity.
  int64_t sliding_capacity() const { return sliding_capacity_; }
  // Host waits on the GPU so far (results read back: logits, routed experts' indices).
  uint64_t host_syncs() const { return syncs_; }
  // Decode steps replayed from a CUDA graph (the rest ran kernel by kernel).
  uint64_t graph_steps() const { return graph_steps_; }
  void set_use_graphs(bool on) { use_graphs_ = on; }

  // As ForwardPass::Run: tokens ids[0..m) at positions pos0.., K/V stored in the device cache,
  // logits for the requested rows copied to the host.
  Status Run(const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
             ForwardStats* stats);
  // One decode step (token id at pos0) that draws the next token on the GPU instead of copying
  // the logits back: the CPU sampler's unfiltered Gumbel-max draw at `temperature` with `seed`
  // at `sample_position` (cuda::LaunchGumbelSample), so 262,144 logits never cross PCIe.
  Status RunAndSample(int id, int64_t pos0, uint64_t seed, double temperature,
                      int64_t sample_position, int* token, ForwardStats* stats);
  // The repetition penalty the next RunAndSample or RunAndTopK applies to its row on the GPU
  // first (cuda::LaunchRepetitionPenalty) over these distinct ids (at most the session's
  // context); 1 turns it off. Cleared by each of those calls.
  void SetPenalty(float penalty, std::span<const int> ids) {
    penalty_ = penalty;
    penalty_ids_ = ids;
  }
  // One decode step that copies back only the step's top-k candidates (every logit at or above
  // the k-th largest, cuda::LaunchTopKCandidates; 1 <= k <= cuda::kMaxTopK) into ids/values;
  // when there are more than kTopKCap of them (ties), the whole row into `logits` instead (the
  // other outputs are then empty).
  static constexpr int kTopKCap = 1024;
  // Device bytes of the prefill split scratch for chunks of up to max_chunk tokens.
  static uint64_t SplitBytes(const ModelConfig& config, int64_t max_chunk);
  static constexpr int kMaxTopK = 64;  // cuda::kMaxTopK
  Status RunAndTopK(int id, int64_t pos0, int k, std::vector<int>* ids, std::vector<float>* values,
                    std::vector<float>* logits, ForwardStats* stats);
  // A speculative verify whose picks are made on the GPU (no repetition penalty): tokens
  // ids[0..m) at pos0.. (m <= kMaxVerifyPicks), every row's logits kept on the device, then row
  // r picked as RunAndSample (k = 0: the draw at sample position pos0 + 1 + r) or RunAndTopK
  // (k > 0: its candidates) would pick it after a decode step. Only m tokens or candidate lists
  // cross PCIe, where copying the rows back took ~0.6 ms and drawing 262,144 logits on the host
  // ~2.5 ms a row (H200 host).
  static constexpr int kMaxVerifyPicks = 32;
  // Run with LogitsRows::kAll for a speculative verify (see RowsPath).
  Status Verify(const int* ids, int64_t m, int64_t pos0, float* logits, ForwardStats* stats);
  Status VerifyAndPick(const int* ids, int64_t m, int64_t pos0, uint64_t seed, double temperature,
                       int k, std::vector<RowPick>* picks, ForwardStats* stats);

  // Copies the residual after each of `layers` (ascending, distinct) to the host for every token
  // of each call from now on (empty: stop), into captured() as [layer][m][hidden] of the last
  // call (m = captured_tokens()). Allocates pinned memory for max_chunk rows per layer.
  Status SetCapture(const std::vector<int>& layers);
  const float* captured() const { return h_capture_; }
  int64_t captured_tokens() const { return captured_m_; }

  // After a Run that failed with a CUDA error (ErrorCode::kDevice, its message naming the layer
  // and the op), what the device still holds, for finishing the call on the CPU
  // (runtime/cuda_fault.cpp):
  // The layer whose input the device residual holds: the failing layer when the error came
  // before its attention added to the residual, num_layers when the layers had all been queued
  // (the head reads the residual without changing it); -1 when none (the embedding, a decode
  // graph, or a layer past that point): the call must be rerun from its tokens.
  int resume_layer() const { return residual_intact_ ? layer_ : -1; }
  // Copies the residual (the last call's m rows, [m][hidden]) to the host. An error when the
  // device cannot be read any more (a sticky error: the context is lost).
  Status DownloadResidual(int64_t m, float* x);
  // Copies the K/V of positions [0, end) of every layer into kv (the same capacities and slot
  // rule; what the failed call wrote for its own positions is rewritten by whoever reruns it).
  Status DownloadKv(KvCache& kv, int64_t end);
  // Testing: runs the embedding and layers [0, end_layer) of a call at pos0 (storing their K/V),
  // waits, and copies the residual entering layer end_layer to x (the reference half of a
  // failover: the CPU continues from there).
  Status RunLayers(const int* ids, int64_t m, int64_t pos0, int end_layer, float* x);

 private:
  explicit CudaForwardPass(const CudaModel& model) : model_(model), c_(model.config()) {}
  Status Allocate(int64_t max_context, int64_t max_chunk);
  // Run without the fault bookkeeping (Run wraps it: the injected fault, the layer named).
  Status RunCall(const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
                 ForwardStats* stats);
  // REDWING_CUDA_INJECT_FAULT=<layer>[,<call>[,sticky]] (testing): the call-th Run (from 0)
  // reports a CUDA error at the start of that layer (num_layers: before the head) without
  // touching the device; sticky also makes the device unreadable afterwards, as a lost context.
  Status ReadInjectedFault();
  // Body is about to queue layer li (num_layers: the head): x_ holds its input (resume_layer);
  // the injected fault fires here.
  Status AtLayer(int li);
  // Waits for the queued work; an error when the device cannot be read back any more.
  Status Readable();
  float* Floats(int64_t n);
  // Everything a call queues on the stream, from the embedding to the head's logits on the GPU.
  Status Body(int64_t m, LogitsRows rows);
  Status Embed(int64_t m);
  Status RopeTables(int64_t m);
  Status DecoderLayer(int li, int64_t m);
  Status CaptureLayer(int li, int64_t m);
  Status Attention(int li, int64_t m);
  Status DenseMlp(int li, int64_t m);
  Status Router(int li, int64_t m);
  Status Experts(int li, int64_t m);
  Status ExpertsDecode(int li, void* stream);
  // F1's tail and F3–F5 after the experts ran (LaunchMoeFinish).
  Status MoeFinish(int li, int64_t m);
  // The routed indices of layer li: decode keeps every layer's (read back once per step).
  int* Idx(int li, int64_t m) const {
    return m == 1 ? topk_idx_ + static_cast<int64_t>(li) * c_.top_k : topk_idx_;
  }
  // Mapped path, after a call's final sync: the cache counts the call's uses and promotes.
  Status AfterCall(int64_t m);
  // Whether a chunk's expert plan is made on the GPU (every expert resident; see
  // cuda::LaunchExpertPlan) rather than on the host after reading the routing back.
  bool GpuPlan() const;
  Status ExpertsPrefill(int li, int64_t m);
  Status Head(int64_t row0, int64_t rows);
  // xp: x split by SplitX for the affine prefill matmuls (null: the kernel reads x itself).
  Status Linear(const cuda::DevMat& w, const float* x, int64_t m, float* y,
                const cuda::XPlanes* xp = nullptr);
  // Prefill: y[i] = x·w[i]ᵀ for i < n (matrices with the same input), stacked in one launch.
  Status LinearMulti(const cuda::DevMat* w, float* const* y, int n, const float* x, int64_t m,
                     const cuda::XPlanes* xp, const char* what);
  // Prefill: splits x[m][cols] once for the matmuls that read it next; returns the planes, or
  // null where the split does not apply (decode, short chunks, odd widths). The planes are
  // planes_: valid until the next SplitX.
  Result<const cuda::XPlanes*> SplitX(const float* x, int64_t m, int64_t cols);
  Status Sync();
  // REDWING_CUDA_TIMING=1: an event after each op, read back per call into per-op GPU times
  // (printed to stderr when the pass is destroyed).
  Status Mark(const char* what);
  void CollectTimes(bool decode);
  // Waits for the routing Router read back (prefill, or experts not all resident).
  Status WaitRouting();
  int Splits(int li, int64_t m) const;

  const CudaModel& model_;
  const ModelConfig& c_;
  int64_t max_chunk_ = 0, sliding_capacity_ = 0;
  void* stream_ = nullptr;  // cudaStream_t
  void* routed_ = nullptr;  // cudaEvent_t: the routing read back to h_idx_
  // Decode with a table: the experts run on side_ while the dense MLP runs on stream_.
  void* side_ = nullptr;                    // cudaStream_t
  void *fork_ = nullptr, *join_ = nullptr;  // cudaEvent_t
  bool overlap_ = false;
  bool mapped_ = false;     // the model's experts take the mapped path
  int* h_route_ = nullptr;  // pinned: a decode step's routing, [layer][top_k]
  std::vector<cuda::DeviceBuffer> buffers_;
  // Device KV cache per layer.
  std::vector<float*> k_cache_, v_cache_;
  std::vector<int64_t> capacity_;
  // Device activations, [rows][width].
  float *x_ = nullptr, *a_ = nullptr, *a2_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr,
        *att_ = nullptr, *o_ = nullptr, *g_ = nullptr, *u_ = nullptr, *m1_ = nullptr, *r_ = nullptr,
        *router_logits_ = nullptr, *topk_w_ = nullptr, *ex_g_ = nullptr, *ex_u_ = nullptr,
        *ex_y_ = nullptr, *partial_ = nullptr;
  float *rope_cos_s_ = nullptr, *rope_sin_s_ = nullptr, *rope_cos_f_ = nullptr,
        *rope_sin_f_ = nullptr;
  int* topk_idx_ = nullptr;  // [max(chunk, layers)][top_k]
  // Prefill: the split of the x the next matmuls read (SplitX), in split_ (split_bytes_).
  void* split_ = nullptr;
  size_t split_bytes_ = 0;
  cuda::XPlanes planes_;
  // SetCapture: the layers, pinned [layer][max_chunk][hidden], the last call's tokens.
  std::vector<int> capture_layers_;
  float* h_capture_ = nullptr;
  int64_t captured_m_ = 0;
  const int* rows_of_ = nullptr;  // prefill: row of each (token, choice) in ex_y_
  float* logits_ = nullptr;       // [logits_rows_][V]
  int64_t logits_rows_ = 0;
  // Call parameters: int64 pos0, then int32 ids[max_chunk] (device and pinned host mirror).
  uint8_t* params_ = nullptr;
  uint8_t* h_params_ = nullptr;
  // The expert plan per layer (gather, row_of, row0, rows) and blob addresses per layer.
  int* plan_ = nullptr;
  int* h_plan_ = nullptr;
  int64_t plan_ints_ = 0;
  const uint8_t** ptrs_ = nullptr;
  const uint8_t** h_ptrs_ = nullptr;
  int* h_idx_ = nullptr;       // routed indices read back
  float* h_logits_ = nullptr;  // pinned, one row
  // RunAndSample: the draw's arguments while Run runs (null: copy logits), its device scratch,
  // the device and pinned host token.
  struct SampleArgs {
    uint64_t seed;
    int64_t position;
    double temperature;
    int* token;
    int k = 0;  // > 0: top-k candidates (RunAndTopK) instead of a draw
    std::vector<int>* ids = nullptr;
    std::vector<float>* values = nullptr;
    std::vector<float>* logits = nullptr;
    std::vector<RowPick>* picks = nullptr;  // VerifyAndPick: every row of the call
  };
  // VerifyAndPick's picks of the call's m rows (after Body; waits for the GPU).
  Status PickRows(int64_t m);
  // A speculative verify of 2..kRowsPathMax tokens runs decode's products over its rows
  // (cuda::LaunchMatVecRows and the expert slots), not the prefill matmuls: the matmul tiles
  // leave most of the GPU idle at a few rows (a 9-token verify took 20 ms on the H200 against
  // 2.7 ms for a decode step), and each row's products are then a decode step's. Prefill chunks
  // keep the matmuls whatever their size, so a prompt's logits stay bit-identical across
  // stores and budgets (the copy path has no decode table and takes the prefill experts).
  static constexpr int64_t kRowsPathMax = 16;
  bool verify_ = false;  // the call in progress is a Verify or VerifyAndPick
  bool RowsPath(int64_t m) const {
    return verify_ && m > 1 && m <= kRowsPathMax && model_.decode_table() != nullptr;
  }
  Status ExpertsRows(int li, int64_t m);
  const SampleArgs* sample_ = nullptr;
  void* sample_scratch_ = nullptr;
  int* d_token_ = nullptr;
  int* h_token_ = nullptr;
  float penalty_ = 1.0f;
  std::span<const int> penalty_ids_;
  int* d_penalty_ = nullptr;  // max_context ids, device and pinned
  int* h_penalty_ = nullptr;
  int64_t penalty_cap_ = 0;
  // RunAndTopK: scratch, and [count, ids[kTopKCap], values[kTopKCap]] on the device and pinned.
  void* topk_scratch_ = nullptr;
  int* d_cand_ = nullptr;
  int* h_cand_ = nullptr;
  void* graph_exec_ = nullptr;  // cudaGraphExec_t of one decode step
  // cudaGraphExec_t of a verify of m rows (index m, 2..kRowsPathMax): launched one by one, a
  // verify's ~600 kernels cost the CPU ~2.4 ms more than the decode step's graph.
  std::array<void*, kRowsPathMax + 1> verify_graphs_{};
  void DropGraphs();  // after anything a captured graph holds changed
  bool use_graphs_ = true, graph_failed_ = false;
  uint64_t syncs_ = 0, graph_steps_ = 0;
  bool alloc_failed_ = false;
  // Where the call in flight is (resume_layer()): the layer being queued (-1: before the first,
  // num_layers: the head) and whether x_ still holds that layer's input.
  int layer_ = -1;
  bool residual_intact_ = false;
  uint64_t calls_ = 0;
  int inject_layer_ = -1, fault_layer_ = -1;  // fault_layer_: the injected fault of this call
  uint64_t inject_call_ = 0;
  bool inject_sticky_ = false, lost_ = false;
  // The REDWING_CUDA_* settings in force when the pass was made (backend/cuda/tuning.h).
  cuda::Tuning tuning_;
  bool timing_ = false;
  std::vector<void*> events_;  // cudaEvent_t
  std::vector<const char*> labels_;
  std::vector<int> mark_layers_;  // the layer each mark's op belongs to (-1: none), for profiles
  size_t marks_ = 0, graph_marks_ = 0;
  std::map<std::string, std::pair<uint64_t, double>> prefill_times_, decode_times_;
  uint64_t timed_decode_steps_ = 0;
};

}  // namespace rw
