#include "install/hub_http.h"

#include <curl/curl.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "base/log.h"

namespace rw {
namespace {

constexpr size_t kErrorBodyKeep = 300;  // bytes of an error body quoted in messages

bool Transient(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) s.pop_back();
  size_t i = s.find_first_not_of(' ');
  return i == std::string::npos ? "" : s.substr(i);
}

// The URL of a Link header's rel="next" entry.
std::string LinkNext(const std::string& value) {
  size_t pos = 0;
  while (pos < value.size()) {
    size_t lt = value.find('<', pos), gt = value.find('>', lt == std::string::npos ? pos : lt);
    if (lt == std::string::npos || gt == std::string::npos) break;
    size_t comma = value.find(',', gt);
    std::string params =
        value.substr(gt + 1, comma == std::string::npos ? std::string::npos : comma - gt - 1);
    if (params.find("rel=\"next\"") != std::string::npos ||
        params.find("rel=next") != std::string::npos)
      return value.substr(lt + 1, gt - lt - 1);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return "";
}

}  // namespace

bool ParseContentRange(const std::string& value, uint64_t* first, uint64_t* last, uint64_t* total) {
  unsigned long long a = 0, b = 0, t = 0;
  char star = 0;
  int consumed = 0;
  std::string v = Trim(value);
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu%n", &a, &b, &t, &consumed) == 3 &&
      static_cast<size_t>(consumed) == v.size()) {
    *total = t;
  } else if (std::sscanf(v.c_str(), "bytes %llu-%llu/%c%n", &a, &b, &star, &consumed) == 3 &&
             star == '*' && static_cast<size_t>(consumed) == v.size()) {
    *total = UINT64_MAX;
  } else {
    return false;
  }
  if (b < a) return false;
  *first = a;
  *last = b;
  return true;
}

double ParseRetryAfter(const std::string& value) {
  std::string v = Trim(value);
  if (v.empty()) return -1;
  if (v.find_first_not_of("0123456789") == std::string::npos && v.size() < 10)
    return static_cast<double>(std::stoul(v));
  time_t when = curl_getdate(v.c_str(), nullptr);
  if (when < 0) return -1;
  return std::max(0.0, static_cast<double>(when - std::time(nullptr)));
}

// State of one request and its response.
struct HttpConnection::Try {
  // Request.
  bool ranged = false;
  uint64_t first = 0, last = 0, file_size = UINT64_MAX;
  uint8_t* dst = nullptr;  // ranged: bytes go to dst[0, last - first]
  const std::function<void(uint64_t)>* on_data = nullptr;  // ranged: told of accepted bytes
  std::string* body = nullptr;
  uint64_t max_body = 0;
  const std::atomic<bool>* cancel = nullptr;
  // Response (of the last hop, after redirects).
  long status = 0;
  std::string content_range, retry_after, link, error_body;
  uint64_t got = 0;
  std::string abort_reason;  // why the write callback stopped the transfer
};

static size_t HeaderCb(char* p, size_t size, size_t n, void* ud) {
  auto* t = static_cast<HttpConnection::Try*>(ud);
  std::string line(p, size * n);
  if (line.compare(0, 5, "HTTP/") == 0) {
    // A new response (the first, or one after a redirect): forget the previous hop's headers.
    size_t sp = line.find(' ');
    t->status = sp == std::string::npos ? 0 : std::atol(line.c_str() + sp + 1);
    t->content_range.clear();
    t->retry_after.clear();
    t->link.clear();
    t->error_body.clear();
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon), value = Trim(line.substr(colon + 1));
  if (strcasecmp(name.c_str(), "content-range") == 0)
    t->content_range = value;
  else if (strcasecmp(name.c_str(), "retry-after") == 0)
    t->retry_after = value;
  else if (strcasecmp(name.c_str(), "link") == 0)
    t->link = value;
  return size * n;
}

