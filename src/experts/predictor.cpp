#include "experts/predictor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/file.h"

namespace rw {
namespace {

// Both files: an 8-byte magic, four little-endian int32 (layers, top_k or 0, experts, count),
// then the payload.
constexpr char kTraceMagic[8] = {'R', 'W', 'T', 'R', 'A', 'C', 'E', '1'};
constexpr char kPredictorMagic[8] = {'R', 'W', 'P', 'R', 'E', 'D', '0', '1'};

std::string Header(const char* magic, int32_t a, int32_t b, int32_t c, int32_t d) {
  std::string s(magic, 8);
  for (int32_t v : {a, b, c, d}) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

Status ParseHeader(const std::string& bytes, const char* magic, const std::string& path,
                   int32_t out[4]) {
  if (bytes.size() < 24 || std::memcmp(bytes.data(), magic, 8) != 0)
    return Error(ErrorCode::kCorrupt, "{}: not a redwing {} file", path,
                 magic == kTraceMagic ? "routing trace" : "expert predictor");
  std::memcpy(out, bytes.data() + 8, 16);
  return Status::Ok();
}

}  // namespace

Status RoutingTrace::Write(const std::string& path) const {
  std::string s = Header(kTraceMagic, layers, top_k, num_experts, static_cast<int32_t>(tokens()));
  s.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
  return WriteFileAtomic(path, s);
}

Result<RoutingTrace> RoutingTrace::Read(const std::string& path) {
  RW_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  int32_t h[4];
  RW_RETURN_IF_ERROR(ParseHeader(bytes, kTraceMagic, path, h));
  RoutingTrace t;
  t.layers = h[0];
  t.top_k = h[1];
  t.num_experts = h[2];
  if (t.layers <= 0 || t.top_k <= 0 || t.num_experts <= 0 || t.top_k > t.num_experts || h[3] < 0 ||
      bytes.size() != 24 + static_cast<uint64_t>(h[3]) * t.layers * t.top_k * 4)
    return Error(ErrorCode::kCorrupt, "{}: inconsistent header or size", path);
  t.ids.resize((bytes.size() - 24) / 4);
  std::memcpy(t.ids.data(), bytes.data() + 24, t.ids.size() * 4);
  for (int32_t id : t.ids)
    if (id < 0 || id >= t.num_experts)
      return Error(ErrorCode::kCorrupt, "{}: expert id {} out of range", path, id);
  return t;
}

Result<ExpertPredictor> ExpertPredictor::Fit(std::span<const RoutingTrace> traces) {
  if (traces.empty()) return Error(ErrorCode::kInvalidArgument, "no routing traces to fit");
  ExpertPredictor p;
  p.layers_ = traces[0].layers;
  p.num_experts_ = traces[0].num_experts;
  if (p.layers_ < 2) return Error(ErrorCode::kInvalidArgument, "fewer than two layers");
  const int64_t E = p.num_experts_;
  std::vector<double> counts(static_cast<size_t>(p.layers_ - 1) * E * E, 0.0);
  int64_t tokens = 0;
  for (const RoutingTrace& t : traces) {
    if (t.layers != p.layers_ || t.num_experts != p.num_experts_)
      return Error(ErrorCode::kInvalidArgument, "traces of different models ({}x{} vs {}x{})",
                   t.layers, t.num_experts, p.layers_, p.num_experts_);
    for (int64_t n = 0; n < t.tokens(); ++n, ++tokens)
      for (int l = 0; l + 1 < t.layers; ++l) {
        double* c = &counts[static_cast<size_t>(l) * E * E];
        const int32_t* a = t.token(n, l);
        const int32_t* b = t.token(n, l + 1);
        for (int i = 0; i < t.top_k; ++i)
          for (int j = 0; j < t.top_k; ++j) c[a[i] * E + b[j]] += 1.0;
      }
  }
  if (tokens == 0) return Error(ErrorCode::kInvalidArgument, "the traces hold no tokens");
  p.p_.resize(counts.size());
  for (size_t row = 0; row < counts.size() / E; ++row) {
    const double sum = std::accumulate(&counts[row * E], &counts[row * E] + E, 0.0);
    for (int64_t j = 0; j < E; ++j)
      p.p_[row * E + j] = sum > 0 ? static_cast<float>(counts[row * E + j] / sum) : 0.0f;
  }
  return p;
}

Status ExpertPredictor::Write(const std::string& path) const {
  std::string s =
      Header(kPredictorMagic, layers_, 0, num_experts_, static_cast<int32_t>(p_.size()));
  s.append(reinterpret_cast<const char*>(p_.data()), p_.size() * 4);
  return WriteFileAtomic(path, s);
}

Result<ExpertPredictor> ExpertPredictor::Read(const std::string& path, int layers,
                                              int num_experts) {
  // The model fixes the file's size: a larger one (a damaged or hostile file in the model
  // directory) is refused before it is read into memory.
  const uint64_t expected =
      24 + static_cast<uint64_t>(std::max(layers - 1, 0)) * num_experts * num_experts * 4;
  RW_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path, expected));
  int32_t h[4];
  RW_RETURN_IF_ERROR(ParseHeader(bytes, kPredictorMagic, path, h));
  if (h[0] != layers || h[2] != num_experts)
    return Error(ErrorCode::kInvalidArgument,
                 "{}: fitted for {} layers × {} experts, but the model has {} × {}", path, h[0],
                 h[2], layers, num_experts);
  const uint64_t n = static_cast<uint64_t>(layers - 1) * num_experts * num_experts;
  if (static_cast<uint64_t>(h[3]) != n || bytes.size() != 24 + n * 4)
    return Error(ErrorCode::kCorrupt, "{}: inconsistent size", path);
  ExpertPredictor p;
  p.layers_ = layers;
  p.num_experts_ = num_experts;
  p.p_.resize(n);
  std::memcpy(p.p_.data(), bytes.data() + 24, n * 4);
  return p;
}

void ExpertPredictor::Predict(int layer, std::span<const int> chosen, int top_k,
                              std::vector<int>* out) const {
  out->clear();
  if (layer < 0 || layer + 1 >= layers_) return;
  const int64_t E = num_experts_;
  std::vector<float> score(E, 0.0f);
  const float* table = &p_[static_cast<size_t>(layer) * E * E];
  for (int i : chosen)
    for (int64_t j = 0; j < E; ++j) score[j] += table[i * E + j];
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  const int k = std::min<int>(top_k, static_cast<int>(E));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  out->assign(order.begin(), order.begin() + k);
}

double ExpertPredictor::Accuracy(const RoutingTrace& t) const {
  int64_t right = 0, total = 0;
  std::vector<int> guess;
  for (int64_t n = 0; n < t.tokens(); ++n)
    for (int l = 0; l + 1 < t.layers; ++l) {
      const int32_t* a = t.token(n, l);
      const int32_t* b = t.token(n, l + 1);
      Predict(l, std::span<const int>(a, t.top_k), t.top_k, &guess);
      for (int g : guess) right += std::count(b, b + t.top_k, g) > 0 ? 1 : 0;
      total += t.top_k;
    }
  return total > 0 ? static_cast<double>(right) / total : 0.0;
}

}  // namespace rw
