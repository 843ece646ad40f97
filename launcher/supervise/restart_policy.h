// What happens after a generation of the job ends: the job (launcher/job/job.h) chooses the
// policy, the supervisor carries out its decisions.
//
// The supervisor keeps one Outcome (outcome.h) for the current generation: its failure, if any,
// and the stop that rules out a restart, if any. When the generation is over (and, earlier, as
// soon as a failure is seen, to know whether the other nodes must be told) the supervisor asks
// RestartPolicy::decide().
#pragma once

#include <string>

#include "env/exit_codes.h"
#include "launcher/cluster/generation.h"
#include "launcher/supervise/outcome.h"

namespace ddl::launcher {

struct RestartDecision {
  enum class Action { kStop, kRestart };
  Action action = Action::kStop;
  int exit_code = 0;  // kStop: the job's exit code
  Generation next;    // kRestart: the generation to start
  // kStop, when a restart was due but a stop rules it out: the stop's `what` ("the launcher was
  // stopped by SIGINT", the external stop's reason). Empty otherwise.
  std::string vetoed_by;

  bool restart() const { return action == Action::kRestart; }
};

// How many failed generations in a row made no progress (launcher/health/ledger.h), and why.
struct Stall {
  int generations = 0;
  std::string why;
};

// Restarts after a failed generation (a Failure without a Stop) while fewer than max_restarts
// restarts have happened; never after a stop; and, with no_progress_restarts > 0, not once that
// many failed generations in a row made no progress: the job then ends with kExitNoProgress. The
// exit code when stopping is Outcome::exit_code(): the generation's failure code, else the stop's
// (128+signal after an interrupt, kExitError after a spawn failure, the external stop's code), else
// 0.
class RestartPolicy {
 public:
  // Throws std::invalid_argument for a negative max_restarts or no_progress_restarts.
  explicit RestartPolicy(int max_restarts = 0, int no_progress_restarts = 0);

  // `generation` is the generation that ended (or is ending) as `outcome` says; `stall` counts
  // the generations up to it that made no progress.
  RestartDecision decide(Generation generation, const Outcome& outcome,
                         const Stall& stall = {}) const;
  int max_restarts() const { return max_restarts_; }

 private:
  int max_restarts_;
  int no_progress_restarts_;
};

}  // namespace ddl::launcher
