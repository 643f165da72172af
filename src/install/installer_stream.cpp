#include "install/installer_stream.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "base/hash.h"
#include "base/log.h"
#include "install/convert_repack.h"
#include "install/journal_sha256.h"

namespace rw {
namespace {

// ThreadPool::Default() (used by RepackTensor's quantizer) is not reentrant: one conversion at a
// time. Conversion only happens for --quantize of float checkpoints.
std::mutex g_convert_mu;

// Serves RepackTensor's reads from rows already in memory.
class MemoryReader : public TensorReader {
 public:
  MemoryReader(const uint8_t* p, uint64_t n) : p_(p), n_(n) {}
  Status Read(const std::string& tensor, uint64_t offset, uint64_t n, void* dst) override {
    if (offset + n > n_)
      return Error(ErrorCode::kInternal, "'{}': read past the rows in memory", tensor);
    std::memcpy(dst, p_ + offset, n);
    return Status::Ok();
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
};

struct Segment {
  uint64_t start = 0, len = 0;
  int buf = -1;
};

struct ShardState {
  const ShardLayout* lay = nullptr;
  std::string url;
  uint64_t next_fetch = 0, processed = 0;
  bool done = false, processing = false;
  int inflight = 0;
  std::map<uint64_t, Segment> ready;
  ResumableSha256 sha;
  std::vector<std::vector<uint8_t>> carry;  // per span: a partial row of a converting span
  int attempt = 1;
  bool header_differs = false;  // this fetch's first bytes differ from the planning header
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> digests, prev_digests;  // start -> (len, xxh3)
  // Latest checkpoint and what the journal has of it.
  uint64_t cand_pos = 0;
  std::string cand_state;
  uint64_t reset_seq = 0, journaled_reset_seq = 0;
  uint64_t journaled_pos = UINT64_MAX;
  bool done_journaled = false;
};

struct Cut {
  bool valid = false;
  uint64_t pos = 0;
  std::string state;
};

class Streamer {
 public:
  Streamer(const InstallLayout& layout, const std::vector<std::string>& urls,
           std::vector<File>* files, Journal* journal, const StreamOptions& opt, HttpStats* stats,
           std::vector<std::optional<uint64_t>>* unit_xxh3)
      : layout_(layout),
        files_(files),
        journal_(journal),
        opt_(opt),
        stats_(stats),
        unit_xxh3_(unit_xxh3) {
    shards_.resize(layout.shards.size());
    for (size_t s = 0; s < shards_.size(); ++s) {
      shards_[s].lay = &layout.shards[s];
      shards_[s].url = urls[s];
      shards_[s].carry.resize(layout.shards[s].spans.size());
    }
  }

  Status Restore(const std::vector<ShardResume>& resume);
  Status Run(const StreamProgressFn& progress);

 private:
  void Worker();
  // Consumes one in-order segment of shard s (hash, scatter). Called with the shard's
  // `processing` flag held, without mu_.
  Status Consume(ShardState& sh, const Segment& seg, Cut* cut);
  // Under mu_: the shard's last byte was consumed.
  Status FinishShard(size_t s);
  Status Scatter(ShardState& sh, uint64_t start, const uint8_t* p, uint64_t n);
  Status EmitRows(const SinkSpan& span, uint64_t row0, const uint8_t* p, uint64_t rows);
  Status WriteAt(int file, const void* p, uint64_t n, uint64_t offset);
  Status Delivered(int unit, uint64_t bytes);
  Status ChecksumUnit(int unit, uint64_t* out);
  Status Flush();
  void Fail(const Status& st);
  bool AllDone() const;
  // Bytes consumed, plus those received of segments not yet consumed (for progress).
  uint64_t ProgressBytes() const;

  const InstallLayout& layout_;
  std::vector<File>* files_;
  Journal* journal_;
  StreamOptions opt_;
  HttpStats* stats_;
  std::vector<std::optional<uint64_t>>* unit_xxh3_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ShardState> shards_;
  std::vector<std::vector<uint8_t>> pool_;
  std::vector<int> free_;
  std::atomic<bool> stop_{false};
  Status error_;
  // Bytes received of segments not yet consumed, so progress moves as bytes arrive rather than
  // a whole segment at a time.
  std::atomic<uint64_t> received_unconsumed_{0};

