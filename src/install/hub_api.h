// The Hugging Face Hub's public HTTP API, as far as installing needs it:
//   GET {endpoint}/api/models/{repo}/revision/{rev}          -> {"sha", "siblings": [...]}
//   GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true
//        -> [{"type", "path", "size", "oid", "lfs": {"oid": sha256, "size"}}], paginated by Link
//   GET {endpoint}/{repo}/resolve/{commit}/{path}           -> the bytes (Range supported; LFS
//        files redirect to a CDN host)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "install/hub_http.h"

namespace rw {

inline constexpr const char* kDefaultHubEndpoint = "https://huggingface.co";

// HF_ENDPOINT (without trailing '/') or the default.
std::string HubEndpointFromEnv();
// HF_TOKEN, or "" when unset.
std::string HubTokenFromEnv();
// The endpoint without any "user:password@" part, for recording in a manifest.
std::string EndpointForDisplay(const std::string& endpoint);

// kInvalidArgument unless "owner/name" with [A-Za-z0-9._-] parts.
Status CheckRepoId(const std::string& repo_id);
bool IsCommitHash(const std::string& rev);  // 40 lowercase hex digits
// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string UrlEncode(const std::string& s, bool keep_slash);

struct HubFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;   // LFS files only: the content hash the Hub records
  std::string git_oid;  // the tree API's "oid": for a file not in LFS, its git blob SHA-1
  bool lfs() const { return !sha256.empty(); }
  // A file outside LFS with a well-formed git blob id can be checked with GitBlobSha1.
  bool has_git_oid() const;
};

// git's object id of a blob: SHA-1 (OpenSSL) of "blob <size>\0" followed by the content. The
// tree API reports it as "oid" for every file; for a file outside LFS it hashes the content.
class GitBlobSha1 {
 public:
  explicit GitBlobSha1(uint64_t size);
  ~GitBlobSha1();
  GitBlobSha1(const GitBlobSha1&) = delete;
  GitBlobSha1& operator=(const GitBlobSha1&) = delete;
  void Update(const void* data, size_t n);
  std::string FinishHex();  // lowercase hex; the object is finished afterwards

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX
};
std::string GitBlobSha1Hex(const void* data, size_t n);

// Checks a whole file's bytes against what the tree API recorded: its size, then its LFS
// SHA-256 or (outside LFS) its git blob SHA-1. kCorrupt names the file, the range and both hashes.
Status CheckHubFileContent(const HubFile& f, const std::string& bytes);

class HubApi {
 public:
  HubApi(std::string endpoint, std::string repo_id, HttpConnection* conn)
      : endpoint_(std::move(endpoint)), repo_(std::move(repo_id)), conn_(conn) {}

  // The commit a revision (branch, tag or commit) points at.
  Result<std::string> ResolveCommit(const std::string& revision);
  // Every file of the repository at `commit`.
  Result<std::vector<HubFile>> ListFiles(const std::string& commit);
  std::string FileUrl(const std::string& commit, const std::string& path) const;
  // A small file, whole (config.json, the safetensors index), checked with CheckHubFileContent;
  // a file that fails the check is fetched once more before the error is returned.
  Result<std::string> FetchSmallFile(const std::string& commit, const HubFile& f,
                                     uint64_t max_bytes,
                                     const std::function<void(const std::string&)>& log = {});

 private:
  std::string endpoint_, repo_;
  HttpConnection* conn_;
};

}  // namespace rw
