#include "base/timer.h"

#include <cstdio>
#include <cstring>

namespace rw {
namespace {
uint64_t StatusField(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  size_t klen = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, klen) == 0 && line[klen] == ':') {
      std::sscanf(line + klen + 1, "%lu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

uint64_t PeakRssBytes() {
  return StatusField("VmHWM");
}

RssBreakdown CurrentRss() {
  return {StatusField("RssAnon"), StatusField("RssFile")};
}

}  // namespace rw
