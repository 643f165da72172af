#include "install/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/hash.h"

namespace rw {

std::string JournalLine(const Json& record) {
  std::string text = record.dump();  // one line: dump() escapes control characters
  return Hex64(Xxh3_64(text.data(), text.size())) + " " + text + "\n";
}

Result<Journal> Journal::Open(const std::string& path, std::vector<Json>* records,
                              bool* dropped_tail) {
  records->clear();
  if (dropped_tail) *dropped_tail = false;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return Error(ErrorCode::kIo, "{}: cannot open journal: {}", path, std::strerror(errno));
  Journal j;
  j.file_ = File(fd, path);
  RW_ASSIGN_OR_RETURN(uint64_t size, j.file_.Size());
  std::string text(size, '\0');
  if (size > 0) RW_RETURN_IF_ERROR(j.file_.PreadExact(text.data(), size, 0));
  uint64_t good = 0;
  while (good < size) {
    size_t nl = text.find('\n', good);
    if (nl == std::string::npos || nl - good < 18 || text[good + 16] != ' ') break;
    std::string json = text.substr(good + 17, nl - good - 17);
    auto want = ParseHex64(text.substr(good, 16));
    if (!want.ok() || *want != Xxh3_64(json.data(), json.size())) break;
    auto parsed = ParseJson(json, path);
    if (!parsed.ok() || !parsed->is_object()) break;
    records->push_back(std::move(*parsed));
    good = nl + 1;
  }
  if (good < size) {
    if (dropped_tail) *dropped_tail = true;
    RW_RETURN_IF_ERROR(j.file_.Truncate(good));
    RW_RETURN_IF_ERROR(j.file_.Sync());
  }
  j.end_ = good;
  return j;
}

void Journal::Append(const Json& record) {
  pending_ += JournalLine(record);
}

Status Journal::Sync() {
  if (!pending_.empty()) {
    RW_RETURN_IF_ERROR(file_.PwriteAll(pending_.data(), pending_.size(), end_));
    end_ += pending_.size();
    pending_.clear();
  }
  if (::fdatasync(file_.fd()) != 0)
    return Error(ErrorCode::kIo, "{}: fdatasync: {}", file_.path(), std::strerror(errno));
  return Status::Ok();
}

}  // namespace rw
