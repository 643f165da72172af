// Stop strings matched on decoded text, across token boundaries: text that might be the start of
// a stop string is held back until it is known not to be one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rw {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Feeds newly decoded text; returns the text that is safe to emit now. Once a stop string is
  // seen, returns the text before it and stopped() turns true; later input is ignored.
  std::string Push(std::string_view text);
  // End of generation: whatever is still held back.
  std::string Flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace rw
