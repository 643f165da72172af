#include "base/log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rw {
namespace {
LogLevel InitialLevel() {
  const char* env = std::getenv("REDWING_LOG");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}
std::atomic<LogLevel> g_level{InitialLevel()};
std::mutex g_mu;
}  // namespace

LogLevel CurrentLogLevel() {
  return g_level.load(std::memory_order_relaxed);
}
void SetLogLevel(LogLevel level) {
  g_level.store(level);
}

void LogLine(LogLevel level, const std::string& line) {
  static const char* kTags[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "[%s] %s\n", kTags[static_cast<int>(level)], line.c_str());
}

}  // namespace rw
