// Finding the program a job runs: WORKER as typed on the command line, resolved to an executable
// file the way a shell would, except that the project's own programs next to `launch` come first.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/error.h"

namespace ddl::launcher {

// WORKER does not name an executable file. `launch` exits 127 (like a shell).
class WorkerNotFoundError : public Error {
 public:
  explicit WorkerNotFoundError(const std::string& what) : Error(kExitNotFound, "", what) {}
};

// Resolves WORKER: a name containing '/' is a path; a bare name is looked up first in
// `launcher_dir` (the project's own programs sit next to `launch`), then in each PATH entry of
// `env`. Returns an absolute or as-given path to an executable regular file, or throws
// WorkerNotFoundError saying where it looked.
std::string find_worker(const std::string& worker, const std::string& launcher_dir,
                        const env::EnvMap& env);

// What the command line says about running WORKER (launcher/options/options.h).
struct WorkerChoice {
  std::string worker;                 // as typed
  bool module = false;                // -m: WORKER names a Python module
  bool no_python = false;             // --no_python: run WORKER itself, whatever its name
  bool run_path = false;              // --run_path: WORKER is a script, whatever its name
  std::optional<std::string> python;  // --python; default "python3"
};

// The process a worker is: `executable` with `args` before the worker's own arguments.
struct WorkerCommand {
  std::string executable;         // resolved path
  std::vector<std::string> args;  // {"-u", "train.py"} for a script, {} for a program
  bool python = false;            // run by the interpreter
};

// As torchrun and Paddle run scripts: a WORKER ending in ".py" (unless --no_python) runs as
// `PYTHON -u WORKER`, a module as `PYTHON -u -m WORKER`; the interpreter is resolved like a
// bare WORKER (PATH). Anything else is find_worker(). Throws WorkerNotFoundError for a script
// that does not exist or an interpreter that is not found, saying how to choose one.
WorkerCommand worker_command(const WorkerChoice& choice, const std::string& launcher_dir,
                             const env::EnvMap& env);

// The directory holding the running executable (from /proc/self/exe); empty if unknown.
std::string launcher_directory();

}  // namespace ddl::launcher
