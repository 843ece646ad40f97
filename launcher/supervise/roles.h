// The rule of the roles that serve the trainers: parameter servers and heter workers.
//
// Servers after the trainers: once every trainer of a generation has exited 0, the servers and
// heter workers still running are stopped (SIGTERM, SIGKILL after kill_timeout) and the
// generation still succeeds, as Paddle's launchers end their servers once the trainers are done.
// Without a grace they are stopped at once with Paddle's lines ("all workers exit, going to
// finish parameter server", then "all parameter server are killed" once the job succeeded); with
// one they first get the grace to exit by themselves (the supervisor's hang guard is off
// meanwhile), then are stopped with one line of ours. Only on a node that runs trainers: a node
// of servers alone waits for them to exit. Servers that exit 0 while trainers run end nothing:
// the trainers decide. A server that fails, even during the grace, fails the generation like
// any process (the supervisor's business, not this rule's).
//
// The supervisor (supervisor.cpp) asks after every reap and carries out the answer; this file
// only decides and words. No I/O.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

// One process of the group as the rule sees it.
struct RoleView {
  env::Role role = env::Role::kTrainer;
  bool running = false;
  bool exited_zero = false;  // reaped, exit code 0
};

// The group's processes as the rule sees them, in launch order.
std::vector<RoleView> role_views(const WorkerGroup& group);

// What to do about the servers now.
struct ServersVerdict {
  enum class Action {
    kWait,     // a trainer has not exited 0, none runs here, or nothing else runs
    kStopNow,  // stop those still running, with Paddle's line (no grace)
    kGrace,    // give them the grace, then stop() those still running
  };
  Action action = Action::kWait;
  int trainers = 0;  // kStopNow, kGrace: the trainers, every one exited 0
  int running = 0;   // kStopNow, kGrace: the servers and heter workers still running
};

// The servers and heter workers one stop after the trainers ended.
struct StoppedServers {
  int servers = 0;
  int heter_workers = 0;
  bool paddle = false;  // stopped at once, with Paddle's lines (no grace)
  int total() const { return servers + heter_workers; }
};

class ServersAfterTrainers {
 public:
  // `grace` unset: none (Paddle's rule). `kill_timeout` is the stop's, for the messages.
  ServersAfterTrainers(std::optional<std::chrono::milliseconds> grace,
                       std::chrono::milliseconds kill_timeout);

  // After a reap of a generation that runs with nothing wrong. Asked again after kStopNow or
  // kGrace, it answers the same: the supervisor asks only while it has not acted.
  ServersVerdict check(const std::vector<RoleView>& group) const;

  // The line to log (debug) when the grace begins: "all 2 trainer(s) exited with code 0; 2
  // server(s) have 20 s to exit".
  std::string grace_line(const ServersVerdict& verdict) const;

  // The stop is due (kStopNow at once, or the grace of kGrace is over): counts those still
  // running in `group` as stopped() and returns the line to log (info) before stopping them.
  // Empty, with nothing counted, when none runs any more (nothing to stop).
  std::string stop(const std::vector<RoleView>& group, const ServersVerdict& verdict);

  // What was stopped in this generation (nothing until stop()).
  const StoppedServers& stopped() const { return stopped_; }
  // A new generation: nothing stopped.
  void reset() { stopped_ = StoppedServers{}; }

  // The lines (info) of a job whose last generation succeeded after stop(): Paddle's "... are
  // killed" lines when stopped at once, then ours ("job succeeded<after>: every trainer exited
  // with code 0; N server(s) were stopped after them"); `after` is " after K restart(s)" or
  // empty. Empty when nothing was stopped.
  std::vector<std::string> success_lines(const std::string& after) const;

 private:
  std::optional<std::chrono::milliseconds> grace_;
  std::chrono::milliseconds kill_timeout_;
  StoppedServers stopped_;
};

}  // namespace ddl::launcher
