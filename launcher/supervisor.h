// Starting and watching the workers of this node.
//
// supervise() starts every worker in its own process group with its output on a pipe read by the
// launcher, and returns when all of them have been reaped:
// - output: with a log dir, rank N's stdout+stderr go to DIR/workerlog.N (truncated at start) and
//   rank 0's lines are echoed to stdout unless quiet; without one, every line goes to stdout as
//   "[rank N] line", whole lines only, so ranks never interleave within a line;
// - the first worker that exits non-zero or dies by a signal stops the job: SIGTERM to every
//   worker's process group, SIGKILL after kill_timeout, then one summary with its last lines;
// - SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to every worker group; a second one
//   SIGKILLs them at once;
// - each worker has PR_SET_PDEATHSIG=SIGKILL, so a SIGKILLed launcher takes its workers along, and
//   a small watchdog process (forked per job) then SIGKILLs the workers' process groups, so their
//   children go too;
// - when the last worker is reaped, whatever is left in the workers' groups is SIGKILLed.
// Single-threaded (one Boost.Asio io_context); call from the main thread, one job at a time.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/contract.h"

namespace ddl::launcher {

// The job could not be set up (log dir not creatable, a worker could not be started, ...).
class SupervisorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// WORKER does not name an executable file. `launch` exits 127 (like a shell).
class WorkerNotFoundError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Lines of a failed worker's output repeated in the failure summary.
inline constexpr int kSummaryTailLines = 10;

// Resolves WORKER: a name containing '/' is a path; a bare name is looked up first in
// `launcher_dir` (the project's own programs sit next to `launch`), then in each PATH entry of
// `env`. Returns an absolute or as-given path to an executable regular file, or throws
// WorkerNotFoundError saying where it looked.
std::string find_worker(const std::string& worker, const std::string& launcher_dir,
                        const env::EnvMap& env);

// The directory holding the running executable (from /proc/self/exe); empty if unknown.
std::string launcher_directory();

struct WorkerLaunch {
  int rank = 0;                   // global rank: names the log file and the console prefix
  std::string executable;         // resolved path
  std::vector<std::string> args;  // argv[1..]
  env::EnvMap env;                // the worker's whole environment
};

struct SupervisorOptions {
  std::optional<std::string> log_dir;  // created if missing
  bool quiet = false;
  std::chrono::milliseconds kill_timeout{10'000};  // SIGTERM -> SIGKILL grace
};

struct JobOutcome {
  int exit_code = 0;                    // 0, the first failed worker's code, or 128+signal
  std::optional<int> failed_rank;       // the first worker that failed, if any
  std::optional<int> interrupt_signal;  // the signal that stopped the launcher, if any
};

// Runs the job to the end (see the header comment). Throws SupervisorError when the log dir
// cannot be created or a log file cannot be opened (nothing has started then). A worker that
// cannot be spawned stops the others and yields exit code 1.
JobOutcome supervise(const std::vector<WorkerLaunch>& workers, const SupervisorOptions& options);

// "SIGTERM", "SIGKILL", ... ("signal 42" for others).
std::string signal_name(int signo);

}  // namespace ddl::launcher
