// Reads of whole expert blobs, scheduled with two priorities: demand reads (a layer is waiting)
// go before early reads (guesses for the next layer), and a queued early read can be promoted.
// Two backends: io_uring (one thread keeps up to `depth` reads in flight) where the kernel
// allows it, else `depth` threads calling pread. "auto" probes io_uring once and falls back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rw {

struct ReadJob {
  int fd = -1;
  std::string path;  // for messages
  uint64_t offset = 0, length = 0;
  // Destination; null: a buffer owned by the queue, valid during done.
  uint8_t* dst = nullptr;
  // Called on an I/O thread with the outcome (a short file or an I/O error) and the bytes.
  std::function<void(const Status& status, const uint8_t* data)> done;
};

// How expert reads reach the disk: kIoUring (one thread keeps reads in flight), kPread (a pool
// of threads), kAuto (io_uring where the kernel allows it, else pread).
enum class IoBackend { kAuto, kIoUring, kPread };
const char* IoBackendName(IoBackend backend);  // "auto" | "io_uring" | "pread"
Result<IoBackend> ParseIoBackend(std::string_view name);

class ReadQueue {
 public:
  virtual ~ReadQueue() = default;
  // Returns an id for Promote.
  virtual uint64_t Submit(ReadJob job, bool demand) = 0;
  // Moves a queued early read to the demand queue; false if it already started.
  virtual bool Promote(uint64_t id) = 0;
  virtual const char* backend() const = 0;  // "io_uring" or "pread"

  // Pending jobs finish before destruction.
  static Result<std::unique_ptr<ReadQueue>> Create(IoBackend backend, int depth);
};

}  // namespace rw
