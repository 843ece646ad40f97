// Files read or named on a user's behalf: the one way the launcher and the runtime read a file a
// flag or variable names (a rank mapping, a worker's error file), and the one way a job id
// becomes a file name.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "env/error.h"

namespace ddl::env {

// A file that cannot be read as asked; the message names the flag or variable, the path, what
// is wrong and what was expected. Exit code kExitUsage: it is the caller's input.
class FileError : public Error {
 public:
  explicit FileError(const std::string& what) : Error(kExitUsage, "", what) {}
};

// Whether a symbolic link at the path itself is followed (links in the folders above it are).
enum class FileLinks { kFollow, kRefuse };

// The whole text of the regular file at `path`, at most `max_bytes` long. Refuses, with
// FileError "<what>='<path>': <problem>; expected a regular file of at most <max_bytes>":
// a path that cannot be opened; anything but a regular file (a FIFO, a device such as /dev/zero,
// a directory, a socket), checked before opening and again on the open descriptor, which is
// opened non-blocking so that a FIFO without a writer cannot hang the caller; a file larger than
// `max_bytes`, or one that grows past it while being read (never more than max_bytes + 1 bytes
// are held); with FileLinks::kRefuse, a symbolic link.
std::string read_regular_file(const std::string& path, std::size_t max_bytes, std::string_view what,
                              FileLinks links = FileLinks::kFollow);

// "1 MiB", "64 KiB", "1000 bytes": a size cap as messages and docs state it.
std::string size_text(std::size_t bytes);

// Writes all of `data` to `fd`, retrying short writes and EINTR; false on error (EPIPE when the
// reader went away, ENOSPC on a full disk, ...).
bool write_all(int fd, const char* data, std::size_t size);

// An id (a job id from --job_id, PADDLE_JOB_ID, DDL_JOB_ID, ...) as one file name component,
// the id itself unchanged elsewhere (store and etcd keys keep it whole): every character outside
// [A-Za-z0-9._-] becomes '_', and a leading '.' becomes '_', so the result never contains '/',
// is never "." or "..", and never a hidden file; an empty id gives `if_empty`. Different ids can
// map to the same name ("a/b" and "a_b"). Used wherever a job id becomes part of a path.
std::string safe_file_name(std::string_view id, std::string_view if_empty);

}  // namespace ddl::env
