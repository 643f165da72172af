#include "bench/disk_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/timer.h"
#include "format/model_dir.h"

namespace rw {
namespace {

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

struct Target {
  int fd = -1;
  uint64_t offset = 0;
};

// Reads every target (one blob each) with `depth` threads; returns the wall time.
Result<double> ReadAll(const std::vector<Target>& targets, uint64_t blob, int depth,
                       const std::string& dir) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    void* raw = nullptr;
    if (posix_memalign(&raw, 4096, blob) != 0) {
      std::lock_guard<std::mutex> lock(mu);
      first = Error(ErrorCode::kIo, "disk probe: out of memory for a {}-byte buffer", blob);
      return;
    }
    std::unique_ptr<uint8_t, AlignedFree> buf(static_cast<uint8_t*>(raw));
    for (size_t i; (i = next.fetch_add(1)) < targets.size();) {
      uint64_t done = 0;
      while (done < blob) {
        const ssize_t r = pread(targets[i].fd, buf.get() + done, blob - done,
                                static_cast<off_t>(targets[i].offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok())
            first = Error(ErrorCode::kIo, "disk probe: read in {}/experts failed: {}", dir,
                          r < 0 ? std::strerror(errno) : "unexpected end of file");
          return;
        }
        done += static_cast<uint64_t>(r);
      }
    }
  };
  Stopwatch sw;
  std::vector<std::thread> threads;
  for (int t = 0; t < depth; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  const double s = sw.Seconds();
  if (!first.ok()) return first;
  return s;
}

}  // namespace

Result<DiskProbeResult> ProbeExpertDisk(const std::string& model_dir, const DiskProbeOptions& o) {
  if (o.depth < 1 || o.serial_reads < 1 || o.parallel_reads < 1)
    return Error(ErrorCode::kInvalidArgument, "disk probe: depth and read counts must be >= 1");
  RW_ASSIGN_OR_RETURN(ModelDir dir, ModelDir::Open(model_dir));
  const ExpertIndex* idx = dir.experts();
  if (idx == nullptr || idx->layers.empty())
    return Error(ErrorCode::kNotFound, "{}: no expert files to probe", model_dir);
  const uint64_t blob = idx->layers[0].layout.stride;
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) close(fd);
  };
  for (const ExpertLayerInfo& L : idx->layers) {
    const std::string path = dir.FilePath(L.file);
    const int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      close_all();
      return Error(ErrorCode::kUnsupported, "disk probe: cannot open {} with O_DIRECT: {}", path,
                   std::strerror(err));
    }
    fds.push_back(fd);
  }
  // Distinct random blobs, so no read is served by the drive's own cache of an earlier one.
  std::mt19937_64 rng(o.seed);
  const uint64_t total = fds.size() * static_cast<uint64_t>(idx->num_experts);
  std::vector<uint64_t> order(total);
  for (uint64_t i = 0; i < total; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  auto pick = [&](size_t first, size_t n) {
    std::vector<Target> t;
    for (size_t i = first; i < first + n && i < order.size(); ++i)
      t.push_back({fds[order[i] / idx->num_experts], (order[i] % idx->num_experts) * blob});
    return t;
  };
  const std::vector<Target> serial = pick(0, static_cast<size_t>(o.serial_reads));
  const std::vector<Target> parallel = pick(serial.size(), static_cast<size_t>(o.parallel_reads));
  DiskProbeResult r;
  r.method = "O_DIRECT pread of distinct random expert blobs";
  r.blob_bytes = blob;
  r.depth = o.depth;
  Result<double> ts = ReadAll(serial, blob, 1, model_dir);
  Result<double> tp = ts.ok() ? ReadAll(parallel, blob, o.depth, model_dir) : Result<double>(0.0);
  close_all();
  RW_RETURN_IF_ERROR(ts.status());
  RW_RETURN_IF_ERROR(tp.status());
  r.serial_gb_s = static_cast<double>(serial.size() * blob) / *ts / 1e9;
  r.serial_ms_per_blob = *ts * 1e3 / static_cast<double>(serial.size());
  if (!parallel.empty()) r.parallel_gb_s = static_cast<double>(parallel.size() * blob) / *tp / 1e9;
  return r;
}

}  // namespace rw
