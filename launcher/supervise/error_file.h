// torchrun's error files: a worker whose entry point is decorated with
// torch.distributed.elastic.multiprocessing.errors.record writes the exception it died of, as
// JSON, to the path in TORCHELASTIC_ERROR_FILE. The supervisor removes a stale file before it
// starts a worker and quotes the message in its summary when the worker fails.
#pragma once

#include <optional>
#include <string>

namespace ddl::launcher {

// The exception a failed worker recorded in `path` ("RuntimeError: rank 1 fails on purpose"),
// from {"message": {"message": "..."}} or {"message": "..."}; only its first line, at most 300
// characters. std::nullopt when the file is absent, unreadable, not in that shape, or not a regular
// file (a symbolic link under its name is not followed).
std::optional<std::string> read_error_message(const std::string& path);

// Removes `path` if it exists, so that a message found later is the new process's own. Returns
// false (and leaves `why` set) when it exists and cannot be removed.
bool remove_error_file(const std::string& path, std::string& why);

}  // namespace ddl::launcher
