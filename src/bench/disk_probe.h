// How fast the disk under a model directory delivers expert blobs: the yardstick for "decode is
// within 1.3x of the storage bound" (bytes read from storage per token ÷ the disk's parallel
// read bandwidth, measured in the same run, since the disk's speed drifts from hour to hour).
//
// The probe reads whole, randomly chosen expert blobs with O_DIRECT (the page cache is neither
// used nor disturbed, so a warm run stays warm) at two depths: one read at a time (what a layer
// waiting on a single missing expert sees) and `depth` reads in flight (the parallel bandwidth).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace rw {

struct DiskProbeOptions {
  int depth = 8;          // reads in flight for the parallel figure
  int serial_reads = 16;  // blobs read one at a time
  int parallel_reads = 64;
  uint64_t seed = 1;
};

struct DiskProbeResult {
  std::string method;  // "O_DIRECT pread of random expert blobs"
  uint64_t blob_bytes = 0;
  int depth = 0;
  double serial_gb_s = 0;  // one read in flight
  double serial_ms_per_blob = 0;
  double parallel_gb_s = 0;  // `depth` reads in flight
};

// Probes the expert files of the model at model_dir. Errors: no experts, a file that cannot be
// opened with O_DIRECT (e.g. tmpfs), a failed read.
Result<DiskProbeResult> ProbeExpertDisk(const std::string& model_dir, const DiskProbeOptions& o);

}  // namespace rw
