#include "base/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/file.h"
#include "base/json.h"

namespace rw::trace {
namespace internal {
std::atomic<unsigned> g_mode{0};
}  // namespace internal

namespace {

struct Event {
  const char* name;
  const char* category;
  internal::Args args;
  int64_t begin, end;  // end < 0: an instant
};

// The profile's sums, keyed by the literals' addresses (merged by text when written).
struct AggKey {
  const char* name;
  const char* category;
  int64_t layer;  // -1: none
  bool operator==(const AggKey& o) const {
    return name == o.name && category == o.category && layer == o.layer;
  }
};
struct AggKeyHash {
  size_t operator()(const AggKey& k) const {
    return std::hash<const void*>()(k.name) * 31 + std::hash<const void*>()(k.category) * 7 +
           static_cast<size_t>(k.layer);
  }
};
struct Agg {
  uint64_t count = 0;
  int64_t total_ns = 0, max_ns = 0;
};

struct ThreadBuffer {
  std::mutex mu;
  std::vector<Event> events;
  std::unordered_map<AggKey, Agg, AggKeyHash> sums;
  std::string name;
  int tid = 0;
  long os_tid = 0;  // 0: a track, not a thread
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  std::map<std::string, ThreadBuffer*> tracks;
  std::atomic<int64_t> t0{0}, stop_ns{0}, profile_t0{0};
  std::atomic<uint64_t> count{0}, dropped{0};
  std::mutex intern_mu;
  std::unordered_set<std::string> interned;
  std::mutex hooks_mu;
  std::vector<std::function<void()>> hooks;
  std::map<std::string, std::string> notes;  // under mu
};

// Never destroyed, so threads still tracing during exit find it.
Registry& Reg() {
  static Registry* r = new Registry;
  return *r;
}

ThreadBuffer& Local() {
  thread_local ThreadBuffer* buffer = nullptr;
  if (buffer == nullptr) {
    auto b = std::make_unique<ThreadBuffer>();
    b->os_tid = static_cast<long>(::syscall(SYS_gettid));
    Registry& r = Reg();
    std::lock_guard<std::mutex> lock(r.mu);
    b->tid = static_cast<int>(r.buffers.size()) + 1;
    buffer = b.get();
    r.buffers.push_back(std::move(b));
  }
  return *buffer;
}

bool IsLayer(const char* arg_name) {
  return arg_name != nullptr && arg_name[0] == 'l' && std::strcmp(arg_name, "layer") == 0;
}

void RecordInto(ThreadBuffer& b, unsigned mode, const char* name, const char* category,
                int64_t begin_ns, int64_t end_ns, const internal::Args& args) {
  Registry& r = Reg();
  const bool keep_event =
      (mode & kEvents) != 0 && r.count.fetch_add(1, std::memory_order_relaxed) < kMaxEvents;
  if ((mode & kEvents) != 0 && !keep_event) r.dropped.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(b.mu);
  if (keep_event) b.events.push_back(Event{name, category, args, begin_ns, end_ns});
  if ((mode & kProfile) != 0) {
    Agg& a = b.sums[AggKey{name, category, IsLayer(args.name1) ? args.value1 : -1}];
    const int64_t d = end_ns < 0 ? 0 : std::max<int64_t>(0, end_ns - begin_ns);
    ++a.count;
    a.total_ns += d;
    a.max_ns = std::max(a.max_ns, d);
  }
}

void AppendEscaped(fmt::memory_buffer& out, const char* s) {
  for (const char* p = s; *p != '\0'; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
}

void AppendArg(fmt::memory_buffer& out, const char* name, int64_t value) {
  out.push_back('"');
  AppendEscaped(out, name);
  fmt::format_to(std::back_inserter(out), "\":{}", value);
}

}  // namespace

namespace internal {
void Record(const char* name, const char* category, int64_t begin_ns, int64_t end_ns,
            const Args& args) {
  const unsigned mode = g_mode.load(std::memory_order_relaxed);
  if (mode == 0) return;
  RecordInto(Local(), mode, name, category, begin_ns, end_ns, args);
}
}  // namespace internal

void Start(unsigned mode) {
  Registry& r = Reg();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& b : r.buffers) {
      std::lock_guard<std::mutex> bl(b->mu);
      b->events.clear();
      b->sums.clear();
    }
    r.count.store(0, std::memory_order_relaxed);
    r.dropped.store(0, std::memory_order_relaxed);
    const int64_t now = NowNanos();
    r.t0.store(now, std::memory_order_relaxed);
    r.profile_t0.store(now, std::memory_order_relaxed);
    r.stop_ns.store(0, std::memory_order_relaxed);
  }
  internal::g_mode.store(mode & (kEvents | kProfile), std::memory_order_release);
}

