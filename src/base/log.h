// Minimal leveled logging to stderr. Quiet by default below kInfo; REDWING_LOG=debug raises it.
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace rw {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel CurrentLogLevel();
void SetLogLevel(LogLevel level);
void LogLine(LogLevel level, const std::string& line);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < CurrentLogLevel()) return;
  LogLine(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rw

#define RW_LOG_DEBUG(...) ::rw::Log(::rw::LogLevel::kDebug, __VA_ARGS__)
#define RW_LOG_INFO(...) ::rw::Log(::rw::LogLevel::kInfo, __VA_ARGS__)
#define RW_LOG_WARN(...) ::rw::Log(::rw::LogLevel::kWarn, __VA_ARGS__)
#define RW_LOG_ERROR(...) ::rw::Log(::rw::LogLevel::kError, __VA_ARGS__)
