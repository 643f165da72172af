// The fetch pipeline of `redwing install`: every source shard is read from the Hub exactly once,
// as fixed-size segments (HTTP range requests) on `connections` worker threads, into a fixed pool
// of segment buffers. Segments of one shard may arrive in any order but are consumed in order:
// each one is fed to the shard's SHA-256 and then scattered to its targets (copied into core.bin
// or an expert layer file, or converted row by row), and its buffer goes back to the pool. A
// worker only takes a new segment when a buffer is free, so memory is the pool (connections + 2
// segments) plus per-thread conversion scratch, whatever the model size. Deadlock is impossible:
// the lowest unconsumed segment of every shard is always in flight or ready.
//
// Expert blobs: their gate/up/down parts come from different tensors (often far apart, or in
// different shards), so parts are written in place in the layer file and the blob's XXH3 is
// taken by reading it back (from the page cache) when its last part lands.
//
// Checkpoints: after consuming a segment the shard records (position, SHA-256 state) at the last
// point where every earlier byte is on its way to disk (for a converting span, the last whole
// row). A flusher thread periodically fsyncs the target files and then journals those
// checkpoints, finished shards and expert checksums, so the journal never claims bytes that are
// not durable. When a shard's last byte is consumed its SHA-256 is compared with the LFS oid; on
// a mismatch the shard is fetched once more (its targets are rewritten) and, if it fails again,
// the error names the shard and the byte ranges that differed between the two fetches.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/file.h"
#include "install/hub_http.h"
#include "install/installer_layout.h"
#include "install/journal.h"

namespace rw {

struct StreamOptions {
  int connections = 4;
  uint64_t segment_bytes = 16u << 20;
  int hash_attempts = 2;  // fetches of a shard before a SHA-256 mismatch is fatal
  double checkpoint_interval_s = 2.0;
  const std::atomic<bool>* cancel = nullptr;  // user interrupt
  HttpOptions http;
};

// Where a shard stood when the journal was last written.
struct ShardResume {
  uint64_t pos = 0;       // bytes consumed (hashed and written)
  std::string sha_state;  // ResumableSha256::Save() at pos ("" at 0)
  bool done = false;      // consumed and its SHA-256 verified
};

// Progress: source bytes of all shards consumed or received so far (it moves as bytes arrive),
// out of their total.
using StreamProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// pwrite of all n bytes at offset. A full disk (ENOSPC, EDQUOT) is kResourceExhausted with a
// message that says so (the installer adds how to resume); other failures are kIo naming the
// file.
Status WriteAllAt(const File& f, const void* p, uint64_t n, uint64_t offset);

// Expert units fed by bytes of shard `shard` (for invalidating checksums on a refetch).
std::vector<int> UnitsOfShard(const InstallLayout& layout, size_t shard);

// Runs the pipeline over every shard not yet done. `files` are the open target files (indexed
// as InstallLayout target files), `urls` the resolve URL of each shard. unit_xxh3 holds the
// expert checksums restored from the journal and receives the rest. On error or cancel, the
// journal still holds every durable checkpoint, so the run can be resumed.
Status StreamShards(const InstallLayout& layout, const std::vector<std::string>& urls,
                    std::vector<File>* files, Journal* journal,
                    const std::vector<ShardResume>& resume,
                    std::vector<std::optional<uint64_t>>* unit_xxh3, const StreamOptions& opt,
                    HttpStats* stats, const StreamProgressFn& progress);

}  // namespace rw
