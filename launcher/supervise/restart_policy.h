// What happens after a generation of the job ends: the job (launcher/job/job.h) chooses the
// policy, the supervisor carries out its decisions.
//
// The supervisor keeps one JobState for the current generation. A generation starts kRunning; the
// first worker failure or hang makes it kWorkerFailed or kHung; another node's failure
// (ExternalStop), a spawn error or a signal to the launcher override those (in that order), since
// each of them rules out a restart. When the generation is over (and, earlier, as soon as a failure
// is seen, to know whether the other nodes must be told) the supervisor asks
// RestartPolicy::decide().
#pragma once

#include <optional>
#include <string>

#include "env/exit_codes.h"
#include "launcher/cluster/generation.h"

namespace ddl::launcher {

// Ordered: a later state overrides an earlier one, never the reverse (kWorkerFailed, kHung and
// kPeerFailed are alternatives: the first of them stays).
enum class JobState {
  kRunning,            // nothing has gone wrong (at the end: every process exited 0)
  kWorkerFailed,       // a process exited non-zero or was killed, not by the launcher
  kHung,               // the hang guard found no output for --hang_timeout
  kPeerFailed,         // this generation failed on another node of the job (restartable)
  kStoppedExternally,  // ExternalStop: another node's failure stopped this node
  kSpawnFailed,        // a process could not be started, or a restart could not be prepared
  kInterrupted,        // the launcher got SIGINT, SIGTERM or SIGHUP
};

// "running", "worker failed", "hung", ... for messages.
std::string state_name(JobState state);

// True when `next` overrides `current` (see JobState).
bool overrides(JobState next, JobState current);

// What the supervisor knows when it asks.
struct GenerationEnd {
  Generation generation;  // the generation that ended (or is ending)
  JobState state = JobState::kRunning;
  // The generation's own failure: the first failed process's exit code (128+signal when killed),
  // kExitDeadline for the hang guard, the other node's code for kPeerFailed. Kept when a later state overrides kWorkerFailed/kHung.
  std::optional<int> failure_exit_code;
  std::optional<int> interrupt_signal;    // the signal the launcher got, if any
  std::optional<int> external_exit_code;  // what ExternalStop asked to exit with, if it did
  std::string external_reason;            // ... and why
};

struct RestartDecision {
  enum class Action { kStop, kRestart };
  Action action = Action::kStop;
  int exit_code = 0;  // kStop: the job's exit code
  Generation next;    // kRestart: the generation to start
  // kStop, when a restart was due but a later state rules it out: why ("the launcher was stopped
  // by SIGINT", the external stop's reason). Empty otherwise.
  std::string vetoed_by;

  bool restart() const { return action == Action::kRestart; }
};

// Restarts after a failed generation (kWorkerFailed, kHung or kPeerFailed) while fewer than max_restarts
// restarts have happened; never after a spawn failure, an interrupt or an external stop. The exit
// code when stopping, first rule that applies: the generation's failure code; 128+signal after an
// interrupt; kExitError after a spawn failure; the external stop's code; 0.
class RestartPolicy {
 public:
  // Throws std::invalid_argument for a negative max_restarts.
  explicit RestartPolicy(int max_restarts = 0);

  RestartDecision decide(const GenerationEnd& end) const;
  int max_restarts() const { return max_restarts_; }

 private:
  int max_restarts_;
};

}  // namespace ddl::launcher
