#include "install/drafter_install.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "base/file.h"
#include "base/hash.h"
#include "base/timer.h"
#include "draft/dflash_config.h"
#include "draft/dflash_model.h"
#include "install/drafter_convert.h"
#include "install/hub_api.h"
#include "install/hub_http.h"
#include "install/safetensors.h"

namespace rw {

bool IsDrafterConfig(const Json& c) {
  if (!c.is_object()) return false;
  if (c.contains("dflash_config")) return true;
  auto a = c.find("architectures");
  return a != c.end() && a->is_array() && !a->empty() && (*a)[0] == "DFlashDraftModel";
}

bool LooksLikeDrafterRepo(const std::string& repo_id) {
  std::string s = repo_id;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s.find("dflash") != std::string::npos;
}

namespace {

// Fetches f into path, continuing from the bytes already there, then checks its SHA-256 (LFS)
// over the whole file. A file that fails the check is removed.
Status FetchFile(HttpConnection& conn, const HubApi& api, const std::string& commit,
                 const HubFile& f, const std::string& path, uint64_t segment,
                 const InstallCallbacks& cb, uint64_t* fetched, uint64_t* done, uint64_t total) {
  uint64_t have = 0;
  if (PathExists(path)) {
    RW_ASSIGN_OR_RETURN(File existing, File::OpenRead(path));
    RW_ASSIGN_OR_RETURN(have, existing.Size());
    if (have > f.size) have = 0;  // not this file: start over
  }
  RW_ASSIGN_OR_RETURN(File out, have > 0 ? File::OpenReadWrite(path) : File::Create(path));
  RW_RETURN_IF_ERROR(out.Truncate(have));
  if (cb.log && have > 0)
    cb.log(fmt::format("{}: resuming at {} of {} bytes", f.path, have, f.size));
  *done += have;
  std::vector<uint8_t> buf(
      static_cast<size_t>(std::min<uint64_t>(segment, std::max<uint64_t>(f.size, 1))));
  const std::string url = api.FileUrl(commit, f.path);
  for (uint64_t off = have; off < f.size;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), f.size - off);
    RW_RETURN_IF_ERROR(conn.FetchRange(url, off, n, f.size, buf.data(), f.path));
    RW_RETURN_IF_ERROR(out.PwriteAll(buf.data(), static_cast<size_t>(n), off));
    off += n;
    *fetched += n;
    *done += n;
    if (cb.progress) cb.progress(*done, total);
  }
  RW_RETURN_IF_ERROR(out.Sync());
  RW_RETURN_IF_ERROR(out.Close());
  std::string got;
  if (f.lfs()) {
    RW_ASSIGN_OR_RETURN(got, Sha256File(path));
    if (got != f.sha256) {
      (void)RemoveAll(path);
      return Error(ErrorCode::kCorrupt,
                   "{}: SHA-256 {} does not match the Hub's {}; the staged file was removed "
                   "(run again with --resume to fetch it anew)",
                   f.path, got, f.sha256);
    }
  } else if (f.has_git_oid()) {
    RW_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
    if (Status st = CheckHubFileContent(f, bytes); !st.ok()) {
      (void)RemoveAll(path);
      return st;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<InstallReport> InstallDrafterFromHub(const DrafterInstallOptions& o,
                                            const InstallCallbacks& cb) {
  Stopwatch sw;
  RW_RETURN_IF_ERROR(CheckRepoId(o.repo_id));
  if (o.out_dir.empty()) return Error(ErrorCode::kInvalidArgument, "no output directory");
  if (o.quantize != "q4" && o.quantize != "q8" && o.quantize != "keep")
    return Error(ErrorCode::kInvalidArgument,
                 "a drafter is quantized q4, q8 or keep (bf16), not '{}'", o.quantize);
  if (PathExists(o.out_dir) && !o.overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} exists (pass --force to replace it)", o.out_dir);
  const std::string staging = o.out_dir + kInstallStagingSuffix;
  if (o.discard_partial) RW_RETURN_IF_ERROR(RemoveAll(staging));
  InstallReport report;
  if (PathExists(staging)) {
    if (!o.resume)
      return Error(ErrorCode::kAlreadyExists,
                   "{} holds an interrupted install: pass --resume to continue it or "
                   "--discard-partial to start over",
                   staging);
    report.resumed = true;
  }

  HttpOptions ho;
  ho.token = o.token.empty() ? HubTokenFromEnv() : o.token;
  ho.max_attempts = o.max_attempts;
  ho.backoff_initial_s = o.backoff_initial_s;
  ho.stall_timeout_s = o.stall_timeout_s;
  ho.cancel = o.cancel;
  HttpStats stats;
  HttpConnection conn(ho, &stats);
  const std::string endpoint = o.endpoint.empty() ? HubEndpointFromEnv() : o.endpoint;
  HubApi api(endpoint, o.repo_id, &conn);
  const std::string rev = o.revision.empty() ? "main" : o.revision;
  RW_ASSIGN_OR_RETURN(report.commit,
                      IsCommitHash(rev) ? Result<std::string>(rev) : api.ResolveCommit(rev));
  if (cb.log)
    cb.log(fmt::format("{} at {} ({})", o.repo_id, report.commit, EndpointForDisplay(endpoint)));
  RW_ASSIGN_OR_RETURN(std::vector<HubFile> files, api.ListFiles(report.commit));
  auto find = [&](const std::string& p) -> const HubFile* {
    for (const HubFile& f : files)
      if (f.path == p) return &f;
    return nullptr;
  };
  const HubFile* config = find("config.json");
  if (config == nullptr)
    return Error(ErrorCode::kNotFound, "{} has no config.json at {}", o.repo_id, report.commit);
  RW_ASSIGN_OR_RETURN(std::string config_text, api.FetchSmallFile(report.commit, *config, 4 << 20));
  RW_ASSIGN_OR_RETURN(Json cj, ParseJson(config_text, o.repo_id + "/config.json"));
  if (!IsDrafterConfig(cj))
    return Error(ErrorCode::kUnsupported,
                 "{} is not a DFlash drafter (its config.json has no "
                 "DFlashDraftModel architecture)",
                 o.repo_id);
  RW_ASSIGN_OR_RETURN(DFlashConfig dc, DFlashConfig::FromHf(cj));

  // The weights: model.safetensors, or an index and its shards.
  std::vector<const HubFile*> weights;
  std::string index_text;
  if (const HubFile* single = find("model.safetensors")) {
    weights.push_back(single);
  } else if (const HubFile* index = find("model.safetensors.index.json")) {
    RW_ASSIGN_OR_RETURN(index_text, api.FetchSmallFile(report.commit, *index, 16 << 20));
    RW_ASSIGN_OR_RETURN(auto map, ParseSafetensorsIndex(index_text, index->path));
    std::vector<std::string> shards;
    for (const auto& [tensor, shard] : map) shards.push_back(shard);
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    for (const std::string& s : shards) {
      const HubFile* f = find(s);
      if (f == nullptr)
        return Error(ErrorCode::kNotFound, "{}: shard {} of the index is not in the repository",
                     o.repo_id, s);
      weights.push_back(f);
    }
  } else {
    return Error(ErrorCode::kNotFound, "{} has no model.safetensors (or index) at {}", o.repo_id,
                 report.commit);
  }
  uint64_t total = 0;
  for (const HubFile* f : weights) total += f->size;
  report.shard_bytes = report.needed_bytes = total;
  if (!report.resumed) {
    RW_ASSIGN_OR_RETURN(uint64_t free_bytes,
                        FreeDiskBytes(ParentPath(o.out_dir).empty() ? "." : ParentPath(o.out_dir)));
    // The checkpoint staged, then the drafter written beside it (at most its size again).
    RW_RETURN_IF_ERROR(CheckFreeSpace(o.out_dir, 2 * total, free_bytes));
  }
  RW_RETURN_IF_ERROR(MakeDirectories(staging));
  RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, "config.json"), config_text));
  if (!index_text.empty())
    RW_RETURN_IF_ERROR(
        WriteFileAtomic(JoinPath(staging, "model.safetensors.index.json"), index_text));
  uint64_t done = 0;
  for (const HubFile* f : weights) {
    if (f->path.find('/') != std::string::npos)
      return Error(ErrorCode::kCorrupt, "{}: weight file {} is not a plain file name", o.repo_id,
                   f->path);
    RW_RETURN_IF_ERROR(FetchFile(conn, api, report.commit, *f, JoinPath(staging, f->path),
                                 o.segment_bytes, cb, &report.fetched_bytes, &done, total));
  }
  report.retries = stats.retries.load();

  DrafterConvertOptions co;
  co.source_dir = staging;
  co.out_dir = o.out_dir;
  co.quantize = o.quantize;
  co.overwrite = o.overwrite;
  co.source = {{"kind", "hub"},
               {"repo_id", o.repo_id},
               {"revision", report.commit},
               {"endpoint", EndpointForDisplay(endpoint)},
               {"quantize", o.quantize}};
  if (rev != report.commit) co.source["requested_revision"] = rev;
  if (cb.log)
    cb.log(fmt::format("converting ({} parameters, quantize {})", dc.Parameters(), o.quantize));
  RW_RETURN_IF_ERROR(ConvertDrafter(co));
  RW_RETURN_IF_ERROR(RemoveAll(staging));
  // The result opens as a drafter (config, every tensor's shape).
  RW_ASSIGN_OR_RETURN(std::unique_ptr<DFlashModel> check, DFlashModel::Open(o.out_dir));
  report.output_bytes = check->weight_bytes();
  report.seconds = sw.Seconds();
  return report;
}

}  // namespace rw
