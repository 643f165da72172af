#include "install/installer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "base/file.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/timer.h"
#include "format/model_dir.h"
#include "install/convert_plan.h"
#include "install/hub_api.h"
#include "install/install_lock.h"
#include "install/installer_layout.h"
#include "install/installer_stream.h"
#include "install/journal.h"
#include "install/safetensors.h"

namespace rw {
namespace {

constexpr const char* kCreatedBy = "redwing 0.1.0 install";
constexpr uint64_t kMaxConfigBytes = 16u << 20;
constexpr uint64_t kMaxIndexBytes = 64u << 20;
constexpr int kJournalVersion = 1;
// Beyond the model's files: the journal, the expert index and the manifest.
constexpr uint64_t kDiskSlackBytes = 1u << 20;

std::string AbsoluteNormal(const std::string& p) {
  std::error_code ec;
  std::filesystem::path a = std::filesystem::absolute(p, ec);
  if (ec) return p;
  std::string s = a.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Everything known about the source before any tensor byte is fetched.
struct Source {
  std::string commit;
  std::vector<HubFile> files;
  std::vector<SourceShard> shards;
  Json config;
};

const HubFile* FindFile(const std::vector<HubFile>& files, const std::string& path) {
  for (const HubFile& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

// The 8-byte length prefix and the JSON header of a shard, by range.
Status FetchHeader(HttpConnection& conn, const std::string& url, const HubFile& f, SourceShard* s) {
  uint8_t prefix[8];
  RW_RETURN_IF_ERROR(conn.FetchRange(url, 0, 8, f.size, prefix, f.path));
  RW_ASSIGN_OR_RETURN(uint64_t n, SafetensorsFile::ParseHeaderLength(prefix, f.size, f.path));
  std::string header(n, '\0');
  RW_RETURN_IF_ERROR(
      conn.FetchRange(url, 8, n, f.size, reinterpret_cast<uint8_t*>(header.data()), f.path));
  RW_ASSIGN_OR_RETURN(s->tensors, SafetensorsFile::ParseHeader(header, 8 + n, f.size, f.path));
  s->header = std::string(reinterpret_cast<const char*>(prefix), 8) + header;
  return Status::Ok();
}

Result<Source> ReadSource(HubApi& api, HttpConnection& conn, const std::string& repo,
                          const std::string& revision, const InstallCallbacks& cb) {
  Source src;
  RW_ASSIGN_OR_RETURN(src.commit, api.ResolveCommit(revision));
  if (cb.log && src.commit != revision)
    cb.log(fmt::format("{}: revision {} is commit {}", repo, revision, src.commit));
  RW_ASSIGN_OR_RETURN(src.files, api.ListFiles(src.commit));
  const std::string where = fmt::format("{}@{}", repo, src.commit.substr(0, 12));
  const HubFile* config_file = FindFile(src.files, "config.json");
  if (!config_file)
    return Error(ErrorCode::kNotFound, "{}: no config.json: not a model checkpoint", where);
  RW_ASSIGN_OR_RETURN(std::string config_text,
                      api.FetchSmallFile(src.commit, *config_file, kMaxConfigBytes, cb.log));
  RW_ASSIGN_OR_RETURN(src.config, ParseJson(config_text, where + "/config.json"));
  if (!src.config.is_object())
    return Error(ErrorCode::kCorrupt, "{}/config.json: not a JSON object", where);

  std::vector<std::string> shard_names;
  if (const HubFile* index_file = FindFile(src.files, "model.safetensors.index.json")) {
    RW_ASSIGN_OR_RETURN(std::string index,
                        api.FetchSmallFile(src.commit, *index_file, kMaxIndexBytes, cb.log));
    RW_ASSIGN_OR_RETURN(auto map,
                        ParseSafetensorsIndex(index, where + "/model.safetensors.index.json"));
    std::set<std::string> unique;
    for (const auto& [tensor, file] : map) unique.insert(file);
    shard_names.assign(unique.begin(), unique.end());
  } else if (FindFile(src.files, "model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    return Error(ErrorCode::kNotFound,
                 "{}: neither model.safetensors.index.json nor model.safetensors", where);
  }
  for (const std::string& name : shard_names) {
    const HubFile* f = FindFile(src.files, name);
    if (f == nullptr)
      return Error(ErrorCode::kNotFound,
                   "{}: shard {} listed in the index is not in the repository", where, name);
    if (f->sha256.empty())
      return Error(ErrorCode::kCorrupt,
                   "{}: shard {} is not an LFS file, so there is no SHA-256 to verify it against",
                   where, name);
    SourceShard s{name, f->size, f->sha256, {}, {}};
    const std::string url = api.FileUrl(src.commit, name);
    if (f->size < 8) return Error(ErrorCode::kCorrupt, "{}: {} is {} bytes", where, name, f->size);
    // The header is not covered by any checksum until the shard is streamed (which then checks
    // it), so one that does not parse is fetched once more before it counts as corrupt.
    Status st;
    for (int attempt = 1; attempt <= 2; ++attempt) {
      st = FetchHeader(conn, url, *f, &s);
      if (st.ok() || st.code() != ErrorCode::kCorrupt) break;
      if (cb.log && attempt == 1)
        cb.log(fmt::format("{}; fetching the header again", st.message()));
    }
    RW_RETURN_IF_ERROR(st);
    src.shards.push_back(std::move(s));
  }
  return src;
}

std::vector<SourceTensorInfo> TensorList(const std::vector<SourceShard>& shards) {
  std::vector<SourceTensorInfo> out;
  for (const SourceShard& s : shards)
    for (const StTensor& t : s.tensors)
      out.push_back(SourceTensorInfo{t.name, t.dtype, t.shape, s.file});
  return out;
}

Json BeginRecord(const std::string& repo, const Source& src, const std::string& quantize) {
  Json shards = Json::array();
  for (const SourceShard& s : src.shards)
    shards.push_back(Json{{"file", s.file},
                          {"size", s.size},
                          {"sha256", s.sha256},
                          {"header_xxh3", Hex64(Xxh3_64(s.header.data(), s.header.size()))}});
  return Json{{"t", "begin"},         {"version", kJournalVersion}, {"repo_id", repo},
              {"commit", src.commit}, {"quantize", quantize},       {"shards", shards}};
}

// What the journal says is done.
struct Replayed {
  bool has_begin = false;
  std::vector<ShardResume> shards;
  std::vector<std::optional<uint64_t>> unit_xxh3;
  std::map<std::string, std::string> side_done;  // path -> sha256 / size text
};

Result<Replayed> Replay(const std::vector<Json>& records, const Json& begin,
                        const InstallLayout& layout, const std::string& staging) {
  Replayed r;
  r.shards.resize(layout.shards.size());
  r.unit_xxh3.resize(layout.unit_source_bytes.size());
  std::map<std::string, size_t> index;
  for (size_t s = 0; s < layout.shards.size(); ++s) index[layout.shards[s].file] = s;
  auto bad = [&](const Json& rec) {
    return Error(ErrorCode::kCorrupt, "{}/{}: unexpected record {}", staging, kJournalName,
                 rec.dump());
  };
  for (const Json& rec : records) {
    const std::string t = rec.value("t", "");
    if (t == "begin") {
      for (const char* key : {"version", "repo_id", "commit", "quantize", "shards"}) {
        if (rec.value(key, Json()) != begin[key])
          return Error(ErrorCode::kInvalidArgument,
                       "{} holds a partial install of a different source or settings ({}: {} "
                       "there, {} now); pass --discard-partial to start over",
                       staging, key, rec.value(key, Json()).dump(), begin[key].dump());
      }
      r.has_begin = true;
      continue;
    }
    if (!r.has_begin) return bad(rec);
    if (t == "side") {
      r.side_done[rec.value("path", "")] = rec.value("sha256", "");
    } else if (t == "shard" || t == "shard_done") {
      auto it = index.find(rec.value("file", ""));
      if (it == index.end()) return bad(rec);
      ShardResume& sr = r.shards[it->second];
      if (t == "shard_done") {
        sr.done = true;
        continue;
      }
      if (!rec.contains("pos") || !rec["pos"].is_number_unsigned()) return bad(rec);
      sr.pos = rec["pos"].get<uint64_t>();
      sr.sha_state = rec.value("sha", "");
      if (rec.value("reset", false))
        for (int u : UnitsOfShard(layout, it->second)) r.unit_xxh3[u].reset();
    } else if (t == "expert") {
      int64_t u = rec.value("unit", int64_t{-1});
      if (u < 0 || static_cast<size_t>(u) >= r.unit_xxh3.size()) return bad(rec);
      RW_ASSIGN_OR_RETURN(uint64_t x, ParseHex64(rec.value("xxh3", "")));
      r.unit_xxh3[u] = x;
    } else {
      return bad(rec);
    }
  }
  return r;
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// One try at a side file (tokenizer.json, ...), whole, by ranges through one buffer, checked
// against its LFS SHA-256 or, outside LFS, its git blob SHA-1 (CheckHubFileContent's rules).
Status FetchSideFileOnce(HttpConnection& conn, const std::string& url, const HubFile& f,
                         const std::string& path, uint64_t chunk, std::string* sha_out,
                         const std::function<void(uint64_t)>& advance) {
  RW_ASSIGN_OR_RETURN(File out, File::Create(path));
  Sha256 sha;
  GitBlobSha1 git(f.size);
  std::vector<uint8_t> buf(std::min<uint64_t>(std::max<uint64_t>(f.size, 1), chunk));
  for (uint64_t off = 0; off < f.size; off += buf.size()) {
    uint64_t n = std::min<uint64_t>(buf.size(), f.size - off);
    // Progress as the bytes arrive: a side file may be one range of tens of MB.
    RW_RETURN_IF_ERROR(conn.FetchRange(url, off, n, f.size, buf.data(), f.path, advance));
    sha.Update(buf.data(), n);
    git.Update(buf.data(), n);
    RW_RETURN_IF_ERROR(WriteAllAt(out, buf.data(), n, off));
  }
  *sha_out = sha.FinishHex();
  const std::string range = f.size ? fmt::format("bytes 0-{}", f.size - 1) : "its 0 bytes";
  if (f.lfs() && *sha_out != f.sha256)
    return Error(ErrorCode::kCorrupt, "{}: SHA-256 mismatch over {} (expected {}, got {})", f.path,
                 range, f.sha256, *sha_out);
  if (f.has_git_oid()) {
    const std::string got = git.FinishHex();
    if (got != f.git_oid)
      return Error(ErrorCode::kCorrupt, "{}: git blob SHA-1 mismatch over {} (expected {}, got {})",
                   f.path, range, f.git_oid, got);
  }
  RW_RETURN_IF_ERROR(out.Sync());
  return out.Close();
}

// A side file; one that fails its check is fetched once more before the error stands.
Status FetchSideFile(HttpConnection& conn, const std::string& url, const HubFile& f,
                     const std::string& path, uint64_t chunk, std::string* sha_out,
                     const std::function<void(uint64_t)>& advance,
                     const std::function<void(const std::string&)>& log) {
  Status st;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    uint64_t counted = 0;
    st = FetchSideFileOnce(conn, url, f, path, chunk, sha_out, [&](uint64_t n) {
      counted += n;
      advance(n);
    });
    if (st.ok() || st.code() != ErrorCode::kCorrupt) return st;
    advance(0 - counted);  // progress: the bytes will come again
    if (attempt == 1) log(st.message() + "; fetching it again");
  }
  return st;
}

// Puts a finished staged file into the writer's directory without copying it.
Status LinkInto(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) == 0) return Status::Ok();
  if (::rename(from.c_str(), to.c_str()) == 0) return Status::Ok();
  return Error(ErrorCode::kIo, "cannot move {} to {}: {}", from, to, std::strerror(errno));
}

}  // namespace

Status CheckFreeSpace(const std::string& out, uint64_t needed, uint64_t available) {
  if (available >= needed) return Status::Ok();
  return Error(ErrorCode::kResourceExhausted,
               "{}: not enough disk space: the install needs {} bytes ({:.2f} GB) more, but only "
               "{} bytes ({:.2f} GB) are available there; free {} bytes and run again",
               out, needed, needed / 1e9, available, available / 1e9, needed - available);
}

Result<InstallReport> InstallFromHub(const InstallOptions& opts, const InstallCallbacks& cb) {
  auto log = [&](const std::string& line) {
    if (cb.log) cb.log(line);
  };
  Stopwatch timer;
  InstallReport report;
  RW_RETURN_IF_ERROR(CheckRepoId(opts.repo_id));
  RW_ASSIGN_OR_RETURN(QuantizeMode mode, ParseQuantizeMode(opts.quantize));
  if (opts.out_dir.empty())
    return Error(ErrorCode::kInvalidArgument, "install needs an output directory (--output)");
  if (opts.resume && opts.discard_partial)
    return Error(ErrorCode::kInvalidArgument, "--resume and --discard-partial exclude each other");
  if (opts.connections < 1 || opts.connections > 64)
    return Error(ErrorCode::kInvalidArgument, "--connections {}: expected 1 to 64",
                 opts.connections);
  if (opts.segment_bytes < 4096 || opts.segment_bytes > (1ull << 30))
    return Error(ErrorCode::kInvalidArgument, "segment size {} out of range", opts.segment_bytes);
  const std::string revision = !opts.revision.empty()                ? opts.revision
                               : opts.repo_id == kDefaultInstallRepo ? kDefaultInstallRevision
                                                                     : "main";
  const std::string out = AbsoluteNormal(opts.out_dir);
  const std::string staging = out + kInstallStagingSuffix;
  const std::string journal_path = JoinPath(staging, kJournalName);
  // Before anything looks at the staging directory: one install per output at a time, so that a
  // second one neither shares the journal nor discards the first one's files.
  RW_RETURN_IF_ERROR(MakeDirectories(ParentPath(out)));
  RW_ASSIGN_OR_RETURN(InstallLock lock, InstallLock::Acquire(out + kInstallLockSuffix, out));

  if (PathExists(JoinPath(out, kManifestName)) && PathExists(staging) && opts.resume) {
    // Published, but the staging directory outlived a crash right after: nothing left to do.
    RW_RETURN_IF_ERROR(RemoveAll(staging));
    log(fmt::format("{} is already installed", out));
    return report;
  }
  if (PathExists(out) && !opts.overwrite)
    return Error(ErrorCode::kAlreadyExists, "{} already exists; remove it or pass --force", out);
  if (PathExists(staging)) {
    if (opts.discard_partial) {
      log(fmt::format("removing the partial install {}", staging));
      RW_RETURN_IF_ERROR(RemoveAll(staging));
    } else if (!opts.resume) {
      return Error(ErrorCode::kAlreadyExists,
                   "{} holds an interrupted install; pass --resume to continue it or "
                   "--discard-partial to start over",
                   staging);
    }
  }

  HttpStats stats;
  HttpOptions hopt;
  hopt.token = opts.token.empty() ? HubTokenFromEnv() : opts.token;
  hopt.max_attempts = opts.max_attempts;
  hopt.backoff_initial_s = opts.backoff_initial_s;
  hopt.stall_timeout_s = opts.stall_timeout_s;
  hopt.cancel = opts.cancel;
  const std::string endpoint = opts.endpoint.empty() ? HubEndpointFromEnv() : opts.endpoint;
  HttpConnection conn(hopt, &stats);
  HubApi api(endpoint, opts.repo_id, &conn);
  log(fmt::format("{}: reading the repository at {} ({})", opts.repo_id, revision,
                  EndpointForDisplay(endpoint)));
  auto src_or = ReadSource(api, conn, opts.repo_id, revision, cb);
  if (!src_or.ok() && src_or.status().code() == ErrorCode::kCancelled)
    return Error(ErrorCode::kCancelled, "interrupted before anything was written");
  RW_ASSIGN_OR_RETURN(Source src, std::move(src_or));
  report.commit = src.commit;
  const std::string where = fmt::format("{}@{}", opts.repo_id, src.commit.substr(0, 12));
  RW_ASSIGN_OR_RETURN(ConvertPlan plan,
                      PlanConversion(src.config, TensorList(src.shards), mode, where));
  RW_ASSIGN_OR_RETURN(InstallLayout layout, BuildInstallLayout(std::move(plan), src.shards));
  for (const ShardLayout& s : layout.shards) {
    report.shard_bytes += s.size;
    report.needed_bytes += s.needed_bytes;
  }
  report.output_bytes = layout.total_output_bytes();
  log(
      fmt::format("source: {} checkpoint, {}, {} shard(s), {:.2f} GB ({:.2f} GB used by the model; "
                  "the rest is fetched only to verify each shard's SHA-256)",
                  SourceKindName(layout.plan.kind), layout.plan.source_dtype, layout.shards.size(),
                  report.shard_bytes / 1e9, report.needed_bytes / 1e9));
  for (const std::string& n : layout.plan.notes) log("note: " + n);
  for (const Json& s : layout.plan.skipped)
    log(fmt::format("skipping {} tensor(s) under {}: {}", s["tensors"].get<int>(),
                    s["prefix"].get<std::string>(), s["reason"].get<std::string>()));

  std::vector<const HubFile*> side;
  uint64_t side_bytes = 0;
  for (const std::string& name : SideFileNames()) {
    if (const HubFile* f = FindFile(src.files, name)) {
      side.push_back(f);
      side_bytes += f->size;
    }
  }

  // Staging: fresh, or resumed from the journal.
  const Json begin = BeginRecord(opts.repo_id, src, QuantizeModeName(mode));
  std::vector<Json> records;
  if (PathExists(journal_path)) {
    bool torn = false;
    RW_ASSIGN_OR_RETURN(Journal probe, Journal::Open(journal_path, &records, &torn));
    if (torn) log("journal: dropped a torn last record (an interrupted write)");
  } else if (PathExists(staging)) {
    RW_RETURN_IF_ERROR(RemoveAll(staging));  // died before its first journal record
  }
  RW_ASSIGN_OR_RETURN(Replayed state, Replay(records, begin, layout, staging));
  const bool resuming = state.has_begin;
  report.resumed = resuming;
  uint64_t need = layout.total_output_bytes() + side_bytes;
  if (resuming) {
    // What is already on disk needs no more space: the target files' written bytes, and the side
    // files (tokenizer.json is tens of MB) fetched before the stop.
    for (int f = 0; f < layout.num_files(); ++f) {
      uint64_t a = AllocatedBytes(JoinPath(staging, layout.target_file_name(f)));
      need -= std::min(need, a);
    }
    for (const HubFile* f : side) {
      uint64_t a = std::min(f->size, AllocatedBytes(JoinPath(staging, f->path)));
      need -= std::min(need, a);
    }
  }
  need += kDiskSlackBytes;
  {
    // The nearest existing directory at or above the output is on the filesystem that matters.
    std::string dir = ParentPath(out);
    while (!PathExists(dir) && dir != ParentPath(dir)) dir = ParentPath(dir);
    auto free_bytes =
        opts.assume_free_bytes ? Result<uint64_t>(*opts.assume_free_bytes) : FreeDiskBytes(dir);
    if (!free_bytes.ok()) {
      log(fmt::format("cannot check the free disk space: {}", free_bytes.status().message()));
    } else {
      RW_RETURN_IF_ERROR(CheckFreeSpace(out, need, *free_bytes));
    }
  }

  std::vector<File> files;
  if (!resuming) {
    RW_RETURN_IF_ERROR(MakeDirectories(JoinPath(staging, "experts")));
    for (int f = 0; f < layout.num_files(); ++f) {
      RW_ASSIGN_OR_RETURN(File file, File::Create(JoinPath(staging, layout.target_file_name(f))));
      RW_RETURN_IF_ERROR(file.Truncate(layout.target_file_size(f)));  // sparse: holes read as 0
      files.push_back(std::move(file));
    }
  } else {
    log(fmt::format("resuming the install in {}", staging));
    for (int f = 0; f < layout.num_files(); ++f) {
      const std::string p = JoinPath(staging, layout.target_file_name(f));
      auto file = File::OpenReadWrite(p);
      if (!file.ok())
        return Error(ErrorCode::kCorrupt,
                     "{}: the partial install lost {} ({}); pass "
                     "--discard-partial to start over",
                     staging, layout.target_file_name(f), file.status().message());
      RW_ASSIGN_OR_RETURN(uint64_t size, file->Size());
      if (size != layout.target_file_size(f))
        return Error(ErrorCode::kCorrupt,
                     "{}: {} has {} bytes, {} expected; pass "
                     "--discard-partial to start over",
                     staging, layout.target_file_name(f), size, layout.target_file_size(f));
      files.push_back(std::move(*file));
    }
  }
  RW_ASSIGN_OR_RETURN(Journal journal, Journal::Open(journal_path, &records));
  if (!resuming) {
    for (File& f : files) RW_RETURN_IF_ERROR(f.Sync());
    RW_RETURN_IF_ERROR(SyncDirectory(staging));
    journal.Append(begin);
    RW_RETURN_IF_ERROR(journal.Sync());
  }

  // Progress counts bytes already done in earlier runs too.
  uint64_t total = side_bytes + report.shard_bytes, side_done = 0;
  auto report_progress = [&](uint64_t done) {
    if (cb.progress) cb.progress(done, total);
  };
  const std::string resume_hint = fmt::format(
      "; the work so far is kept in {}: run the same command with --resume to "
      "continue",
      staging);
  auto keep = [&](const Status& st) {
    return st.code() == ErrorCode::kInvalidArgument ? st
                                                    : Status(st.code(), st.message() + resume_hint);
  };

  for (const HubFile* f : side) {
    const std::string path = JoinPath(staging, f->path);
    auto done = state.side_done.find(f->path);
    if (done != state.side_done.end() && PathExists(path)) {
      side_done += f->size;
      continue;
    }
    std::string sha;
    Status st = FetchSideFile(
        conn, api.FileUrl(src.commit, f->path), *f, path, opts.segment_bytes, &sha,
        [&](uint64_t n) {
          side_done += n;  // unsigned wrap-around undoes a failed try's bytes
          report_progress(side_done);
        },
        log);
    if (!st.ok()) return keep(st);
    journal.Append(Json{{"t", "side"}, {"path", f->path}, {"size", f->size}, {"sha256", sha}});
    RW_RETURN_IF_ERROR(journal.Sync());
  }

  std::vector<std::string> urls;
  for (const ShardLayout& s : layout.shards) urls.push_back(api.FileUrl(src.commit, s.file));
  StreamOptions sopt;
  sopt.connections = opts.connections;
  sopt.segment_bytes = opts.segment_bytes;
  sopt.hash_attempts = opts.hash_attempts;
  sopt.checkpoint_interval_s = opts.checkpoint_interval_s;
  sopt.cancel = opts.cancel;
  sopt.http = hopt;
  log(fmt::format("fetching {} shard(s) over {} connection(s)", layout.shards.size(),
                  opts.connections));
  Status st =
      StreamShards(layout, urls, &files, &journal, state.shards, &state.unit_xxh3, sopt, &stats,
                   [&](uint64_t done, uint64_t) { report_progress(side_done + done); });
  report.fetched_bytes = stats.bytes;
  report.retries = stats.retries;
  if (!st.ok()) {
    if (st.code() == ErrorCode::kCancelled)
      return Error(ErrorCode::kCancelled, "interrupted{}", resume_hint);
    return keep(st);
  }

  // Finish the files: core directory and header, expert index.
  RW_RETURN_IF_ERROR(FinishCoreFile(layout, files[kCoreFileId]));
  for (File& f : files) {
    RW_RETURN_IF_ERROR(f.Sync());
    RW_RETURN_IF_ERROR(f.Close());
  }
  std::vector<std::string> staged = {kCoreName};
  if (!layout.expert_layers.empty()) {
    ExpertIndex index;
    index.num_layers = static_cast<int>(layout.expert_layers.size());
    index.num_experts = layout.num_experts;
    index.layers = layout.expert_layers;
    for (size_t li = 0; li < index.layers.size(); ++li) {
      for (int e = 0; e < layout.num_experts; ++e)
        index.layers[li].xxh3.push_back(*state.unit_xxh3[li * layout.num_experts + e]);
      staged.push_back(index.layers[li].file);
    }
    RW_RETURN_IF_ERROR(
        WriteFileAtomic(JoinPath(staging, kExpertIndexName), index.ToJson().dump(1) + "\n"));
    staged.push_back(kExpertIndexName);
  }
  for (const HubFile* f : side) staged.push_back(f->path);

  // Publish: hard links into the writer's staging directory (no copy), manifest, rename.
  RW_ASSIGN_OR_RETURN(ModelDirWriter writer, ModelDirWriter::Create(out, opts.overwrite));
  for (const std::string& rel : staged)
    RW_RETURN_IF_ERROR(LinkInto(JoinPath(staging, rel), writer.Path(rel)));
  Manifest m;
  m.created_by = kCreatedBy;
  m.config = layout.plan.config;
  m.source = Json{{"kind", "hub"},
                  {"repo_id", opts.repo_id},
                  {"revision", src.commit},
                  {"endpoint", EndpointForDisplay(endpoint)},
                  {"format", SourceKindName(layout.plan.kind)},
                  {"dtype", layout.plan.source_dtype},
                  {"quantize", QuantizeModeName(mode)}};
  if (revision != src.commit) m.source["requested_revision"] = revision;
  if (!layout.plan.mlx_quantization.is_null())
    m.source["mlx_quantization"] = layout.plan.mlx_quantization;
  m.skipped = layout.plan.skipped;
  Json def{{"mode", QuantizeModeName(mode)}};
  if (mode == QuantizeMode::kQ4 || mode == QuantizeMode::kQ8)
    def.update(
        Json{{"type", "affine"}, {"bits", mode == QuantizeMode::kQ4 ? 4 : 8}, {"group_size", 64}});
  m.quantization["default"] = def;
  log("writing the manifest (hashing every file)");
  RW_RETURN_IF_ERROR(writer.Commit(std::move(m)));
  RW_RETURN_IF_ERROR(RemoveAll(staging));

  log("verifying the installed model");
  RW_ASSIGN_OR_RETURN(VerifyReport vr, VerifyModelDir(out));
  if (!vr.problems.empty())
    return Error(ErrorCode::kCorrupt, "{}: the installed model failed verification: {}", out,
                 vr.problems.front());
  report.seconds = timer.Seconds();
  return report;
}

}  // namespace rw
