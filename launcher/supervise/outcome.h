// How the current generation of the job stands, and so how the job ends: the one record the agent
// loop (supervisor.cpp) keeps of it, and the only one it reads the exit code and its last words
// from. The restart policy (restart_policy.h) decides on it too.
//
// A generation goes through stages (Outcome::Stage) and two things may go wrong in it:
// - its failure (Failure): the first process that failed by itself, the hang guard, or the
//   generation's failure on another node. A restart may follow. Recorded only while nothing has
//   gone wrong yet: the first one stays, and the stop of a failed or stopped generation is no
//   failure of its own.
// - a stop (Stop): another node ended the job, a process could not be started, the launcher got
//   a signal. Never restarted. It may come on top of a failure (the exit code stays the
//   failure's); a later kind overrides an earlier one, one of the same kind does not.
// A new generation starts kRunning with no failure. Plain value; no I/O.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace ddl::launcher {

// What went wrong in a generation by itself.
struct Failure {
  enum class Kind {
    kWorker,  // a process exited non-zero or was killed, not by the launcher
    kHang,    // the hang guard found no output for --hang_timeout
    kPeer,    // this generation failed on another node of the job
  };
  Kind kind = Kind::kWorker;
  // The failed process's code (128+signal when killed), kExitDeadline for the hang guard, the
  // other node's code.
  int exit_code = 1;
  std::string what;  // "rank 1 exited with code 3", "hang guard: ...", "generation 0 failed ..."
  // kWorker: the failed process's place in the group (launch order), its name and, for a
  // trainer, its rank.
  std::optional<std::size_t> process;
  std::string process_name;
  std::optional<int> rank;

  static Failure hang(std::string what);  // kExitDeadline
  static Failure peer(int exit_code, std::string what);
};

// What ends the job whatever the restart policy says.
struct Stop {
  // Ordered: a later kind overrides an earlier one.
  enum class Kind {
    kExternal,     // ExternalStop: another node's failure ended the job (peers.h)
    kSpawnFailed,  // a process could not be started, or a restart could not be prepared
    kInterrupted,  // the launcher got SIGINT, SIGTERM, SIGHUP or SIGQUIT
  };
  Kind kind = Kind::kExternal;
  int exit_code = 1;  // the request's code; kExitError; 128+signal
  std::string what;   // the request's reason; the spawn error; "the launcher was stopped by SIGINT"
  int signal = 0;     // kInterrupted: the signal

  static Stop external(int exit_code, std::string reason);
  static Stop spawn_failed(std::string what);
  static Stop interrupted(int signo);
};

class Outcome {
 public:
  // Where the current generation is.
  enum class Stage {
    kRunning,          // processes run (some may have exited 0)
    kServerGrace,      // every trainer exited 0; the servers' grace runs (roles.h)
    kDraining,         // every process is reaped; their pipes are draining
    kWaitingForPeers,  // multi-node: this node's part succeeded, the others' is not known yet
    kRestarting,       // the next generation is about to start
    kDone,             // the job is over
  };

  Stage stage() const { return stage_; }
  void enter(Stage stage) { stage_ = stage; }

  // A new generation: kRunning, without failure.
  void next_generation();

  // Records the generation's failure; false (nothing recorded) unless ok().
  bool fail(Failure failure);
  // Names another process as the failure's cause (the supervisor's first_cause()); does nothing
  // without a failure.
  void rename_cause(Failure cause);
  // Records `stop`; false (nothing recorded) when a stop of the same or a later kind is there.
  bool stop(Stop stop);

  const std::optional<Failure>& failure() const { return failure_; }
  const std::optional<Stop>& stopped() const { return stop_; }
  // Nothing has gone wrong (at the end: every process exited 0).
  bool ok() const { return !failure_ && !stop_; }
  bool failed(Failure::Kind kind) const { return failure_ && failure_->kind == kind; }
  bool stopped(Stop::Kind kind) const { return stop_ && stop_->kind == kind; }
  // The generation failed on another node (which tells the others itself) and no stop of this
  // node's own (an interrupt, the job's end) came on top: the job ends for that failure.
  bool from_peer() const;
  // A failure and no stop: the restart policy may restart.
  bool restartable() const { return failure_ && !stop_; }

  // The failure's code, else the stop's, else 0.
  int exit_code() const;
  // What went wrong: the failure's `what`, else the stop's; empty when ok().
  std::string what() const;
  // The stop's kind, else the failure's: "running", "worker failed", "hung", "failed on another
  // node", "stopped externally", "spawn failed", "interrupted".
  std::string state_name() const;
  // "succeeded" when ok(), else "<state name>: <what>" (the run report's generation outcome).
  std::string summary() const;

 private:
  Stage stage_ = Stage::kRunning;
  std::optional<Failure> failure_;
  std::optional<Stop> stop_;
};

}  // namespace ddl::launcher
