#include "install/install_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rw {

Result<InstallLock> InstallLock::Acquire(const std::string& path, const std::string& what) {
  // A holder removes the file as it finishes, so the file this process opened may be gone by the
  // time it gets the lock; only a lock on the file still at `path` counts, else try again.
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return Error(ErrorCode::kIo, "{}: cannot create the install lock: {}", path,
                   std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {
        ::close(fd);
        return Error(ErrorCode::kIo, "{}: cannot lock: {}", path, std::strerror(err));
      }
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      ::close(fd);
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return Error(ErrorCode::kAlreadyExists,
                   "another install into {} is running (pid {}); wait for it to finish, or stop "
                   "it and run again with --resume",
                   what, pid.empty() ? "unknown" : pid);
    }
    struct stat held, now;
    if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      const int err = errno;
      ::unlink(path.c_str());
      ::close(fd);
      return Error(ErrorCode::kIo, "{}: cannot write the install lock: {}", path,
                   std::strerror(err));
    }
    InstallLock lock;
    lock.fd_ = fd;
    lock.path_ = path;
    return lock;
  }
  return Error(ErrorCode::kIo, "{}: the install lock kept changing hands", path);
}

InstallLock& InstallLock::operator=(InstallLock&& o) noexcept {
  if (this != &o) {
    Release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

InstallLock::~InstallLock() {
  Release();
}

void InstallLock::Release() {
  if (fd_ < 0) return;
  // Unlink before unlocking: a process that opened the old file and then gets its lock sees
  // that the path no longer names it and starts over.
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace rw
