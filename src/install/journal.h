// The install journal: what an interrupted `redwing install` has durably finished, so --resume
// refetches only the rest.
//
// An append-only file of records, one per line: 16 hex digits of the XXH3-64 of the JSON text, a
// space, the JSON, '\n'. Records are appended only after the bytes they describe were fsync'd,
// and the journal is fsync'd after each batch. A kill -9 at any moment therefore leaves complete
// records of durable work plus at most one torn last line; Open() drops a line that fails its
// checksum (and everything after it) and truncates the file there, so the next append starts on a
// clean line. Interpreting the records is the installer's business.
#pragma once

#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"

namespace rw {

class Journal {
 public:
  Journal() = default;
  Journal(Journal&&) = default;
  Journal& operator=(Journal&&) = default;

  // Creates the file if missing; fills *records with every intact record in order.
  // *dropped_tail is set when a torn or damaged tail was cut off.
  static Result<Journal> Open(const std::string& path, std::vector<Json>* records,
                              bool* dropped_tail = nullptr);

  // Buffered until Sync().
  void Append(const Json& record);
  // Writes the buffered records and fdatasyncs the file.
  Status Sync();
  const std::string& path() const { return file_.path(); }

 private:
  File file_;
  uint64_t end_ = 0;
  std::string pending_;
};

// One journal line for `record` (checksum, space, JSON, newline).
std::string JournalLine(const Json& record);

}  // namespace rw
