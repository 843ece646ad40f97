#include "launcher/supervise/restart_policy.h"

#include <stdexcept>

namespace ddl::launcher {

RestartPolicy::RestartPolicy(int max_restarts) : max_restarts_(max_restarts) {
  if (max_restarts < 0) {
    throw std::invalid_argument("max_restarts must be >= 0, got " + std::to_string(max_restarts));
  }
}

RestartDecision RestartPolicy::decide(Generation generation, const Outcome& outcome) const {
  RestartDecision d;
  d.exit_code = outcome.exit_code();
  if (!outcome.failure() || generation.index() >= max_restarts_) return d;
  if (outcome.stopped()) {
    d.vetoed_by = outcome.stopped()->what;
    return d;
  }
  d.action = RestartDecision::Action::kRestart;
  d.exit_code = 0;
  d.next = generation.next();
  return d;
}

}  // namespace ddl::launcher
