#include "base/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

#include "base/file.h"

namespace rw::trace {
namespace internal {
std::atomic<bool> g_enabled{false};
}  // namespace internal

namespace {

struct Event {
  const char* name;
  const char* category;
  const char* arg_name;
  int64_t begin, end;  // end < 0: an instant
  int64_t arg;
};

struct ThreadBuffer {
  std::mutex mu;
  std::vector<Event> events;
  std::string name;
  int tid = 0;
  long os_tid = 0;
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers;
  std::atomic<int64_t> t0{0};
  std::atomic<uint64_t> count{0}, dropped{0};
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

}  // namespace

namespace internal {
void Record(const char* name, const char* category, int64_t begin_ns, int64_t end_ns,
            const char* arg_name, int64_t arg_value) {
  Registry& r = Reg();
  if (r.count.fetch_add(1, std::memory_order_relaxed) >= kMaxEvents) {
    r.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ThreadBuffer& b = Local();
  std::lock_guard<std::mutex> lock(b.mu);
  b.events.push_back(Event{name, category, arg_name, begin_ns, end_ns, arg_value});
}
}  // namespace internal

void Start() {
  Registry& r = Reg();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& b : r.buffers) {
      std::lock_guard<std::mutex> bl(b->mu);
      b->events.clear();
    }
    r.count.store(0, std::memory_order_relaxed);
    r.dropped.store(0, std::memory_order_relaxed);
    r.t0.store(NowNanos(), std::memory_order_relaxed);
  }
  internal::g_enabled.store(true, std::memory_order_release);
}

void Stop() {
  internal::g_enabled.store(false, std::memory_order_release);
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

std::string ToJson() {
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
      fmt::format_to(emit, " (os tid {})", b->os_tid);
    }
    fmt::format_to(emit, "\"}}}}");
    fmt::format_to(emit,
                   ",\n{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{},\"tid\":{},"
                   "\"args\":{{\"sort_index\":{}}}}}",
                   pid, b->tid, b->tid);
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
      if (e.arg_name != nullptr) {
        out.append(std::string_view(",\"args\":{\""));
        AppendEscaped(out, e.arg_name);
        fmt::format_to(emit, "\":{}}}", e.arg);
      }
      out.push_back('}');
    }
  }
  fmt::format_to(emit,
                 "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"clock\":\"steady_clock, "
                 "microseconds since trace start\",\"events\":{},\"dropped_events\":{}}}}}\n",
                 std::min<uint64_t>(r.count.load(), kMaxEvents), r.dropped.load());
  return fmt::to_string(out);
}

Status WriteJson(const std::string& path) {
  return WriteFileAtomic(path, ToJson());
}

}  // namespace rw::trace
