#include "engine/drafter.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "base/file.h"

namespace rw {

NgramDrafter::NgramDrafter(int max_ngram, int min_ngram)
    : max_ngram_(std::max(1, max_ngram)), min_ngram_(std::clamp(min_ngram, 1, max_ngram_)) {}

std::vector<int> NgramDrafter::Propose(std::span<const int> ctx, int n) {
  const int64_t size = static_cast<int64_t>(ctx.size());
  if (n <= 0) return {};
  for (int m = max_ngram_; m >= min_ngram_; --m) {
    if (size <= m) continue;
    const std::span<const int> tail = ctx.subspan(static_cast<size_t>(size - m));
    // Latest start first: recent text predicts the continuation best. A match may overlap the
    // tail (a repeating run), and what follows it may reach into the tail: both are fine.
    for (int64_t start = size - m - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), ctx.begin() + start)) continue;
      const int64_t from = start + m;
      const int64_t take = std::min<int64_t>(n, size - from);
      return std::vector<int>(ctx.begin() + from, ctx.begin() + from + take);
    }
  }
  return {};
}

OracleDrafter::OracleDrafter(std::vector<int> continuation, double p, uint64_t seed)
    : continuation_(std::move(continuation)), p_(std::clamp(p, 0.0, 1.0)), seed_(seed) {}

std::string OracleDrafter::name() const {
  return fmt::format("oracle:{:g}", p_);
}

namespace {
// splitmix64: a well-mixed hash of (seed, index) into [0, 1).
double Uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}
}  // namespace

std::vector<int> OracleDrafter::Propose(std::span<const int> ctx, int n) {
  // ctx holds the prompt and every generated token so far: the next one is continuation[g].
  if (ctx.size() < prompt_size_) return {};
  const size_t g = ctx.size() - prompt_size_;
  std::vector<int> out;
  for (size_t i = g; i < continuation_.size() && static_cast<int>(out.size()) < n; ++i) {
    int id = continuation_[i];
    // A different id (ids are >= 0, so id - 1 or 1 stays in the vocabulary).
    if (Uniform(seed_, i) >= p_) id = id > 0 ? id - 1 : 1;
    out.push_back(id);
  }
  return out;
}

Result<DrafterSpec> ParseDrafterSpec(const std::string& text) {
  DrafterSpec s;
  if (text == "off" || text.empty()) return s;
  if (text == "ngram") {
    s.kind = DrafterSpec::Kind::kNgram;
    return s;
  }
  if (text.rfind("oracle:", 0) == 0) {
    const std::string num = text.substr(7);
    char* end = nullptr;
    errno = 0;
    const double p = std::strtod(num.c_str(), &end);
    if (num.empty() || end != num.c_str() + num.size() || errno != 0 || !(p >= 0 && p <= 1))
      return Error(ErrorCode::kInvalidArgument,
                   "drafter oracle:P needs an acceptance probability 0 <= P <= 1, not '{}'", num);
    s.kind = DrafterSpec::Kind::kOracle;
    s.p = p;
    return s;
  }
  // Anything else names a DFlash drafter directory.
  if (IsDirectory(text)) {
    s.kind = DrafterSpec::Kind::kDFlash;
    s.path = text;
    return s;
  }
  return Error(ErrorCode::kInvalidArgument,
               "drafter must be ngram, oracle:P, off or a drafter directory, not '{}' (no such "
               "directory)",
               text);
}

std::shared_ptr<Drafter> MakeDrafter(const DrafterSpec& spec, std::vector<int> continuation,
                                     uint64_t seed) {
  switch (spec.kind) {
    case DrafterSpec::Kind::kOff:
      return nullptr;
    case DrafterSpec::Kind::kNgram:
      return std::make_shared<NgramDrafter>();
    case DrafterSpec::Kind::kOracle:
      return std::make_shared<OracleDrafter>(std::move(continuation), spec.p, seed);
    case DrafterSpec::Kind::kDFlash:
      return nullptr;
  }
  return nullptr;
}

}  // namespace rw
