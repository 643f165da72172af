#include "sample/stop.h"

#include <algorithm>

namespace rw {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringMatcher::Push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  // Earliest stop string occurrence wins.
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    size_t at = pending_.find(s);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::Flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace rw
