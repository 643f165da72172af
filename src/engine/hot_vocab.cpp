#include "engine/hot_vocab.h"

#include <charconv>
#include <unordered_set>

#include "base/file.h"

namespace rw {
namespace {
constexpr std::string_view kFormatLine = "# redwing-hot-vocab/1";
constexpr std::string_view kIdsPrefix = "# ids: ";
}  // namespace

Result<std::vector<int>> ParseHotVocab(std::string_view text, int vocab_size) {
  std::vector<int> ids;
  std::unordered_set<int> seen;
  int64_t declared = -1;
  size_t line_no = 0;
  bool in_header = true;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      if (line != kFormatLine)
        return Error(ErrorCode::kInvalidArgument,
                     "hot vocabulary: line 1 must be '{}' (not a hot-vocabulary file?)",
                     kFormatLine);
      continue;
    }
    if (!line.empty() && line[0] == '#') {
      if (!in_header)
        return Error(ErrorCode::kInvalidArgument,
                     "hot vocabulary: line {}: a '#' line after the ids began", line_no);
      if (line.substr(0, kIdsPrefix.size()) == kIdsPrefix) {
        const std::string_view n = line.substr(kIdsPrefix.size());
        int64_t v = -1;
        auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
        if (ec != std::errc() || end != n.data() + n.size() || v < 1)
          return Error(ErrorCode::kInvalidArgument,
                       "hot vocabulary: line {}: '# ids:' needs a count >= 1", line_no);
        declared = v;
      }
      continue;
    }
    in_header = false;
    if (line.empty()) continue;
    int id = -1;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), id);
    if (ec != std::errc() || end != line.data() + line.size())
      return Error(ErrorCode::kInvalidArgument, "hot vocabulary: line {}: '{}' is not a token id",
                   line_no, line.substr(0, 40));
    if (id < 0 || id >= vocab_size)
      return Error(ErrorCode::kOutOfRange,
                   "hot vocabulary: line {}: id {} is outside the vocabulary (0..{})", line_no, id,
                   vocab_size - 1);
    if (!seen.insert(id).second)
      return Error(ErrorCode::kInvalidArgument, "hot vocabulary: line {}: id {} appears twice",
                   line_no, id);
    ids.push_back(id);
  }
  if (line_no == 0) return Error(ErrorCode::kInvalidArgument, "hot vocabulary: the file is empty");
  if (declared < 0)
    return Error(ErrorCode::kInvalidArgument, "hot vocabulary: no '# ids: N' header line");
  if (static_cast<int64_t>(ids.size()) != declared)
    return Error(ErrorCode::kInvalidArgument,
                 "hot vocabulary: the header says {} ids but the file has {} (truncated?)",
                 declared, ids.size());
  return ids;
}

Result<std::vector<int>> LoadHotVocab(const std::string& path, int vocab_size) {
  RW_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  Result<std::vector<int>> ids = ParseHotVocab(text, vocab_size);
  if (!ids.ok()) return ids.status().Annotate(path);
  return ids;
}

}  // namespace rw