  // Expert units: source bytes still to land, a generation bumped when a refetch invalidates
  // them, and checksums waiting to be journaled.
  std::mutex units_mu_;
  std::vector<int64_t> remaining_;
  std::vector<uint32_t> gen_;
  std::vector<int> pending_units_;
};

std::vector<int> UnitsOfShardImpl(const ShardLayout& s) {
  std::vector<int> units;
  for (const SinkSpan& sp : s.spans)
    if (sp.unit >= 0) units.push_back(sp.unit);
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  return units;
}

Status Streamer::Restore(const std::vector<ShardResume>& resume) {
  remaining_.assign(layout_.unit_source_bytes.begin(), layout_.unit_source_bytes.end());
  gen_.assign(remaining_.size(), 0);
  for (size_t s = 0; s < shards_.size(); ++s) {
    ShardState& sh = shards_[s];
    const ShardResume& r = resume[s];
    const uint64_t pos = r.done ? sh.lay->size : r.pos;
    if (pos > sh.lay->size)
      return Error(ErrorCode::kCorrupt, "journal: {} position {} beyond its size", sh.lay->file,
                   pos);
    sh.done = r.done;
    sh.done_journaled = r.done;
    sh.next_fetch = sh.processed = sh.cand_pos = sh.journaled_pos = pos;
    if (!r.done && pos > 0) {
      RW_ASSIGN_OR_RETURN(sh.sha, ResumableSha256::Load(r.sha_state));
      if (sh.sha.length() != pos)
        return Error(ErrorCode::kCorrupt, "journal: {} hash state covers {} bytes, not {}",
                     sh.lay->file, sh.sha.length(), pos);
      sh.cand_state = r.sha_state;
    }
    for (const SinkSpan& sp : sh.lay->spans) {
      if (sp.convert && pos > sp.begin && pos < sp.end && (pos - sp.begin) % sp.row_bytes != 0)
        return Error(ErrorCode::kCorrupt, "journal: {} position {} splits a row of '{}'",
                     sh.lay->file, pos, sp.tensor);
      if (sp.unit >= 0)
        remaining_[sp.unit] -= static_cast<int64_t>(std::clamp(pos, sp.begin, sp.end) - sp.begin);
    }
  }
  // Units complete on disk whose checksum the journal did not get to.
  for (size_t u = 0; u < remaining_.size(); ++u) {
    if (remaining_[u] == 0 && !(*unit_xxh3_)[u]) {
      uint64_t x;
      RW_RETURN_IF_ERROR(ChecksumUnit(static_cast<int>(u), &x));
      (*unit_xxh3_)[u] = x;
      pending_units_.push_back(static_cast<int>(u));
    }
  }
  return Status::Ok();
}

bool Streamer::AllDone() const {
  for (const ShardState& sh : shards_)
    if (!sh.done) return false;
  return true;
}

uint64_t Streamer::ProgressBytes() const {
  uint64_t n = 0, total = 0;
  for (const ShardState& sh : shards_) {
    n += sh.done ? sh.lay->size : sh.processed;
    total += sh.lay->size;
  }
  // Under mu_, where the counter and `processed` move together.
  return std::min(total, n + received_unconsumed_.load(std::memory_order_relaxed));
}

void Streamer::Fail(const Status& st) {
  // Under mu_. The first real error wins; cancellation caused by it is not news.
  if (error_.ok() || (error_.code() == ErrorCode::kCancelled && st.code() != ErrorCode::kCancelled))
    error_ = st;
  stop_ = true;
  cv_.notify_all();
}

Status Streamer::WriteAt(int file, const void* p, uint64_t n, uint64_t offset) {
  return WriteAllAt((*files_)[file], p, n, offset);
}

Status Streamer::ChecksumUnit(int unit, uint64_t* out) {
  thread_local std::vector<uint8_t> blob;
  const size_t li = static_cast<size_t>(unit / layout_.num_experts);
  const int e = unit % layout_.num_experts;
  const ExpertLayout& lay = layout_.expert_layers[li].layout;
  blob.resize(lay.stride);
  RW_RETURN_IF_ERROR((*files_)[1 + li].PreadExact(blob.data(), blob.size(),
                                                  lay.stride * static_cast<uint64_t>(e)));
  *out = Xxh3_64(blob.data(), blob.size());
  return Status::Ok();
}

Status Streamer::Delivered(int unit, uint64_t bytes) {
  if (unit < 0) return Status::Ok();
  uint32_t gen;
  {
    std::lock_guard<std::mutex> lock(units_mu_);
    remaining_[unit] -= static_cast<int64_t>(bytes);
    if (remaining_[unit] < 0)
      return Error(ErrorCode::kInternal, "expert unit {} received too many bytes", unit);
    if (remaining_[unit] != 0 || (*unit_xxh3_)[unit]) return Status::Ok();
    gen = gen_[unit];
  }
  // The blob's last part just landed: checksum it while it is in the page cache.
  uint64_t x;
  RW_RETURN_IF_ERROR(ChecksumUnit(unit, &x));
  std::lock_guard<std::mutex> lock(units_mu_);
  if (gen_[unit] == gen && remaining_[unit] == 0) {
    (*unit_xxh3_)[unit] = x;
    pending_units_.push_back(unit);
  }
  return Status::Ok();
}

Status Streamer::EmitRows(const SinkSpan& span, uint64_t row0, const uint8_t* p, uint64_t rows) {
  thread_local std::vector<uint8_t> data, scales, biases;
  thread_local RepackScratch scratch;
  TensorPlan sub = *span.plan;  // the same conversion, restricted to these rows
  sub.target.shape = {static_cast<int64_t>(rows), span.plan->target.cols()};
  sub.weight.row_begin = 0;
  sub.weight.rows = static_cast<int64_t>(rows);
  sub.weight.expert_row_stride = 0;
  data.resize(sub.target.ExpectedDataBytes());
  scales.resize(span.scale_row * rows);
  biases.resize(span.scale_row * rows);
  MemoryReader reader(p, rows * span.row_bytes);
  {
    std::lock_guard<std::mutex> lock(g_convert_mu);
    RW_RETURN_IF_ERROR(
        RepackTensor(sub, -1, reader, data.data(), scales.data(), biases.data(), &scratch));
  }
  RW_RETURN_IF_ERROR(
      WriteAt(span.file, data.data(), data.size(), span.data_off + row0 * span.data_row));
  if (span.scale_row > 0) {
    RW_RETURN_IF_ERROR(
        WriteAt(span.file, scales.data(), scales.size(), span.scales_off + row0 * span.scale_row));
    RW_RETURN_IF_ERROR(
        WriteAt(span.file, biases.data(), biases.size(), span.biases_off + row0 * span.scale_row));
  }
  return Delivered(span.unit, rows * span.row_bytes);
}

Status Streamer::Scatter(ShardState& sh, uint64_t start, const uint8_t* p, uint64_t n) {
  const std::vector<SinkSpan>& spans = sh.lay->spans;
  const uint64_t end = start + n;
  auto it = std::upper_bound(spans.begin(), spans.end(), start,
                             [](uint64_t v, const SinkSpan& s) { return v < s.end; });
  for (; it != spans.end() && it->begin < end; ++it) {
    const SinkSpan& s = *it;
    const uint64_t a = std::max(s.begin, start), b = std::min(s.end, end);
    const uint8_t* src = p + (a - start);
    if (!s.convert) {
      RW_RETURN_IF_ERROR(WriteAt(s.file, src, b - a, s.offset + (a - s.begin)));
      RW_RETURN_IF_ERROR(Delivered(s.unit, b - a));
      continue;
    }
    // Converting: whole rows go straight from the segment; a row split across segments is
    // completed in the span's carry buffer.
    std::vector<uint8_t>& carry = sh.carry[static_cast<size_t>(it - spans.begin())];
    uint64_t pos = a;
    if (!carry.empty()) {
      const uint64_t take = std::min<uint64_t>(s.row_bytes - carry.size(), b - pos);
      carry.insert(carry.end(), src, src + take);
      pos += take;
      src += take;
      if (carry.size() == s.row_bytes) {
        RW_RETURN_IF_ERROR(EmitRows(s, (pos - s.begin) / s.row_bytes - 1, carry.data(), 1));
        carry.clear();
      }
    }
    const uint64_t rows = (b - pos) / s.row_bytes;
    if (rows > 0) {
      RW_RETURN_IF_ERROR(EmitRows(s, (pos - s.begin) / s.row_bytes, src, rows));
      pos += rows * s.row_bytes;
      src += rows * s.row_bytes;
    }
    if (pos < b) carry.assign(src, src + (b - pos));
  }
  return Status::Ok();
}

Status Streamer::Consume(ShardState& sh, const Segment& seg, Cut* cut) {
  const uint8_t* p = pool_[seg.buf].data();
  const uint64_t start = seg.start, end = seg.start + seg.len;
  // The checkpoint of this segment: its end, or for a converting span still open at the end,
  // the start of its last (partial) row, so a resume starts on a row boundary.
  cut->pos = end;
  const auto& spans = sh.lay->spans;
  auto it = std::upper_bound(spans.begin(), spans.end(), end - 1,
                             [](uint64_t v, const SinkSpan& s) { return v < s.end; });
  if (it != spans.end() && it->begin <= end - 1 && it->convert && end < it->end)
    cut->pos = end - (end - it->begin) % it->row_bytes;
  cut->valid = cut->pos >= start;
  if (cut->valid) {
    sh.sha.Update(p, cut->pos - start);
    cut->state = sh.sha.Save();
    sh.sha.Update(p + (cut->pos - start), end - cut->pos);
  } else {
    sh.sha.Update(p, seg.len);
  }
  sh.digests[start] = {seg.len, Xxh3_64(p, seg.len)};
  const std::string& header = sh.lay->header;
  if (start < header.size()) {
    const uint64_t n = std::min<uint64_t>(header.size(), end) - start;
    if (std::memcmp(header.data() + start, p, n) != 0) sh.header_differs = true;
  }
  return Scatter(sh, start, p, seg.len);
}

Status Streamer::FinishShard(size_t s) {
  ShardState& sh = shards_[s];
  const std::string got = sh.sha.DigestHex();
  if (got == sh.lay->sha256) {
    if (sh.header_differs)
      return Error(ErrorCode::kCorrupt,
                   "{}: the safetensors header fetched for planning (bytes 0-{}) differs from the "
                   "verified shard; run again with --resume",
                   sh.lay->file, sh.lay->header.size() - 1);
    sh.done = true;
    RW_LOG_DEBUG("{}: SHA-256 verified ({} bytes)", sh.lay->file, sh.lay->size);
    return Status::Ok();
  }
  // Name what differed between this fetch and the previous one, where both saw the bytes.
  std::string differ;
  int listed = 0;
  for (const auto& [start, d] : sh.digests) {
    auto prev = sh.prev_digests.find(start);
    if (prev == sh.prev_digests.end() || prev->second == d) continue;
    if (listed++ < 4)
      differ += fmt::format("{}{}-{}", differ.empty() ? "" : ", ", start, start + d.first - 1);
  }
  if (listed > 4) differ += fmt::format(" and {} more", listed - 4);
  std::string what = fmt::format("{}: SHA-256 mismatch over bytes 0-{} (expected {}, got {})",
                                 sh.lay->file, sh.lay->size - 1, sh.lay->sha256, got);
  if (sh.attempt >= opt_.hash_attempts) {
    std::string detail =
        sh.prev_digests.empty() ? ""
        : differ.empty()
            ? "; the same bytes arrived on every fetch: the server's file does not match its "
              "LFS SHA-256"
            : "; bytes that differed between fetches: " + differ;
    return Error(ErrorCode::kCorrupt,
                 "{} after {} fetch(es){}. Other shards are kept; run again with --resume to "
                 "refetch this one",
                 what, sh.attempt, detail);
  }
  RW_LOG_WARN("{}; fetching the shard again (attempt {}/{})", what, sh.attempt + 1,
              opt_.hash_attempts);
  // Start the shard over: its targets are rewritten, and expert checksums that used its bytes are
  // void until they land again.
  sh.attempt++;
  sh.prev_digests = std::move(sh.digests);
  sh.digests.clear();
  sh.next_fetch = sh.processed = 0;
  sh.header_differs = false;
  sh.sha.Reset();
  for (auto& c : sh.carry) c.clear();
  sh.cand_pos = 0;
  sh.cand_state.clear();
  sh.reset_seq++;
  std::lock_guard<std::mutex> lock(units_mu_);
  for (int u : UnitsOfShardImpl(*sh.lay)) {
    gen_[u]++;
    (*unit_xxh3_)[u].reset();
    pending_units_.erase(std::remove(pending_units_.begin(), pending_units_.end(), u),
                         pending_units_.end());
  }
  for (const SinkSpan& sp : sh.lay->spans)
    if (sp.unit >= 0) remaining_[sp.unit] += static_cast<int64_t>(sp.end - sp.begin);
  cv_.notify_all();
  return Status::Ok();
}

void Streamer::Worker() {
  HttpOptions hopt = opt_.http;
  hopt.cancel = &stop_;
  HttpConnection conn(hopt, stats_);
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    size_t pick = SIZE_MAX;
    cv_.wait(lk, [&] {
      pick = SIZE_MAX;
      if (stop_ || AllDone()) return true;
      if (free_.empty()) return false;
      int best = INT32_MAX;
      for (size_t s = 0; s < shards_.size(); ++s) {
        const ShardState& sh = shards_[s];
        int load = sh.inflight + static_cast<int>(sh.ready.size());
        if (!sh.done && sh.next_fetch < sh.lay->size && load < best) {
          best = load;
          pick = s;
        }
      }
      return pick != SIZE_MAX;
    });
    if (stop_ || AllDone()) return;
    ShardState& sh = shards_[pick];
    Segment seg;
    seg.start = sh.next_fetch;
    seg.len = std::min(opt_.segment_bytes, sh.lay->size - sh.next_fetch);
    seg.buf = free_.back();
    free_.pop_back();
    sh.next_fetch += seg.len;
    sh.inflight++;
    lk.unlock();
    uint64_t received = 0;
    Status st = conn.FetchRange(sh.url, seg.start, seg.len, sh.lay->size, pool_[seg.buf].data(),
                                sh.lay->file, [this, &received](uint64_t n) {
                                  received += n;
                                  received_unconsumed_.fetch_add(n, std::memory_order_relaxed);
                                });
    lk.lock();
    sh.inflight--;
    if (!st.ok()) {
      received_unconsumed_.fetch_sub(received, std::memory_order_relaxed);
      free_.push_back(seg.buf);
      Fail(st);
      return;
    }
    sh.ready[seg.start] = seg;
    if (sh.processing) continue;  // the thread consuming this shard will pick it up
    sh.processing = true;
    while (!stop_ && !sh.ready.empty() && sh.ready.begin()->first == sh.processed) {
      Segment next = sh.ready.begin()->second;
      sh.ready.erase(sh.ready.begin());
      lk.unlock();
      Cut cut;
      Status cst = Consume(sh, next, &cut);
      lk.lock();
      free_.push_back(next.buf);
      received_unconsumed_.fetch_sub(next.len, std::memory_order_relaxed);
      cv_.notify_all();
      if (!cst.ok()) {
        Fail(cst.Annotate(
            fmt::format("{} bytes {}-{}", sh.lay->file, next.start, next.start + next.len - 1)));
        break;
      }
      sh.processed = next.start + next.len;
      if (cut.valid) {
        sh.cand_pos = cut.pos;
        sh.cand_state = std::move(cut.state);
      }
      if (sh.processed == sh.lay->size) {
        Status fst = FinishShard(static_cast<size_t>(&sh - shards_.data()));
        if (!fst.ok()) {
          Fail(fst);
          break;
        }
      }
    }
    sh.processing = false;
    cv_.notify_all();
  }
}

Status Streamer::Flush() {
  std::vector<Json> records;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (ShardState& sh : shards_) {
      if (sh.done && !sh.done_journaled) {
        records.push_back(
            Json{{"t", "shard_done"}, {"file", sh.lay->file}, {"sha256", sh.lay->sha256}});
        sh.done_journaled = true;
        sh.journaled_reset_seq = sh.reset_seq;
        continue;
      }
      if (sh.done) continue;
      const bool reset = sh.reset_seq != sh.journaled_reset_seq;
      if (sh.cand_pos == sh.journaled_pos && !reset) continue;
      Json r{{"t", "shard"}, {"file", sh.lay->file}, {"pos", sh.cand_pos}, {"sha", sh.cand_state}};
      if (reset) r["reset"] = true;
      records.push_back(std::move(r));
      sh.journaled_pos = sh.cand_pos;
      sh.journaled_reset_seq = sh.reset_seq;
    }
    std::lock_guard<std::mutex> ulock(units_mu_);
    for (int u : pending_units_)
      records.push_back(Json{{"t", "expert"}, {"unit", u}, {"xxh3", Hex64(*(*unit_xxh3_)[u])}});
    pending_units_.clear();
  }
  if (records.empty()) return Status::Ok();
  // Data first, then the records that describe it.
  for (File& f : *files_) RW_RETURN_IF_ERROR(f.Sync());
  for (const Json& r : records) journal_->Append(r);
  return journal_->Sync();
}

Status Streamer::Run(const StreamProgressFn& progress) {
  const int n_buf = opt_.connections + 2;
  pool_.resize(n_buf);
  for (int i = 0; i < n_buf; ++i) {
    pool_[i].resize(opt_.segment_bytes);
    free_.push_back(i);
  }
  uint64_t total = 0;
  for (const ShardState& sh : shards_) total += sh.lay->size;
  // A shard consumed to its end whose SHA-256 was not yet confirmed (a kill, or a mismatch, right
  // at the end): decide it now, since no segment is left to trigger the check.
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (!shards_[s].done && shards_[s].processed == shards_[s].lay->size) {
      std::lock_guard<std::mutex> lock(mu_);
      RW_RETURN_IF_ERROR(FinishShard(s));
    }
  }
  std::vector<std::thread> workers;
  for (int i = 0; i < opt_.connections; ++i) workers.emplace_back([this] { Worker(); });

