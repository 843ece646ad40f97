// Stack dumps of the running processes (launcher/diagnose/stacks.h) when the loop has reason to
// ask where they are: the hang guard fired, a process exited with kExitDeadline (a rendezvous or
// collective deadline: the peer it waited for is still running) before the others are stopped, or
// SIGUSR1 to the launcher. Each dump goes to DIR/stacks.<generation>.txt (stderr without a
// folder), and one warning names, per process, the innermost frame of our code. A dump that
// cannot be written is logged, never thrown.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "launcher/supervise/observers.h"

namespace ddl::launcher {

class StackDumpObserver : public SupervisorObserver {
 public:
  // `dir`: where the dumps go, created if missing; unset: stderr. `hang_timeout` words the hang
  // guard's reason.
  StackDumpObserver(std::optional<std::string> dir, std::chrono::milliseconds hang_timeout);

  void generation_failed(Generation g, const Failure& failure, const WorkerGroup& group) override;
  void stacks_requested(Generation g, const WorkerGroup& group) override;

 private:
  void dump(Generation g, const WorkerGroup& group, const std::string& reason) const;

  std::optional<std::string> dir_;
  std::chrono::milliseconds hang_timeout_;
};

}  // namespace ddl::launcher
