// Logging for every program of the project: spdlog with the role (launcher or rank) and host in
// every line, and one parser for the level names users type.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddl::logging {

// Parses debug|info|warn|warning|error (any case) or Paddle's numeric levels 10|20|30|40.
// Throws std::invalid_argument quoting the text.
spdlog::level::level_enum parse_level(std::string_view text);

// Python's (and Paddle's) number for a level: 10 debug, 20 info, 30 warn, 40 error, 50 critical
// (trace: 5, off: 0 -- Python has neither).
int paddle_level(spdlog::level::level_enum level);

// Makes the process's default logger write to stderr as
//   "[2026-12-02 13:00:00.123] [info] [host rank 3] message"
// `role` is "launch" for the launcher and "rank N" for a worker.
void init(std::string_view role, spdlog::level::level_enum level);

// The role string for a worker of global rank `rank`.
std::string rank_role(int rank);

// While it lives, every line the default logger writes (at its level) is also appended to the
// file `path`, in the same format. Throws spdlog::spdlog_ex when the file cannot be opened. Make
// it before other threads log and let it go after they stopped: the logger's sinks are not
// guarded against concurrent changes.
class FileCopy {
 public:
  explicit FileCopy(const std::string& path);
  ~FileCopy();
  FileCopy(const FileCopy&) = delete;
  FileCopy& operator=(const FileCopy&) = delete;

 private:
  std::shared_ptr<spdlog::sinks::sink> sink_;
};

}  // namespace ddl::logging
