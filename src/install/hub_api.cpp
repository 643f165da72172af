#include "install/hub_api.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "base/hash.h"
#include "base/json.h"

namespace rw {
namespace {
constexpr uint64_t kMaxApiResponse = 64u << 20;
constexpr int kMaxTreePages = 1000;
}  // namespace

std::string HubEndpointFromEnv() {
  const char* e = std::getenv("HF_ENDPOINT");
  std::string s = (e && *e) ? e : kDefaultHubEndpoint;
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

std::string HubTokenFromEnv() {
  const char* t = std::getenv("HF_TOKEN");
  return t ? t : "";
}

std::string EndpointForDisplay(const std::string& endpoint) {
  size_t scheme = endpoint.find("://");
  size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  size_t slash = endpoint.find('/', start);
  size_t at = endpoint.rfind('@', slash == std::string::npos ? std::string::npos : slash);
  if (at == std::string::npos || at < start) return endpoint;
  return endpoint.substr(0, start) + endpoint.substr(at + 1);
}

Status CheckRepoId(const std::string& repo_id) {
  size_t slash = repo_id.find('/');
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < repo_id.size() &&
            repo_id.find('/', slash + 1) == std::string::npos && repo_id.size() <= 200;
  for (char c : repo_id)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
                c == '/');
  if (ok && (repo_id.find("..") != std::string::npos)) ok = false;
  if (!ok)
    return Error(ErrorCode::kInvalidArgument,
                 "'{}' is not a repository id (expected owner/name, e.g. "
                 "mlx-community/gemma-4-26b-a4b-it-4bit)",
                 repo_id);
  return Status::Ok();
}

bool IsCommitHash(const std::string& rev) {
  return rev.size() == 40 && rev.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string UrlEncode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<std::string> HubApi::ResolveCommit(const std::string& revision) {
  std::string url =
      fmt::format("{}/api/models/{}/revision/{}", endpoint_, repo_, UrlEncode(revision, false));
  auto r = conn_->Get(url, kMaxApiResponse);
  if (!r.ok()) {
    if (r.status().code() == ErrorCode::kNotFound)
      return Error(ErrorCode::kNotFound, "{}: no revision '{}' (or no such repository): {}", repo_,
                   revision, r.status().message());
    return r.status();
  }
  RW_ASSIGN_OR_RETURN(Json j, ParseJson(r->body, url));
  if (!j.is_object()) return Error(ErrorCode::kCorrupt, "{}: model info is not an object", url);
  RW_ASSIGN_OR_RETURN(std::string sha, JsonString(j, "sha", url));
  if (!IsCommitHash(sha))
    return Error(ErrorCode::kCorrupt, "{}: 'sha' {} is not a commit hash", url, sha);
  if (IsCommitHash(revision) && sha != revision)
    return Error(ErrorCode::kCorrupt, "{}: asked for commit {}, the Hub answered {}", url, revision,
                 sha);
  return sha;
}

Result<std::vector<HubFile>> HubApi::ListFiles(const std::string& commit) {
  std::vector<HubFile> files;
  std::string url =
      fmt::format("{}/api/models/{}/tree/{}?recursive=true", endpoint_, repo_, commit);
  for (int page = 0; !url.empty(); ++page) {
    if (page >= kMaxTreePages)
      return Error(ErrorCode::kCorrupt, "{}: more than {} pages of files", repo_, kMaxTreePages);
    RW_ASSIGN_OR_RETURN(HttpResponse r, conn_->Get(url, kMaxApiResponse));
    RW_ASSIGN_OR_RETURN(Json j, ParseJson(r.body, url));
    if (!j.is_array()) return Error(ErrorCode::kCorrupt, "{}: tree listing is not an array", url);
    for (const Json& e : j) {
      if (!e.is_object() || e.value("type", "") != "file") continue;
      HubFile f;
      RW_ASSIGN_OR_RETURN(f.path, JsonString(e, "path", url));
      RW_ASSIGN_OR_RETURN(int64_t size, JsonInt(e, "size", url + ": " + f.path));
      if (size < 0) return Error(ErrorCode::kCorrupt, "{}: {} has a negative size", url, f.path);
      f.size = static_cast<uint64_t>(size);
      f.git_oid = e.value("oid", "");
      if (e.contains("lfs") && e["lfs"].is_object()) {
        const Json& lfs = e["lfs"];
        RW_ASSIGN_OR_RETURN(f.sha256, JsonString(lfs, "oid", url + ": " + f.path + " lfs"));
        if (f.sha256.compare(0, 7, "sha256:") == 0) f.sha256 = f.sha256.substr(7);
        if (f.sha256.size() != 64 ||
            f.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
          return Error(ErrorCode::kCorrupt, "{}: {}: malformed LFS oid '{}'", url, f.path,
                       f.sha256);
        RW_ASSIGN_OR_RETURN(int64_t lsize, JsonInt(lfs, "size", url + ": " + f.path + " lfs"));
        if (static_cast<uint64_t>(lsize) != f.size)
          return Error(ErrorCode::kCorrupt, "{}: {}: size {} but LFS size {}", url, f.path, f.size,
                       lsize);
      }
      files.push_back(std::move(f));
    }
    url = r.link_next;
  }
  return files;
}

std::string HubApi::FileUrl(const std::string& commit, const std::string& path) const {
  return fmt::format("{}/{}/resolve/{}/{}", endpoint_, repo_, commit, UrlEncode(path, true));
}

Result<std::string> HubApi::FetchSmallFile(const std::string& commit, const HubFile& f,
                                           uint64_t max_bytes,
                                           const std::function<void(const std::string&)>& log) {
  if (f.size > max_bytes)
    return Error(ErrorCode::kCorrupt, "{}: {} bytes, more than the {} expected at most", f.path,
                 f.size, max_bytes);
  Status st;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    // One byte more than announced is allowed through so that a longer body is reported as such.
    RW_ASSIGN_OR_RETURN(HttpResponse r, conn_->Get(FileUrl(commit, f.path), f.size + 1));
    st = CheckHubFileContent(f, r.body);
    if (st.ok()) return std::move(r.body);
    if (attempt == 1 && log) log(st.message() + "; fetching it again");
  }
  return st;
}

bool HubFile::has_git_oid() const {
  return !lfs() && git_oid.size() == 40 &&
         git_oid.find_first_not_of("0123456789abcdef") == std::string::npos;
}

GitBlobSha1::GitBlobSha1(uint64_t size) {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  ctx_ = c;
  EVP_DigestInit_ex(c, EVP_sha1(), nullptr);
  const std::string prefix = fmt::format("blob {}", size);
  EVP_DigestUpdate(c, prefix.data(), prefix.size() + 1);  // with the terminating NUL
}

GitBlobSha1::~GitBlobSha1() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void GitBlobSha1::Update(const void* data, size_t n) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}

std::string GitBlobSha1::FinishHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string GitBlobSha1Hex(const void* data, size_t n) {
  GitBlobSha1 h(n);
  h.Update(data, n);
  return h.FinishHex();
}

Status CheckHubFileContent(const HubFile& f, const std::string& bytes) {
  if (bytes.size() != f.size)
    return Error(ErrorCode::kCorrupt, "{}: got {} bytes, the Hub lists {}", f.path, bytes.size(),
                 f.size);
  const std::string range = f.size ? fmt::format("bytes 0-{}", f.size - 1) : "its 0 bytes";
  if (f.lfs()) {
    std::string got = Sha256Hex(bytes.data(), bytes.size());
    if (got != f.sha256)
      return Error(ErrorCode::kCorrupt, "{}: SHA-256 mismatch over {} (expected {}, got {})",
                   f.path, range, f.sha256, got);
  } else if (f.has_git_oid()) {
    std::string got = GitBlobSha1Hex(bytes.data(), bytes.size());
    if (got != f.git_oid)
      return Error(ErrorCode::kCorrupt, "{}: git blob SHA-1 mismatch over {} (expected {}, got {})",
                   f.path, range, f.git_oid, got);
  }
  return Status::Ok();
}

}  // namespace rw
