#include "launcher/supervise/outcome.h"

#include <utility>

#include "env/exit_codes.h"
#include "launcher/supervise/exit_status.h"

namespace ddl::launcher {

Failure Failure::hang(std::string what) {
  return Failure{Kind::kHang, kExitDeadline, std::move(what), std::nullopt, "", std::nullopt};
}

Failure Failure::peer(int exit_code, std::string what) {
  return Failure{Kind::kPeer, exit_code, std::move(what), std::nullopt, "", std::nullopt};
}

Stop Stop::external(int exit_code, std::string reason) {
  return Stop{Kind::kExternal, exit_code, std::move(reason), 0};
}

Stop Stop::spawn_failed(std::string what) {
  return Stop{Kind::kSpawnFailed, kExitError, std::move(what), 0};
}

Stop Stop::interrupted(int signo) {
  return Stop{Kind::kInterrupted, 128 + signo, "the launcher was stopped by " + signal_name(signo),
              signo};
}

void Outcome::next_generation() {
  stage_ = Stage::kRunning;
  failure_.reset();
}

bool Outcome::fail(Failure failure) {
  if (!ok()) return false;
  failure_ = std::move(failure);
  return true;
}

void Outcome::rename_cause(Failure cause) {
  if (failure_) failure_ = std::move(cause);
}

bool Outcome::stop(Stop stop) {
  if (stop_ && stop.kind <= stop_->kind) return false;
  stop_ = std::move(stop);
  return true;
}

bool Outcome::from_peer() const {
  return failed(Failure::Kind::kPeer) && !stopped(Stop::Kind::kExternal) &&
         !stopped(Stop::Kind::kInterrupted);
}

int Outcome::exit_code() const {
  if (failure_) return failure_->exit_code;
  return stop_ ? stop_->exit_code : 0;
}

std::string Outcome::what() const {
  if (failure_) return failure_->what;
  return stop_ ? stop_->what : std::string();
}

std::string Outcome::state_name() const {
  if (stop_) {
    switch (stop_->kind) {
      case Stop::Kind::kExternal:
        return "stopped externally";
      case Stop::Kind::kSpawnFailed:
        return "spawn failed";
      case Stop::Kind::kInterrupted:
        return "interrupted";
    }
  }
  if (failure_) {
    switch (failure_->kind) {
      case Failure::Kind::kWorker:
        return "worker failed";
      case Failure::Kind::kHang:
        return "hung";
      case Failure::Kind::kPeer:
        return "failed on another node";
    }
  }
  return "running";
}

std::string Outcome::summary() const { return ok() ? "succeeded" : state_name() + ": " + what(); }

}  // namespace ddl::launcher
