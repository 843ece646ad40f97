// Starting and watching the processes of this node: the agent loop (supervisor.cpp) over a
// WorkerGroup (worker_group.h: spawn, reap, pipes, the stop sequence).
//
// supervise() starts every process in its own process group with its output on a pipe read by the
// launcher, and returns when the job is over:
// - each process has a role (trainer or server) and an index within it, which name its log file
//   and its messages: "rank 3" / workerlog.3 for a trainer, "server 1" / serverlog.1 for a server;
// - output (launcher/supervise/output.h): with a log dir, each process's stdout+stderr go to its
//   log file (truncated at the job's start, appended to across restarts after a "==== restart K
//   ====" line) and trainer 0's lines are echoed to stdout unless quiet; without one, every line
//   goes to stdout as "[rank N] line" / "[server N] line", whole lines only;
// - the first process that exits non-zero or dies by a signal fails this start of the job (a
//   generation, launcher/cluster/generation.h): every process is stopped (launcher/supervise/
//   group_stop.h: SIGTERM to every group, SIGKILL after kill_timeout);
// - the hang guard (hang_timeout > 0) fails the generation the same way when no running process
//   has written anything for hang_timeout; the pace guard (pace_guard.h) when a rank that reports
//   its steps stops finishing them at the job's pace, and it names stragglers;
// - after a failed generation the restart policy (launcher/supervise/restart_policy.h) decides:
//   restart (every process, fresh, the generation factory asked for new workers) or stop with an
//   exit code; stopping after a failure prints one summary with the failed process's last lines;
// - SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to every process group and end the job
//   (never a restart); a second one SIGKILLs the processes at once;
// - each process has PR_SET_PDEATHSIG=SIGKILL, so a SIGKILLed launcher takes its processes along,
//   and a watchdog process (launcher/supervise/watchdog.h) then SIGKILLs their process groups;
// - when the last process of a generation is reaped, whatever is left in the groups is SIGKILLed;
// - servers after the trainers (launcher/supervise/roles.h): once every trainer of a generation
//   has exited 0, servers (and heter workers) still running are stopped like above and the
//   generation still succeeds, as Paddle's launchers end their servers once the trainers are
//   done. Without server_grace they are stopped at once with Paddle's lines ("all workers exit,
//   going to finish parameter server", then "all parameter server are killed" once they are
//   gone); with it they first get server_grace to exit by themselves (the hang guard is off
//   meanwhile), then one line of ours. Only on a node that runs trainers: a node of servers alone
//   waits for them to exit. Servers that exit 0 while trainers run end nothing: the trainers
//   decide;
// - the run report and the stack dumps (SupervisorOptions::report, dump_stacks) watch the job as
//   observers (launcher/supervise/observers.h); how it ended is one Outcome (outcome.h).
// Single-threaded (one Boost.Asio io_context); call from the main thread, one job at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "env/contract.h"
#include "launcher/cluster/generation.h"
#include "launcher/health/node_pace.h"
#include "launcher/health/pace.h"
#include "launcher/supervise/exit_status.h"
#include "launcher/supervise/outcome.h"
#include "launcher/supervise/output.h"
#include "launcher/supervise/peers.h"
#include "launcher/supervise/restart_policy.h"
#include "launcher/supervise/supervisor_error.h"
#include "launcher/supervise/worker.h"

