// Finding the program a job runs: WORKER as typed on the command line, resolved to an executable
// file the way a shell would, except that the project's own programs next to `launch` come first.
#pragma once

#include <stdexcept>
#include <string>

#include "env/contract.h"

namespace ddl::launcher {

// WORKER does not name an executable file. `launch` exits 127 (like a shell).
class WorkerNotFoundError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Resolves WORKER: a name containing '/' is a path; a bare name is looked up first in
// `launcher_dir` (the project's own programs sit next to `launch`), then in each PATH entry of
// `env`. Returns an absolute or as-given path to an executable regular file, or throws
// WorkerNotFoundError saying where it looked.
std::string find_worker(const std::string& worker, const std::string& launcher_dir,
                        const env::EnvMap& env);

// The directory holding the running executable (from /proc/self/exe); empty if unknown.
std::string launcher_directory();

}  // namespace ddl::launcher
