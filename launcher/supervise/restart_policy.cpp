#include "launcher/supervise/restart_policy.h"

#include <stdexcept>

#include "launcher/supervise/exit_status.h"

namespace ddl::launcher {

namespace {

// kWorkerFailed, kHung and kPeerFailed share a level: whichever comes first stays.
int level(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return 0;
    case JobState::kWorkerFailed:
    case JobState::kHung:
    case JobState::kPeerFailed:
      return 1;
    case JobState::kStoppedExternally:
      return 2;
    case JobState::kSpawnFailed:
      return 3;
    case JobState::kInterrupted:
      return 4;
  }
  return 0;
}

}  // namespace

std::string state_name(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kWorkerFailed:
      return "worker failed";
    case JobState::kHung:
      return "hung";
    case JobState::kPeerFailed:
      return "failed on another node";
    case JobState::kSpawnFailed:
      return "spawn failed";
    case JobState::kStoppedExternally:
      return "stopped externally";
    case JobState::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

bool overrides(JobState next, JobState current) { return level(next) > level(current); }

RestartPolicy::RestartPolicy(int max_restarts) : max_restarts_(max_restarts) {
  if (max_restarts < 0) {
    throw std::invalid_argument("max_restarts must be >= 0, got " + std::to_string(max_restarts));
  }
}

RestartDecision RestartPolicy::decide(const GenerationEnd& end) const {
  RestartDecision d;
  if (end.failure_exit_code) {
    d.exit_code = *end.failure_exit_code;
  } else if (end.interrupt_signal) {
    d.exit_code = 128 + *end.interrupt_signal;
  } else if (end.state == JobState::kSpawnFailed) {
    d.exit_code = kExitError;
  } else if (end.external_exit_code) {
    d.exit_code = *end.external_exit_code;
  } else {
    d.exit_code = 0;
  }
  const bool restartable = end.state == JobState::kWorkerFailed || end.state == JobState::kHung ||
                           end.state == JobState::kPeerFailed;
  const bool failed = end.failure_exit_code.has_value();
  if (!failed || end.generation.index() >= max_restarts_) return d;
  if (end.state == JobState::kInterrupted && end.interrupt_signal) {
    d.vetoed_by = "the launcher was stopped by " + signal_name(*end.interrupt_signal);
  } else if (end.state == JobState::kStoppedExternally) {
    d.vetoed_by = end.external_reason;
  }
  if (!restartable) return d;
  d.action = RestartDecision::Action::kRestart;
  d.exit_code = 0;
  d.next = end.generation.next();
  return d;
}

}  // namespace ddl::launcher