static size_t WriteCb(char* p, size_t size, size_t n, void* ud) {
  auto* t = static_cast<HttpConnection::Try*>(ud);
  const size_t len = size * n;
  if (t->status < 200 || t->status >= 300) {
    // An error page: keep its start for the message, never its bytes as data.
    if (t->error_body.size() < kErrorBodyKeep)
      t->error_body.append(p, std::min(len, kErrorBodyKeep - t->error_body.size()));
    return len;
  }
  if (t->ranged) {
    if (t->status != 206) {
      t->abort_reason = fmt::format(
          "server answered {} instead of 206 to a range request "
          "(Range ignored?)",
          t->status);
      return 0;
    }
    if (t->got == 0) {
      uint64_t a, b, total;
      if (!ParseContentRange(t->content_range, &a, &b, &total)) {
        t->abort_reason = fmt::format("206 without a valid Content-Range ('{}')", t->content_range);
        return 0;
      }
      if (a != t->first || b != t->last ||
          (t->file_size != UINT64_MAX && total != UINT64_MAX && total != t->file_size)) {
        t->abort_reason = fmt::format(
            "Content-Range '{}' does not match the bytes asked "
            "({}-{}/{})",
            t->content_range, t->first, t->last, t->file_size);
        return 0;
      }
    }
    if (t->got + len > t->last - t->first + 1) {
      t->abort_reason = "server sent more bytes than the range asked for";
      return 0;
    }
    std::memcpy(t->dst + t->got, p, len);
    t->got += len;
    if (t->on_data != nullptr && *t->on_data) (*t->on_data)(len);
    return len;
  }
  if (t->body->size() + len > t->max_body) {
    t->abort_reason = fmt::format("response larger than {} bytes", t->max_body);
    return 0;
  }
  t->body->append(p, len);
  t->got += len;
  return len;
}

static int XferCb(void* ud, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<HttpConnection::Try*>(ud);
  return (t->cancel && t->cancel->load()) ? 1 : 0;
}

HttpConnection::HttpConnection(const HttpOptions& options, HttpStats* stats)
    : opt_(options), stats_(stats) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (!opt_.token.empty())
    headers_ = curl_slist_append(nullptr, ("Authorization: Bearer " + opt_.token).c_str());
}

HttpConnection::~HttpConnection() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
  if (headers_) curl_slist_free_all(static_cast<curl_slist*>(headers_));
}

int HttpConnection::Perform(const std::string& url, Try* t) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps live connections and caches
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  // Never send the token to the CDN host a redirect points at (this is libcurl's default; it is
  // stated here because the installer's safety depends on it).
  curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_USERAGENT, "redwing/0.1");
  if (headers_) curl_easy_setopt(c, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers_));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, static_cast<long>(opt_.connect_timeout_s));
  // A stall: under 1 byte/s for stall_timeout_s seconds aborts the try.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(opt_.stall_timeout_s));
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, HeaderCb);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, WriteCb);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, XferCb);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, t);
  std::string range;
  if (t->ranged) {
    range = fmt::format("{}-{}", t->first, t->last);
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  }
  t->cancel = opt_.cancel;
  stats_->requests++;
  const uint64_t before = t->got;
  CURLcode rc = curl_easy_perform(c);
  stats_->bytes += t->got - before;
  if (t->status == 0) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t->status);
  return rc;
}

