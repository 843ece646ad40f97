// Starting and watching the workers of this node.
//
// supervise() starts every worker in its own process group with its output on a pipe read by the
// launcher, and returns when the job is over:
// - output: with a log dir, rank N's stdout+stderr go to DIR/workerlog.N (truncated at the job's
//   start, appended to across restarts after a "==== restart K ====" line) and rank 0's lines are
//   echoed to stdout unless quiet; without one, every line goes to stdout as "[rank N] line", whole
//   lines only, so ranks never interleave within a line;
// - the first worker that exits non-zero or dies by a signal fails this start of the job ("a
//   generation"): SIGTERM to every worker's process group, SIGKILL after kill_timeout;
// - the hang guard (hang_timeout > 0) fails the generation the same way when no running worker has
//   written anything for hang_timeout; the job's exit code is then kHangExitCode;
// - a failed generation is restarted (all ranks, fresh processes, the generation factory asked for
//   new launches) while fewer than max_restarts restarts have happened; otherwise one summary is
//   printed with the failed rank's last lines and the job ends;
// - SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to every worker group and end the job (they
//   never cause a restart); a second one SIGKILLs the workers at once;
// - each worker has PR_SET_PDEATHSIG=SIGKILL, so a SIGKILLed launcher takes its workers along, and
//   a small watchdog process (forked per job) then SIGKILLs the workers' process groups, so their
//   children go too;
// - when the last worker of a generation is reaped, whatever is left in the workers' groups is
//   SIGKILLed.
// Single-threaded (one Boost.Asio io_context); call from the main thread, one job at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
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

// The launcher's exit code when the hang guard ended the job (as timeout(1)).
inline constexpr int kHangExitCode = 124;

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

// What ended this node's part of the job for good (no restart follows): reported to the other
// nodes of a multi-node job (launcher/coord/control.h).
struct FailureNotice {
  std::optional<int> rank;  // the failed worker's global rank; unset for the hang guard or a signal
  int exit_code = 1;        // what this launcher exits with
  std::string what;         // "rank 3 exited with code 7", "stopped by SIGINT", ...
};

// Stops a running job from another thread (a multi-node job's control thread, when another node
// failed). Thread-safe; only the first request counts. A request made before supervise() starts
// is acted on as soon as it does. The job then stops its workers like after a local failure
// (SIGTERM, SIGKILL after kill_timeout), never restarts, and ends with `exit_code`.
class ExternalStop {
 public:
  void request(int exit_code, const std::string& reason);
  std::optional<std::pair<int, std::string>> requested() const;

  // For the supervisor: `wake` is called (under the lock) on a request, until cleared.
  void set_waker(std::function<void()> wake);

 private:
  mutable std::mutex mutex_;
  std::optional<std::pair<int, std::string>> request_;
  std::function<void()> wake_;
};

struct SupervisorOptions {
  std::optional<std::string> log_dir;  // created if missing
  bool quiet = false;
  std::chrono::milliseconds kill_timeout{10'000};  // SIGTERM -> SIGKILL grace
  int max_restarts = 0;  // restarts after a failed generation (worker failure or hang guard)
  std::chrono::milliseconds hang_timeout{0};  // no output from any running rank this long: fail
                                              // the generation; 0 turns the hang guard off
  // Called once, on the supervisor's thread, as soon as the job is known to end failed on this
  // node: a worker failure or hang with no restart left, or an interrupt. Not called for a stop
  // requested through `external_stop`. May be empty.
  std::function<void(const FailureNotice&)> on_failure;
  // Lets another thread stop the job (see ExternalStop). May be null.
  std::shared_ptr<ExternalStop> external_stop;
};

struct JobOutcome {
  // 0 when the last generation succeeded; else its first failed worker's code (128+signal when
  // killed), kHangExitCode when the hang guard ended it, 128+signal when the launcher was
  // interrupted (a failure seen before the interrupt wins), 1 when a worker could not be started.
  int exit_code = 0;
  std::optional<int> failed_rank;       // the last generation's first failed worker, if any
  std::optional<int> interrupt_signal;  // the signal that stopped the launcher, if any
  bool hang = false;                    // the hang guard ended the last generation
  std::optional<std::string> external_stop;  // the reason, when ExternalStop ended the job
  int restarts = 0;                     // how many times the workers were started again
};

// The workers of one start of the job: `restart_count` is 0 for the first start, then 1, 2, ...
// Called once per start, before anything of that start runs; every call must return the same
// ranks in the same order (they name the log files). An exception thrown for restart_count 0
// leaves supervise() (nothing has started); a later one ends the job with the previous failure.
using GenerationFactory = std::function<std::vector<WorkerLaunch>(int restart_count)>;

// Runs the job to the end (see the header comment). Throws SupervisorError when the log dir
// cannot be created or a log file cannot be opened (nothing has started then). A worker that
// cannot be spawned stops the others, is not restarted, and yields exit code 1.
JobOutcome supervise(const GenerationFactory& make_generation, const SupervisorOptions& options);

// The same, starting `workers` unchanged on every start.
JobOutcome supervise(const std::vector<WorkerLaunch>& workers, const SupervisorOptions& options);

// "SIGTERM", "SIGKILL", ... ("signal 42" for others).
std::string signal_name(int signo);

}  // namespace ddl::launcher
