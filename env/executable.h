// Finding a program the way execvp(3) would: the one PATH search of the project (the launcher's
// WORKER, the stack-dump tools).
#pragma once

#include <optional>
#include <string>

namespace ddl::env {

// True for a regular file this process may execute.
bool is_executable_file(const std::string& path);

// The first `dir/name` over the ':'-separated `path` (an empty entry is the current directory)
// that is an executable file; nullopt when none is, or `name` is empty.
std::optional<std::string> find_on_path(const std::string& name, const std::string& path);

}  // namespace ddl::env
