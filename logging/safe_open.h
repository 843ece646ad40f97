// Opening the files the project writes (logs, stack dumps, checkpoints) so that a link or a
// special file planted under the file's name cannot redirect the write.
//
// The folder of `path` is opened as named (its own links are the user's choice: a --log_dir on a
// symlinked volume works) and the file is opened relative to that folder, never following a link
// as the file itself. A symbolic link (or a second hard link) found under the name is removed --
// removing the name, never its target -- and a fresh file is created in its place with O_EXCL, with
// a warning naming the path and where the link pointed. When the folder does not allow removing it
// (another user's link in a sticky /tmp), or anything but a regular file is there (a FIFO, a
// device, a folder), nothing is written and the error names the path. Every descriptor returned is
// close-on-exec, so no worker or tool started later inherits it.
#pragma once

#include <string>

namespace ddl::logging {

enum class WriteMode {
  kTruncate,  // start the file empty (a new job's worker log)
  kAppend,    // keep what is there and add at the end (stack dumps, a resumed job's logs)
};

// Opens `path` for writing as described above, creating it with `permissions` (before the umask)
// when absent. Returns the descriptor (O_WRONLY | O_CLOEXEC; O_APPEND in kAppend), or -1 with a
// one-line reason naming the path in `why`. Thread-safe; async-signal-unsafe (it may log).
int open_for_writing(const std::string& path, WriteMode mode, std::string& why,
                     unsigned permissions = 0644);

}  // namespace ddl::logging
