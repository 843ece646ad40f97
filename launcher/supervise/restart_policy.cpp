#include "launcher/supervise/restart_policy.h"

#include <stdexcept>

namespace ddl::launcher {

RestartPolicy::RestartPolicy(int max_restarts, int no_progress_restarts)
    : max_restarts_(max_restarts), no_progress_restarts_(no_progress_restarts) {
  if (max_restarts < 0 || no_progress_restarts < 0) {
    throw std::invalid_argument("max_restarts and no_progress_restarts must be >= 0, got " +
                                std::to_string(max_restarts) + " and " +
                                std::to_string(no_progress_restarts));
  }
}

RestartDecision RestartPolicy::decide(Generation generation, const Outcome& outcome,
                                      const Stall& stall) const {
  RestartDecision d;
  d.exit_code = outcome.exit_code();
  if (!outcome.failure() || generation.index() >= max_restarts_) return d;
  if (outcome.stopped()) {
    d.vetoed_by = outcome.stopped()->what;
    return d;
  }
  if (no_progress_restarts_ > 0 && stall.generations >= no_progress_restarts_) {
    d.exit_code = kExitNoProgress;
    d.vetoed_by = "no progress: " + stall.why +
                  " (--no_progress_restarts=" + std::to_string(no_progress_restarts_) +
                  "); exit code " + std::to_string(kExitNoProgress);
    return d;
  }
  d.action = RestartDecision::Action::kRestart;
  d.exit_code = 0;
  d.next = generation.next();
  return d;
}

}  // namespace ddl::launcher
