// The REDWING_CUDA_* variables parsed and validated in one place (see tuning.h), and the counts of
// the kernel paths taken.
#include "backend/cuda/tuning.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "base/log.h"

namespace rw::cuda {

const char* const kTuningVariables[] = {"REDWING_CUDA_MATVEC",       "REDWING_CUDA_MATVEC_ROWS",
                                        "REDWING_CUDA_MATMUL",       "REDWING_CUDA_WGMMA",
                                        "REDWING_CUDA_WGMMA_TN",     "REDWING_CUDA_WGMMA_TN_EXPERT",
                                        "REDWING_CUDA_STACK",        "REDWING_CUDA_SPLIT",
                                        "REDWING_CUDA_PREFILL_ATTN", "REDWING_CUDA_PDL",
                                        "REDWING_CUDA_ROWS",         "REDWING_CUDA_TOPK",
                                        "REDWING_CUDA_FUSE",         "REDWING_CUDA_OVERLAP",
                                        "REDWING_CUDA_GPU_PLAN",     "REDWING_CUDA_SPLIT_KEYS",
                                        "REDWING_CUDA_TIMING",       "REDWING_CUDA_EXPERTS",
                                        "REDWING_CUDA_PROMOTIONS",   "REDWING_CUDA_PREFILL_EXPERTS",
                                        "REDWING_CUDA_GRAPHS"};
const int kTuningVariableCount = static_cast<int>(std::size(kTuningVariables));

namespace {

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

class Parser {
 public:
  explicit Parser(const std::function<const char*(const char*)>& env) : env_(env) {}

  // One of the named values; the first is the default.
  template <typename T>
  void Choice(const char* var, std::initializer_list<std::pair<const char*, T>> options, T* out) {
    const char* v = Get(var);
    if (v == nullptr) return;
    for (const auto& [name, value] : options)
      if (std::strcmp(v, name) == 0) {
        *out = value;
        return;
      }
    std::string names;
    size_t i = 0;
    for (const auto& option : options) {
      if (i > 0) names += i + 1 == options.size() ? " or " : ", ";
      names += option.first;
      ++i;
    }
    Fail(var, names, v);
  }

  // 1 (on) or 0 (off).
  void Switch(const char* var, bool* out) { Choice(var, {{"1", true}, {"0", false}}, out); }

