// One install at a time per output directory. Two installs into the same output would share
// "<out>.installing" and its journal, and one's --discard-partial would delete the other's files.
// So an install holds an exclusive flock(2) on "<out>.installing.lock" from before it looks at
// the staging directory until it returns, with its pid written into the file so that a second
// install can say which process holds it. The kernel drops the lock when the holder dies, so a
// killed install never blocks the next one (which then resumes or discards its staging).
#pragma once

#include <string>

#include "base/status.h"

namespace rw {

inline constexpr const char* kInstallLockSuffix = ".installing.lock";

class InstallLock {
 public:
  // Takes the lock on `path` without waiting: kAlreadyExists naming the holder's pid (and
  // `what`, the output) when another process holds it.
  static Result<InstallLock> Acquire(const std::string& path, const std::string& what);

  InstallLock() = default;
  InstallLock(InstallLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  InstallLock& operator=(InstallLock&& o) noexcept;
  InstallLock(const InstallLock&) = delete;
  InstallLock& operator=(const InstallLock&) = delete;
  // Removes the lock file (while still holding it) and releases the lock.
  ~InstallLock();

 private:
  void Release();
  int fd_ = -1;
  std::string path_;
};

}  // namespace rw