  // The calling thread flushes checkpoints and reports progress until the workers finish.
  auto last_flush = std::chrono::steady_clock::now();
  Status flush_error;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(200));
      if (opt_.cancel && opt_.cancel->load() && !stop_)
        Fail(Error(ErrorCode::kCancelled, "interrupted"));
      if (stop_ || AllDone()) break;
    }
    if (progress) {
      uint64_t done;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done = ProgressBytes();
      }
      progress(done, total);
    }
    if (std::chrono::steady_clock::now() - last_flush >
        std::chrono::duration<double>(opt_.checkpoint_interval_s)) {
      flush_error = Flush();
      last_flush = std::chrono::steady_clock::now();
      if (!flush_error.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        Fail(flush_error);
        break;
      }
    }
  }
  for (std::thread& t : workers) t.join();
  // Whatever happened, journal what is durable so a rerun resumes from here.
  Status fst = Flush();
  if (progress) progress(ProgressBytes(), total);
  if (!error_.ok()) return error_;
  if (!fst.ok()) return fst;
  for (size_t u = 0; u < unit_xxh3_->size(); ++u)
    if (!(*unit_xxh3_)[u])
      return Error(ErrorCode::kInternal, "expert unit {} incomplete after all shards", u);
  return Status::Ok();
}

}  // namespace