void Stop() {
  if (!Enabled()) return;
  Flush();  // late sources deliver while recording is still on
  Reg().stop_ns.store(NowNanos(), std::memory_order_relaxed);
  internal::g_mode.store(0, std::memory_order_release);
}

uint64_t EventCount() {
  const Registry& r = Reg();
  return std::min<uint64_t>(r.count.load(std::memory_order_relaxed), kMaxEvents);
}

uint64_t DroppedCount() {
  return Reg().dropped.load(std::memory_order_relaxed);
}

void SetThreadName(const std::string& name) {
  ThreadBuffer& b = Local();
  std::lock_guard<std::mutex> lock(b.mu);
  b.name = name;
}

int Track(const std::string& name) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.tracks.find(name);
  if (it != r.tracks.end()) return it->second->tid;
  auto b = std::make_unique<ThreadBuffer>();
  b->name = name;
  b->tid = static_cast<int>(r.buffers.size()) + 1;
  r.tracks[name] = b.get();
  r.buffers.push_back(std::move(b));
  return r.buffers.back()->tid;
}

const char* Intern(std::string_view s) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.intern_mu);
  return r.interned.emplace(s).first->c_str();
}

void CompleteOnTrack(int track, const char* name, const char* category, int64_t begin_ns,
                     int64_t end_ns, const char* arg_name, int64_t arg_value, const char* arg2_name,
                     int64_t arg2_value) {
  const unsigned mode = CurrentMode();
  if (mode == 0) return;
  Registry& r = Reg();
  ThreadBuffer* b = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (track < 1 || track > static_cast<int>(r.buffers.size())) return;
    b = r.buffers[static_cast<size_t>(track - 1)].get();
  }
  RecordInto(*b, mode, name, category, begin_ns, end_ns,
             {arg_name, arg_value, arg2_name, arg2_value});
}

void AddToProfile(const char* name, const char* category, int64_t layer, int64_t ns) {
  if ((CurrentMode() & kProfile) == 0) return;
  ThreadBuffer& b = Local();
  std::lock_guard<std::mutex> lock(b.mu);
  Agg& a = b.sums[AggKey{name, category, layer < 0 ? -1 : layer}];
  ++a.count;
  a.total_ns += std::max<int64_t>(0, ns);
  a.max_ns = std::max(a.max_ns, ns);
}

void AddFlushHook(std::function<void()> hook) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.hooks_mu);
  r.hooks.push_back(std::move(hook));
}

void Flush() {
  Registry& r = Reg();
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(r.hooks_mu);
    hooks = r.hooks;
  }
  for (auto& h : hooks) h();
}

void SetNote(const std::string& key, const std::string& value) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  r.notes[key] = value;
}

