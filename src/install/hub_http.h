// HTTP for the hub installer, over libcurl easy handles: one HttpConnection per worker thread,
// reused so keep-alive connections persist. Every request retries transient failures (429, 5xx,
// connection drops, stalls, short bodies) with exponential backoff, honouring Retry-After.
//
// Redirects (the Hub sends LFS downloads to a CDN host) are followed, and the Authorization
// header is never forwarded to another host: CURLOPT_UNRESTRICTED_AUTH is set off explicitly
// (libcurl's default), so curl drops it whenever the host (or port/scheme) changes.
// Proxies come from the standard environment variables, which libcurl honours itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace rw {

struct HttpOptions {
  std::string token;               // sent as "Authorization: Bearer <token>" when not empty
  int max_attempts = 8;            // tries per request before giving up
  double backoff_initial_s = 0.5;  // doubled per failed try, with jitter
  double backoff_max_s = 30;
  double retry_after_max_s = 600;  // longest Retry-After we wait for
  int stall_timeout_s = 30;        // no byte for this long: abort the try and retry
  int connect_timeout_s = 30;
  // Set by someone else to stop: in-flight transfers abort, waits end, requests fail kCancelled.
  const std::atomic<bool>* cancel = nullptr;
};

// Counters shared by all connections of an install (for progress and reports).
struct HttpStats {
  std::atomic<uint64_t> bytes{0};  // body bytes received, retries included
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> retries{0};
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::string link_next;  // the rel="next" URL of a Link header (paginated APIs)
};

class HttpConnection {
 public:
  HttpConnection(const HttpOptions& options, HttpStats* stats);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // GET a whole (small) body. Transient failures are retried; a final status other than 2xx is
  // an error naming the URL (401/403 mention HF_TOKEN, 404 is kNotFound).
  Result<HttpResponse> Get(const std::string& url, uint64_t max_bytes);

  // Fetches bytes [offset, offset + n) of url into dst. Each response must be 206 with a
  // Content-Range for exactly the bytes asked (and the file size, when file_size != UINT64_MAX)
  // and carry exactly that many bytes. A try that fails midway continues from the bytes already
  // received. `what` names the file in errors, which also name the range. on_data, when set, is
  // told of every piece of the range as it arrives (for progress by bytes, not by request): the
  // pieces add up to n on success, and no byte is told twice.
  Status FetchRange(const std::string& url, uint64_t offset, uint64_t n, uint64_t file_size,
                    uint8_t* dst, const std::string& what,
                    const std::function<void(uint64_t)>& on_data = {});

  struct Try;  // one request's state (public only for libcurl's C callbacks)

 private:
  // One request; fills t. Returns the curl result code.
  int Perform(const std::string& url, Try* t);
  // Sleeps for the backoff of failure number `attempt` (or Retry-After); false when cancelled.
  bool Backoff(int attempt, double retry_after_s);
  bool cancelled() const { return opt_.cancel && opt_.cancel->load(); }

  HttpOptions opt_;
  HttpStats* stats_;
  void* curl_ = nullptr;
  void* headers_ = nullptr;  // curl_slist with the Authorization header
};

// "bytes a-b/total" -> a, b, total (total UINT64_MAX for "*"). False when malformed.
bool ParseContentRange(const std::string& value, uint64_t* first, uint64_t* last, uint64_t* total);
// Seconds from a Retry-After value (delta-seconds or HTTP-date); negative when unparsable.
double ParseRetryAfter(const std::string& value);

}  // namespace rw