Status WriteAllAt(const File& f, const void* p, uint64_t n, uint64_t offset) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(f.fd(), b + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == ENOSPC || errno == EDQUOT))
      return Error(ErrorCode::kResourceExhausted,
                   "{}: disk full writing {} bytes at offset {}; free some space", f.path(), n,
                   offset + done);
    if (r <= 0)
      return Error(ErrorCode::kIo, "{}: write at offset {}: {}", f.path(), offset + done,
                   r < 0 ? std::strerror(errno) : "no progress");
    done += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

std::vector<int> UnitsOfShard(const InstallLayout& layout, size_t shard) {
  return UnitsOfShardImpl(layout.shards[shard]);
}

Status StreamShards(const InstallLayout& layout, const std::vector<std::string>& urls,
                    std::vector<File>* files, Journal* journal,
                    const std::vector<ShardResume>& resume,
                    std::vector<std::optional<uint64_t>>* unit_xxh3, const StreamOptions& opt,
                    HttpStats* stats, const StreamProgressFn& progress) {
  unit_xxh3->resize(layout.unit_source_bytes.size());
  Streamer s(layout, urls, files, journal, opt, stats, unit_xxh3);
  RW_RETURN_IF_ERROR(s.Restore(resume));
  return s.Run(progress);
}

}  // namespace rw