std::string ToJson() {
  if (Enabled()) Flush();
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t t0 = r.t0.load(std::memory_order_relaxed);
  const long pid = static_cast<long>(::getpid());
  fmt::memory_buffer out;
  auto emit = std::back_inserter(out);
  fmt::format_to(emit, "{{\"traceEvents\":[\n");
  fmt::format_to(emit,
                 "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,"
                 "\"args\":{{\"name\":\"redwing\"}}}}",
                 pid);
  for (const auto& b : r.buffers) {
    std::lock_guard<std::mutex> bl(b->mu);
    fmt::format_to(emit, ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},", pid,
                   b->tid);
    fmt::format_to(emit, "\"args\":{{\"name\":\"");
    if (b->name.empty()) {
      fmt::format_to(emit, "thread {} (os tid {})", b->tid, b->os_tid);
    } else {
      AppendEscaped(out, b->name.c_str());
      if (b->os_tid != 0) fmt::format_to(emit, " (os tid {})", b->os_tid);
    }
    fmt::format_to(emit, "\"}}}}");
    // Tracks (GPU streams) below the threads.
    fmt::format_to(emit,
                   ",\n{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{},\"tid\":{},"
                   "\"args\":{{\"sort_index\":{}}}}}",
                   pid, b->tid, b->os_tid != 0 ? b->tid : 1000 + b->tid);
    for (const Event& e : b->events) {
      if (e.begin < t0) continue;  // begun before this Start
      out.append(std::string_view(",\n{\"name\":\""));
      AppendEscaped(out, e.name);
      out.append(std::string_view("\",\"cat\":\""));
      AppendEscaped(out, e.category);
      const double ts = static_cast<double>(e.begin - t0) * 1e-3;
      if (e.end < 0) {
        fmt::format_to(emit, "\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{:.3f}", ts);
      } else {
        const double dur = static_cast<double>(std::max<int64_t>(0, e.end - e.begin)) * 1e-3;
        fmt::format_to(emit, "\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f}", ts, dur);
      }
      fmt::format_to(emit, ",\"pid\":{},\"tid\":{}", pid, b->tid);
      if (e.args.name1 != nullptr) {
        out.append(std::string_view(",\"args\":{"));
        AppendArg(out, e.args.name1, e.args.value1);
        if (e.args.name2 != nullptr) {
          out.push_back(',');
          AppendArg(out, e.args.name2, e.args.value2);
        }
        out.push_back('}');
      }
      out.push_back('}');
    }
  }
  fmt::format_to(emit,
                 "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"clock\":\"steady_clock, "
                 "microseconds since trace start\",\"events\":{},\"dropped_events\":{}",
                 std::min<uint64_t>(r.count.load(), kMaxEvents), r.dropped.load());
  for (const auto& [k, v] : r.notes) {
    out.append(std::string_view(",\""));
    AppendEscaped(out, k.c_str());
    out.append(std::string_view("\":\""));
    AppendEscaped(out, v.c_str());
    out.push_back('"');
  }
  fmt::format_to(emit, "}}}}\n");
  return fmt::to_string(out);
}

Status WriteJson(const std::string& path) {
  return WriteFileAtomic(path, ToJson());
}

namespace {

// The forward pass's parts as the profile's summary names them: (key, category, name); an empty
// category matches any.
struct SummaryPart {
  const char* key;
  const char* category;
  const char* name;
};
constexpr SummaryPart kSummary[] = {
    {"embed", "forward", "embed"},
    {"attention", "forward", "attention"},
    {"router", "forward", "route"},
    {"dense_mlp", "forward", "dense_mlp"},
    {"experts", "forward", "experts"},
    {"expert_compute", "experts", "expert"},
    {"expert_waits", "experts", "wait"},
    {"expert_reads", "io", "read"},
    {"head", "forward", "head"},
    {"sampling", "", "sample"},
    {"forward_calls", "cuda", "forward call"},
    {"layer_launches", "cuda", "layer"},
    {"host_syncs", "cuda", "host sync"},
    {"gpu_kernels", "gpu kernel", ""},
    {"gpu_copies", "gpu copy", ""},
    {"gpu_ops", "gpu op", ""},
};

struct Sum {
  uint64_t count = 0;
  int64_t total_ns = 0, max_ns = 0;
  void Add(const Agg& a) {
    count += a.count;
    total_ns += a.total_ns;
    max_ns = std::max(max_ns, a.max_ns);
  }
  Json ToJson() const {
    return {{"count", count},
            {"total_ms", static_cast<double>(total_ns) * 1e-6},
            {"mean_us", count > 0 ? static_cast<double>(total_ns) * 1e-3 / count : 0.0},
            {"max_us", static_cast<double>(max_ns) * 1e-3}};
  }
};

}  // namespace

