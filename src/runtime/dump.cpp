#include "runtime/dump.h"

#include <cstdio>
#include <cstdlib>

#include "base/file.h"
#include "base/log.h"

namespace rw {

Dumper Dumper::FromEnv() {
  const char* d = std::getenv("REDWING_DUMP");
  if (d == nullptr || *d == '\0') return Dumper();
  if (Status st = MakeDirectories(d); !st.ok()) {
    RW_LOG_WARN("REDWING_DUMP: {}", st.ToString());
    return Dumper();
  }
  return Dumper(d);
}

void Dumper::WriteImpl(const char* name, int layer, const float* x, int64_t rows,
                       int64_t cols) const {
  std::string file =
      layer < 0 ? fmt::format("{}.f32", name) : fmt::format("L{:02d}.{}.f32", layer, name);
  std::string path = JoinPath(dir_, file);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) {
    static bool warned = false;
    if (!warned) RW_LOG_WARN("REDWING_DUMP: cannot open {}", path);
    warned = true;
    return;
  }
  std::fwrite(x, sizeof(float), static_cast<size_t>(rows * cols), f);
  std::fclose(f);
}

}  // namespace rw