bool HttpConnection::Backoff(int attempt, double retry_after_s) {
  static thread_local std::mt19937 rng(std::random_device{}());
  double d = std::min(opt_.backoff_max_s, opt_.backoff_initial_s * std::pow(2.0, attempt - 1));
  d *= std::uniform_real_distribution<double>(0.75, 1.25)(rng);
  if (retry_after_s >= 0) d = std::max(d, std::min(retry_after_s, opt_.retry_after_max_s));
  stats_->retries++;
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(d);
  while (std::chrono::steady_clock::now() < until) {
    if (cancelled()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !cancelled();
}

Result<HttpResponse> HttpConnection::Get(const std::string& url, uint64_t max_bytes) {
  std::string last_error;
  for (int attempt = 1;; ++attempt) {
    if (cancelled()) return Error(ErrorCode::kCancelled, "{}: cancelled", url);
    HttpResponse r;
    Try t;
    t.body = &r.body;
    t.max_body = max_bytes;
    int rc = Perform(url, &t);
    r.status = t.status;
    if (rc == CURLE_ABORTED_BY_CALLBACK) return Error(ErrorCode::kCancelled, "{}: cancelled", url);
    if (rc == CURLE_OK && t.status >= 200 && t.status < 300) {
      r.link_next = LinkNext(t.link);
      return r;
    }
    bool retry = true;
    if (rc != CURLE_OK) {
      last_error =
          t.abort_reason.empty() ? curl_easy_strerror(static_cast<CURLcode>(rc)) : t.abort_reason;
      if (rc == CURLE_WRITE_ERROR) retry = false;  // too large: retrying will not help
    } else {
      last_error = fmt::format("HTTP {}", t.status);
      if (!t.error_body.empty()) last_error += ": " + Trim(t.error_body);
      retry = Transient(t.status);
      if (!retry) {
        if (t.status == 401 || t.status == 403)
          return Error(ErrorCode::kInvalidArgument,
                       "{}: {} (a gated or private repository needs an access token: set HF_TOKEN)",
                       url, last_error);
        if (t.status == 404) return Error(ErrorCode::kNotFound, "{}: {}", url, last_error);
        return Error(ErrorCode::kIo, "{}: {}", url, last_error);
      }
    }
    if (!retry || attempt >= opt_.max_attempts)
      return Error(ErrorCode::kIo, "{}: {} (after {} tries)", url, last_error, attempt);
    RW_LOG_DEBUG("{}: {}; retrying", url, last_error);
    if (!Backoff(attempt, ParseRetryAfter(t.retry_after)))
      return Error(ErrorCode::kCancelled, "{}: cancelled", url);
  }
}

Status HttpConnection::FetchRange(const std::string& url, uint64_t offset, uint64_t n,
                                  uint64_t file_size, uint8_t* dst, const std::string& what,
                                  const std::function<void(uint64_t)>& on_data) {
  if (n == 0) return Status::Ok();
  const uint64_t end = offset + n - 1;
  uint64_t got = 0;
  int failures = 0, total_failures = 0;
  std::string last_error;
  for (;;) {
    if (cancelled())
      return Error(ErrorCode::kCancelled, "{} bytes {}-{}: cancelled", what, offset, end);
    Try t;
    t.ranged = true;
    t.first = offset + got;
    t.last = end;
    t.file_size = file_size;
    t.dst = dst + got;
    t.on_data = &on_data;
    int rc = Perform(url, &t);
    if (rc == CURLE_ABORTED_BY_CALLBACK)
      return Error(ErrorCode::kCancelled, "{} bytes {}-{}: cancelled", what, offset, end);
    got += t.got;  // bytes of a valid 206 are kept: the next try continues after them
    if (rc == CURLE_OK && t.status == 206 && got == n) return Status::Ok();
    if (rc != CURLE_OK) {
      last_error =
          !t.abort_reason.empty() ? t.abort_reason : curl_easy_strerror(static_cast<CURLcode>(rc));
    } else if (t.status == 206) {
      last_error = fmt::format("body ended after {} of {} bytes", t.got, t.last - t.first + 1);
    } else {
      last_error = fmt::format("HTTP {}", t.status);
      if (!t.error_body.empty()) last_error += ": " + Trim(t.error_body);
      if (!Transient(t.status)) {
        ErrorCode code = t.status == 404                        ? ErrorCode::kNotFound
                         : (t.status == 401 || t.status == 403) ? ErrorCode::kInvalidArgument
                                                                : ErrorCode::kIo;
        return Error(
            code, "{} bytes {}-{}: {}{}", what, offset, end, last_error,
            code == ErrorCode::kInvalidArgument ? " (set HF_TOKEN for gated repositories)" : "");
      }
    }
    // Progress resets the count: a connection that keeps dropping but advances still finishes.
    failures = t.got > 0 ? 1 : failures + 1;
    ++total_failures;
    if (failures >= opt_.max_attempts || total_failures >= 4 * opt_.max_attempts)
      return Error(ErrorCode::kIo, "{} bytes {}-{}: {} (gave up after {} tries)", what, offset, end,
                   last_error, total_failures);
    RW_LOG_DEBUG("{} bytes {}-{}: {}; retrying from byte {}", what, offset, end, last_error,
                 offset + got);
    if (!Backoff(failures, ParseRetryAfter(t.retry_after)))
      return Error(ErrorCode::kCancelled, "{} bytes {}-{}: cancelled", what, offset, end);
  }
}

}  // namespace rw
