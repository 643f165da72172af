// `redwing install`: a Gemma 4 checkpoint on the Hugging Face Hub (or a mirror: HF_ENDPOINT)
// becomes a verified redwing model directory, streamed by HTTP range requests straight into the
// staged model files: no copy of the checkpoint on disk, memory bounded by a fixed buffer pool,
// resumable after any interruption.
//
// Steps: resolve the revision to a commit (model-info API); list the files (tree API, LFS
// SHA-256s); fetch config.json, the safetensors index and each shard's header by range; plan the
// conversion (convert_plan.h) and the byte layout (installer_layout.h); fetch the side files;
// stream every shard (installer_stream.h), checking each against its LFS SHA-256; write the core
// directory and the expert index; publish through ModelDirWriter (manifest last, atomic rename);
// verify the result (VerifyModelDir).
//
// Staging: "<out>.installing/" holds the target files being filled in place and
// install.journal (journal.h). At the end the files are hard-linked (no copy) into the
// ModelDirWriter's "<out>.partial", committed, and the staging directory is removed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/status.h"

namespace rw {

inline constexpr const char* kDefaultInstallRepo = "mlx-community/gemma-4-26b-a4b-it-4bit";
inline constexpr const char* kDefaultInstallRevision = "0d77464eeb233a2da68ebf9d7dc4edaac7db956d";
inline constexpr const char* kInstallStagingSuffix = ".installing";
inline constexpr const char* kJournalName = "install.journal";

struct InstallOptions {
  std::string repo_id = kDefaultInstallRepo;
  std::string revision;  // "" -> the pinned commit for the default repo, "main" otherwise
  std::string out_dir;
  std::string quantize = "keep";  // keep | q4 | q8 | bf16 (q4/q8/bf16 need a float checkpoint)
  bool resume = false;            // continue "<out>.installing"
  bool discard_partial = false;   // remove "<out>.installing" and start over
  bool overwrite = false;         // replace an existing out_dir (only once the new one is done)
  std::string endpoint;           // "" -> HF_ENDPOINT or https://huggingface.co
  std::string token;              // "" -> HF_TOKEN
  int connections = 4;
  uint64_t segment_bytes = 16u << 20;
  int stall_timeout_s = 30;
  int max_attempts = 8;
  double backoff_initial_s = 0.5;
  int hash_attempts = 2;
  double checkpoint_interval_s = 2.0;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by SIGINT) to stop cleanly
  std::optional<uint64_t> assume_free_bytes;  // tests: free disk space instead of statvfs's
};

struct InstallReport {
  std::string commit;
  uint64_t shard_bytes = 0;    // all source shards
  uint64_t needed_bytes = 0;   // of which the model uses
  uint64_t fetched_bytes = 0;  // body bytes received this run (retries included)
  uint64_t output_bytes = 0;
  uint64_t retries = 0;
  bool resumed = false;
  double seconds = 0;
};

struct InstallCallbacks {
  std::function<void(const std::string& line)> log;
  // Bytes of side files and shards consumed so far (this run and earlier ones) of the total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// The check made before anything is written: kResourceExhausted naming the bytes needed and
// the bytes available when available < needed.
Status CheckFreeSpace(const std::string& out, uint64_t needed, uint64_t available);

Result<InstallReport> InstallFromHub(const InstallOptions& opts, const InstallCallbacks& cb = {});

}  // namespace rw