std::string ProfileJson(const std::string& extra_json) {
  if (Enabled()) Flush();
  Registry& r = Reg();
  // (category, name) -> layer -> sum; layer -1 holds the spans without one.
  std::map<std::pair<std::string, std::string>, std::map<int64_t, Sum>> spans;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& b : r.buffers) {
      std::lock_guard<std::mutex> bl(b->mu);
      for (const auto& [k, a] : b->sums) spans[{k.category, k.name}][k.layer].Add(a);
    }
  }
  const int64_t stop = r.stop_ns.load(std::memory_order_relaxed);
  const int64_t end = stop > 0 ? stop : NowNanos();
  Json j = Json::object();
  j["format"] = "redwing-profile/1";
  j["wall_seconds"] =
      static_cast<double>(end - r.profile_t0.load(std::memory_order_relaxed)) * 1e-9;
  Json list = Json::array();
  int64_t max_layer = -1;
  for (const auto& [key, by_layer] : spans) {
    Sum all;
    Json layers = Json::array();
    for (const auto& [layer, s] : by_layer) {
      all.count += s.count;
      all.total_ns += s.total_ns;
      all.max_ns = std::max(all.max_ns, s.max_ns);
      if (layer >= 0) {
        Json lj = s.ToJson();
        lj["layer"] = layer;
        layers.push_back(lj);
        max_layer = std::max(max_layer, layer);
      }
    }
    Json sj = all.ToJson();
    sj["category"] = key.first;
    sj["name"] = key.second;
    sj["layers"] = layers.empty() ? Json(nullptr) : layers;
    list.push_back(sj);
  }
  j["spans"] = list;
  Json summary = Json::object();
  std::vector<std::vector<Sum>> per_layer(static_cast<size_t>(max_layer + 1),
                                          std::vector<Sum>(std::size(kSummary)));
  for (size_t p = 0; p < std::size(kSummary); ++p) {
    const SummaryPart& part = kSummary[p];
    Sum total;
    for (const auto& [key, by_layer] : spans) {
      if (part.category[0] != '\0' && key.first != part.category) continue;
      if (part.name[0] != '\0' && key.second != part.name) continue;
      for (const auto& [layer, s] : by_layer) {
        total.count += s.count;
        total.total_ns += s.total_ns;
        total.max_ns = std::max(total.max_ns, s.max_ns);
        if (layer >= 0) {
          Sum& l = per_layer[static_cast<size_t>(layer)][p];
          l.count += s.count;
          l.total_ns += s.total_ns;
          l.max_ns = std::max(l.max_ns, s.max_ns);
        }
      }
    }
    summary[part.key] = total.ToJson();
  }
  j["summary"] = summary;
  Json layers = Json::array();
  for (size_t li = 0; li < per_layer.size(); ++li) {
    Json lj = Json::object();
    lj["layer"] = li;
    for (size_t p = 0; p < std::size(kSummary); ++p)
      if (per_layer[li][p].count > 0)
        lj[std::string(kSummary[p].key) + "_ms"] =
            static_cast<double>(per_layer[li][p].total_ns) * 1e-6;
    layers.push_back(lj);
  }
  j["layers"] = layers;
  Json notes = Json::object();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [k, v] : r.notes) notes[k] = v;
  }
  j["notes"] = notes;
  auto extra = ParseJson(extra_json, "profile extra");
  if (extra.ok() && extra->is_object())
    for (auto it = extra->begin(); it != extra->end(); ++it) j[it.key()] = it.value();
  return j.dump(2) + "\n";
}

Status WriteProfile(const std::string& path, const std::string& extra_json) {
  return WriteFileAtomic(path, ProfileJson(extra_json));
}

void ResetProfile() {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& b : r.buffers) {
    std::lock_guard<std::mutex> bl(b->mu);
    b->sums.clear();
  }
  r.profile_t0.store(NowNanos(), std::memory_order_relaxed);
}

}  // namespace rw::trace
