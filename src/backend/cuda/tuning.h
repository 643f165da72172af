// The CUDA backend's environment overrides (REDWING_CUDA_*), read in one place: every variable is
// parsed and validated here, once, into a Tuning that the launchers and the CUDA forward pass
// query (docs/CUDA.md lists them all, with their defaults and the tests that cover them). Most
// select a measured fallback or an earlier kernel for comparison; the defaults are the measured
// best. Plain C++ (no fmt): the .cu files include it.
//
// Also here: the counts of the kernel paths taken (CountPath), so that a test can check that an
// override selects the path it names.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rw::cuda {

// REDWING_CUDA_MATVEC: the decode matvec kernel for affine weights.
enum class MatVecVariant : int {
  kInt8 = 0,  // "i8": integer tensor cores where they take the shape (sm_80+, groups of 64)
  kSimt,      // "simt": the register-tiled SIMT kernels (what older GPUs and other groups run)
  kGeneric,   // "generic": the generic SIMT kernels (what f32/bf16 weights run)
};

// REDWING_CUDA_MATMUL: the prefill matmul kernel for affine weights.
enum class MatMulVariant : int {
  kPlanes = 0,  // "planes": x split once, warpgroup MMA on Hopper, else the planes kernel
  kBf16,        // "bf16": the bf16 kernel that splits x itself (what unsplit inputs take)
  kTf32,        // "tf32": the simple 3xTF32 kernel (what f32/bf16 weights take)
  kSimt,        // "simt": fp32 FMAs, no tensor cores (what GPUs before sm_80 run)
};

// REDWING_CUDA_EXPERTS / REDWING_CUDA_PREFILL_EXPERTS (applied by the engine).
enum class ExpertPath : int { kUnset = 0, kAuto, kMapped, kCopy };

struct Tuning {
  // ---- Kernels (src/backend/cuda) ----
  MatVecVariant matvec = MatVecVariant::kInt8;  // REDWING_CUDA_MATVEC=i8|simt|generic
  int matvec_rows = 8;  // REDWING_CUDA_MATVEC_ROWS=1..8: a batch's input rows per integer block
  MatMulVariant matmul = MatMulVariant::kPlanes;  // REDWING_CUDA_MATMUL=planes|bf16|tf32|simt
  bool wgmma = true;                              // REDWING_CUDA_WGMMA=1|0
  int wgmma_dense_tile = 0;   // REDWING_CUDA_WGMMA_TN=32|64|128 (0: chosen per product)
  int wgmma_expert_tile = 0;  // REDWING_CUDA_WGMMA_TN_EXPERT=32|64|128 (0: by rows per expert)
  bool stack = true;          // REDWING_CUDA_STACK=1|0
  int split_parts = 2;        // REDWING_CUDA_SPLIT=fp16x2|bf16x3
  bool tiled_prefill_attention = true;  // REDWING_CUDA_PREFILL_ATTN=tiled|split
  bool pdl = true;                      // REDWING_CUDA_PDL=1|0
  bool register_rows = true;            // REDWING_CUDA_ROWS=registers|shared
  bool rank_topk = true;                // REDWING_CUDA_TOPK=rank|warp
  // ---- The forward pass (src/runtime/cuda_*) ----
  bool fuse_rows = true;  // REDWING_CUDA_FUSE=1|0
  bool overlap = true;    // REDWING_CUDA_OVERLAP=1|0
  bool gpu_plan = true;   // REDWING_CUDA_GPU_PLAN=1|0
  int split_keys = 64;    // REDWING_CUDA_SPLIT_KEYS=<keys per decode attention split, >= 32>
  bool timing = false;    // REDWING_CUDA_TIMING=0|1
  // ---- The engine (src/engine: overrides of EngineOptions; unset: the options stand) ----
  ExpertPath experts = ExpertPath::kUnset;          // REDWING_CUDA_EXPERTS=auto|mapped|copy
  int promotions = -1;                              // REDWING_CUDA_PROMOTIONS=<n >= 0>
  ExpertPath prefill_experts = ExpertPath::kUnset;  // REDWING_CUDA_PREFILL_EXPERTS=mapped|copy
  bool graphs = true;                               // REDWING_CUDA_GRAPHS=1|0
};

// Every variable ParseTuning reads (REDWING_CUDA_INJECT_FAULT is read by ParseFaultInjection).
extern const char* const kTuningVariables[];
extern const int kTuningVariableCount;

// Parses the variables from `env` (name -> value, nullptr when unset; an empty value counts as
// unset). A bad value leaves that setting at its default and adds an error naming the variable,
// the values it takes and the value given.
struct ParsedTuning {
  Tuning tuning;
  std::vector<std::string> errors;
};
ParsedTuning ParseTuning(const std::function<const char*(const char*)>& env);

// The settings in force: those of the innermost live ScopedTuning, else the environment's, parsed
// on first use (each bad value is logged once as a warning, and TuningErrors says what it was).
const Tuning& CurrentTuning();
// The environment's errors, "" when none: the CUDA forward pass refuses to start with them.
const std::string& TuningErrors();

// Replaces the settings for its lifetime, on every thread (tests: an override's path in-process).
class ScopedTuning {
 public:
  explicit ScopedTuning(const Tuning& t);
  ~ScopedTuning();
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;

 private:
  Tuning tuning_;
  const Tuning* previous_;
};

// REDWING_CUDA_INJECT_FAULT=<layer>[,<call>[,sticky]]: a testing hook, read again each time a
// session's CUDA pass is made (so a test can give one session a fault), not once.
struct FaultInjection {
  int layer = -1;  // -1: none
  uint64_t call = 0;
  bool sticky = false;
};
// text null or empty: none. false with *error naming the variable on bad syntax.
bool ParseFaultInjection(const char* text, FaultInjection* out, std::string* error);

// Decode attention splits for a cache of `capacity` keys at `keys_per_split`: a function of the
// capacity only (a captured graph stays valid at every position), 1..64.
int DecodeAttentionSplits(int64_t capacity, int keys_per_split);

// ---- Paths taken ----

enum class Path : int {
  kMatVecInt8 = 0,
  kMatVecTiled,
  kMatVecGeneric,
  kMatVecInt8Rows,  // a batch's input rows sharing the integer kernel's blocks
  kMatMulWgmma,
  kMatMulWgmmaStacked,
  kMatMulPlanes,
  kMatMulBf16,
  kMatMulTf32,
  kMatMulSimt,
  kWgmmaTile32,
  kWgmmaTile64,
  kWgmmaTile128,
  kSplitFp16x2,
  kSplitBf16x3,
  kPrefillAttentionTiled,
  kPrefillAttentionSplit,
  kRowsRegisters,
  kRowsShared,
  kTopKRank,
  kTopKWarp,
  kOverlappedLaunch,  // a launch with programmatic dependent launch
  kFusedRows,         // LaunchResidualFfnInputs or LaunchMoeFinishNorm
  kExpertPlanGpu,
  kExpertsBeside,  // decode experts forked onto the side stream
  kTimingMark,
  kCount
};
// Counted on every launch that takes the path (a relaxed atomic add), over all threads.
void CountPath(Path p);
uint64_t PathCount(Path p);

}  // namespace rw::cuda
