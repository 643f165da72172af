// `redwing install` of a DFlash drafter repository (z-lab/gemma-4-26B-A4B-it-DFlash and the
// like): the checkpoint's files are fetched from the Hub (or HF_ENDPOINT) by range requests into
// "<out>.installing/", each safetensors file checked against its LFS SHA-256, then converted into
// a drafter directory (ConvertDrafter: quantized q4 by default, staged and renamed into place)
// and the staging directory removed. An interrupted install continues with --resume from the
// bytes already staged (they are re-hashed with the rest, so a damaged prefix is caught and its
// file fetched again on the next run).
#pragma once

#include <atomic>
#include <string>

#include "base/json.h"
#include "base/status.h"
#include "install/installer.h"

namespace rw {

// Whether a config.json is a DFlash drafter's (architectures ["DFlashDraftModel"] or a
// dflash_config block).
bool IsDrafterConfig(const Json& config);
// Whether a repository id names a DFlash drafter (by convention its name ends in "DFlash").
bool LooksLikeDrafterRepo(const std::string& repo_id);

struct DrafterInstallOptions {
  std::string repo_id;
  std::string revision;  // "" -> main
  std::string out_dir;   // e.g. <model>/drafter
  std::string quantize = "q4";
  bool resume = false;           // continue "<out>.installing"
  bool discard_partial = false;  // remove "<out>.installing" and start over
  bool overwrite = false;
  std::string endpoint, token;  // "" -> HF_ENDPOINT / HF_TOKEN
  uint64_t segment_bytes = 16u << 20;
  int stall_timeout_s = 30;
  int max_attempts = 8;
  double backoff_initial_s = 0.5;
  const std::atomic<bool>* cancel = nullptr;
};

Result<InstallReport> InstallDrafterFromHub(const DrafterInstallOptions& o,
                                            const InstallCallbacks& cb = {});

}  // namespace rw