namespace ddl::launcher {

// The report and the stack dumps a supervisor feeds (see launcher/report/, launcher/diagnose/).
class RunReport;

struct SupervisorOptions {
  std::optional<std::string> log_dir;  // created if missing
  bool append_logs = false;            // open the log files for appending, not truncated
  bool quiet = false;
  // torchrun's duplicate filters (JobOutputs::Options).
  std::vector<std::string> stdout_filters;
  std::vector<std::string> stderr_filters;
  std::chrono::milliseconds kill_timeout{10'000};  // SIGTERM -> SIGKILL grace
  RestartPolicy restart_policy;  // asked after every failed generation (default: no restarts)
  std::chrono::milliseconds hang_timeout{0};  // no output from any running process this long:
                                              // fail the generation; 0 turns the hang guard off
  // Stragglers and the step timeout, from the progress messages (launcher/health/pace.h);
  // `node_label` names this node in straggler lines ("on node 1 (host-b)"), may be empty.
  PaceOptions pace;
  std::string node_label;
  // How long servers may keep running after every trainer exited 0 (see the header comment);
  // unset: no time, Paddle's rule.
  std::optional<std::chrono::milliseconds> server_grace;
  // Called once, on the supervisor's thread, as soon as the job is known to end failed on this
  // node: a failure or hang the policy will not restart, a spawn error, or an interrupt. Not
  // called for a stop requested through `external_stop`. May be empty.
  std::function<void(const FailureNotice&)> on_failure;
  // Lets another thread stop the job (see ExternalStop). May be null.
  std::shared_ptr<ExternalStop> external_stop;

  // A job of several nodes, run as one (launcher/coord/engine.h). Both may be empty (one node).
  // on_generation_failure: called on the supervisor's thread as soon as a generation fails here
  // (a process failed, the hang guard fired), whether or not a restart follows, before
  // on_failure. on_generation_success: called when every process of this node's generation
  // exited 0; when set, the job is not over until external_stop says every node's generation
  // succeeded (or that one failed: then this node restarts with the others).
  std::function<void(Generation, const FailureNotice&)> on_generation_failure;
  std::function<void(Generation)> on_generation_success;
  // This node's pace after its ranks' steps, for the other nodes (PaceGuard::NodePaceSink). May
  // be empty.
  std::function<void(Generation, std::int64_t, double)> on_node_pace;
  // The straggler verdicts across nodes reached on this node since the last call, for the
  // observers (PaceGuard::NodeVerdicts). May be empty.
  std::function<std::vector<NodePaceJudge::Verdict>()> node_verdicts;
  // True when a restart may give this node's processes other indices (an elastic job whose
  // membership changed): each keeps its log file by name (workerlog.<index>).
  bool indices_may_change = false;
  // The generation this node starts with: 0, or a later one for a node admitted into a running
  // elastic job.
  Generation first_generation;

  // Fed with every start, line and exit, and written to report_dir after every generation. May
  // be null (--report=false, or no log dir).
  RunReport* report = nullptr;
  // Where the report and the stack dumps go; unset: log_dir. Created if missing.
  std::optional<std::string> report_dir;
  // Stack dumps of the running processes into report_dir/stacks.<generation>.txt (or stderr
  // without a log dir): when the hang guard fires, on SIGUSR1 to the launcher, and when a process
  // exits with kExitDeadline (a rendezvous or collective deadline) before the others are stopped.
  bool dump_stacks = true;
};

struct JobOutcome {
  // The restart policy's last decision: 0 when the last generation succeeded; else its first
  // failed process's code (128+signal when killed), kExitDeadline when the hang guard ended it,
  // 128+signal when the launcher was interrupted (a failure seen before the interrupt wins), 1
  // when a process could not be started, the external stop's code.
  int exit_code = 0;
  // How the last generation ended (outcome.h): ok(), or its failure (with the process named as
  // its cause, the first failure by time) and the stop that ended the job, if any.
  Outcome last;
  int restarts = 0;         // how many times the processes were started again
  int servers_stopped = 0;  // servers of the last generation stopped after its trainers finished
};

// The processes of one start of the job. Called once per generation, before anything of it runs;
// every call must return the same roles and indices in the same order (they name the log files).
// An exception thrown for the first generation leaves supervise() (nothing has started); a later
// one ends the job with the previous failure.
using GenerationFactory = std::function<std::vector<Worker>(Generation)>;

// Runs the job to the end (see the header comment). Throws SupervisorError when the log dir
// cannot be created, a log file cannot be opened or two workers share a role and index (nothing
// has started then). A process that cannot be spawned stops the others, is not restarted, and
// yields exit code 1.
JobOutcome supervise(const GenerationFactory& make_generation, const SupervisorOptions& options);

// The same, starting `workers` unchanged in every generation.
JobOutcome supervise(const std::vector<Worker>& workers, const SupervisorOptions& options);

}  // namespace ddl::launcher