  void Int(const char* var, int lo, int hi, int* out) {
    const char* v = Get(var);
    if (v == nullptr) return;
    int n = 0;
    if (ParseNumber(std::string_view(v), &n) && n >= lo && n <= hi) {
      *out = n;
      return;
    }
    Fail(var, "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi), v);
  }

  std::vector<std::string> errors;

 private:
  const char* Get(const char* var) {
    const char* v = env_(var);
    return v != nullptr && *v != '\0' ? v : nullptr;
  }
  void Fail(const char* var, const std::string& allowed, const char* v) {
    errors.push_back(std::string(var) + " must be " + allowed + ", not '" + v + "'");
  }

  const std::function<const char*(const char*)>& env_;
};

std::atomic<const Tuning*> g_scoped{nullptr};
std::array<std::atomic<uint64_t>, static_cast<size_t>(Path::kCount)> g_paths{};

const ParsedTuning& FromEnvironment() {
  static const ParsedTuning parsed = [] {
    ParsedTuning p = ParseTuning([](const char* name) { return std::getenv(name); });
    for (const std::string& e : p.errors) RW_LOG_WARN("{} (the default is used)", e);
    return p;
  }();
  return parsed;
}

}  // namespace

ParsedTuning ParseTuning(const std::function<const char*(const char*)>& env) {
  ParsedTuning out;
  Tuning& t = out.tuning;
  Parser p(env);
  p.Choice<MatVecVariant>("REDWING_CUDA_MATVEC",
                          {{"i8", MatVecVariant::kInt8},
                           {"simt", MatVecVariant::kSimt},
                           {"generic", MatVecVariant::kGeneric}},
                          &t.matvec);
  p.Int("REDWING_CUDA_MATVEC_ROWS", 1, 8, &t.matvec_rows);
  p.Choice<MatMulVariant>("REDWING_CUDA_MATMUL",
                          {{"planes", MatMulVariant::kPlanes},
                           {"bf16", MatMulVariant::kBf16},
                           {"tf32", MatMulVariant::kTf32},
                           {"simt", MatMulVariant::kSimt}},
                          &t.matmul);
  p.Switch("REDWING_CUDA_WGMMA", &t.wgmma);
  p.Choice<int>("REDWING_CUDA_WGMMA_TN", {{"32", 32}, {"64", 64}, {"128", 128}},
                &t.wgmma_dense_tile);
  p.Choice<int>("REDWING_CUDA_WGMMA_TN_EXPERT", {{"32", 32}, {"64", 64}, {"128", 128}},
                &t.wgmma_expert_tile);
  p.Switch("REDWING_CUDA_STACK", &t.stack);
  p.Choice<int>("REDWING_CUDA_SPLIT", {{"fp16x2", 2}, {"bf16x3", 3}}, &t.split_parts);
  p.Choice<bool>("REDWING_CUDA_PREFILL_ATTN", {{"tiled", true}, {"split", false}},
                 &t.tiled_prefill_attention);
  p.Switch("REDWING_CUDA_PDL", &t.pdl);
  p.Choice<bool>("REDWING_CUDA_ROWS", {{"registers", true}, {"shared", false}}, &t.register_rows);
  p.Choice<bool>("REDWING_CUDA_TOPK", {{"rank", true}, {"warp", false}}, &t.rank_topk);
  p.Switch("REDWING_CUDA_FUSE", &t.fuse_rows);
  p.Switch("REDWING_CUDA_OVERLAP", &t.overlap);
  p.Switch("REDWING_CUDA_GPU_PLAN", &t.gpu_plan);
  p.Int("REDWING_CUDA_SPLIT_KEYS", 32, 1 << 20, &t.split_keys);
  p.Choice<bool>("REDWING_CUDA_TIMING", {{"0", false}, {"1", true}}, &t.timing);
  p.Choice<ExpertPath>(
      "REDWING_CUDA_EXPERTS",
      {{"auto", ExpertPath::kAuto}, {"mapped", ExpertPath::kMapped}, {"copy", ExpertPath::kCopy}},
      &t.experts);
  p.Int("REDWING_CUDA_PROMOTIONS", 0, 1 << 20, &t.promotions);
  p.Choice<ExpertPath>("REDWING_CUDA_PREFILL_EXPERTS",
                       {{"copy", ExpertPath::kCopy}, {"mapped", ExpertPath::kMapped}},
                       &t.prefill_experts);
  p.Switch("REDWING_CUDA_GRAPHS", &t.graphs);
  out.errors = std::move(p.errors);
  return out;
}

const Tuning& CurrentTuning() {
  if (const Tuning* t = g_scoped.load(std::memory_order_acquire); t != nullptr) return *t;
  return FromEnvironment().tuning;
}

const std::string& TuningErrors() {
  static const std::string joined = [] {
    std::string s;
    for (const std::string& e : FromEnvironment().errors) s += (s.empty() ? "" : "; ") + e;
    return s;
  }();
  return joined;
}

ScopedTuning::ScopedTuning(const Tuning& t)
    : tuning_(t), previous_(g_scoped.exchange(&tuning_, std::memory_order_acq_rel)) {}

ScopedTuning::~ScopedTuning() {
  g_scoped.store(previous_, std::memory_order_release);
}

bool ParseFaultInjection(const char* text, FaultInjection* out, std::string* error) {
  *out = FaultInjection{};
  if (text == nullptr || *text == '\0') return true;
  const std::string_view s(text);
  std::string_view parts[3];
  size_t n = 0, begin = 0;
  for (size_t i = 0; i <= s.size() && n < 3; ++i)
    if (i == s.size() || s[i] == ',') {
      parts[n++] = s.substr(begin, i - begin);
      begin = i + 1;
    }
  FaultInjection f;
  const bool ok = begin > s.size() && ParseNumber(parts[0], &f.layer) && f.layer >= 0 &&
                  (n < 2 || ParseNumber(parts[1], &f.call)) && (n < 3 || parts[2] == "sticky");
  if (!ok) {
    *error =
        "REDWING_CUDA_INJECT_FAULT must be <layer>[,<call>[,sticky]] with the layer and the "
        "call counted from 0, not '" +
        std::string(s) + "'";
    return false;
  }
  f.sticky = n == 3;
  *out = f;
  return true;
}

int DecodeAttentionSplits(int64_t capacity, int keys_per_split) {
  const int64_t keys = std::max(1, keys_per_split);
  return static_cast<int>(std::clamp<int64_t>((capacity + keys - 1) / keys, 1, 64));
}

void CountPath(Path p) {
  g_paths[static_cast<size_t>(p)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t PathCount(Path p) {
  return g_paths[static_cast<size_t>(p)].load(std::memory_order_relaxed);
}

}  // namespace rw::cuda
