// The processes of this node's workers, one generation at a time: spawning, reaping, reading
// their output pipes and the one stop sequence (launcher/supervise/group_stop.h). It decides
// nothing: what a failure means, the hang guard and restarts are the supervisor's
// (launcher/supervise/supervisor.h), told through Events.
//
// Each process runs in its own process group (its pid is the group id) with stdin on /dev/null,
// stdout and stderr on one pipe whose bytes go to the worker's ProcessOutput, a second pipe for
// its progress messages (DDL_PROGRESS_FD, launcher/health/progress.h), PR_SET_PDEATHSIG
// SIGKILL, and its group guarded by a Watchdog (launcher/supervise/watchdog.h) made on the first
// generation. Single-threaded: every call and every event on the io_context's thread.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/supervise/group_stop.h"
#include "launcher/supervise/output.h"
#include "launcher/supervise/watchdog.h"
#include "launcher/supervise/worker.h"

namespace ddl::launcher {

// After the last process is reaped, how long its output pipe may stay open (a grandchild outside
// the process group may hold it) before it is closed with a warning.
inline constexpr std::chrono::milliseconds kDrainTimeout{1000};

// A progress line longer than this is dropped whole (the protocol's lines are far shorter).
inline constexpr std::size_t kMaxProgressBytes = 1024;

class WorkerGroup {
 public:
  using Clock = std::chrono::steady_clock;

  // One worker's process in the current generation. `role`, `index`, `name` and `output` last
  // for the whole job (rename() aside); the rest is reset by begin_generation().
  struct Process {
    env::Role role = env::Role::kTrainer;
    int index = 0;
    std::size_t slot = 0;             // its place in the group (launch order)
    std::string name;                 // "rank 3", "server 1"
    ProcessOutput* output = nullptr;  // not owned
    pid_t pid = -1;                   // also its process group's id
    bool started = false;
    bool running = false;
    int status = 0;                             // wait status, once reaped
    struct rusage usage {};                     // once reaped
    std::string error_file;                     // TORCHELASTIC_ERROR_FILE; empty when not set
    std::optional<std::string> recorded_error;  // what it wrote there, when it failed
    bool output_open = false;                   // its pipe has not reached EOF yet
    Clock::time_point last_output;              // its start, then its latest output or message

   private:
    friend class WorkerGroup;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pipe;
    std::array<char, 16384> buffer{};
    std::unique_ptr<boost::asio::posix::stream_descriptor> progress_pipe;
    std::array<char, 4096> progress_buffer{};
    std::string progress_line;       // a message not finished yet
    bool progress_overlong = false;  // the current line is too long: dropped up to its newline
  };

  struct Events {
    // A process was reaped: status, usage and (after a failure) recorded_error are set.
    std::function<void(Process&)> exited;
    // A pipe reached EOF, or the drain after finish() closed it.
    std::function<void()> output_closed;
    // One line of the process's progress pipe, without its newline (may be empty).
    std::function<void(Process&, const std::string& line)> progress;
  };

  WorkerGroup(boost::asio::io_context& io, std::chrono::milliseconds kill_timeout, Events events);
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Adds the job's next worker (before the first generation); `output` must outlive the group.
  void add(const Worker& worker, ProcessOutput& output);
  // Process `i` is `worker` from now on (an elastic restart gave it another index).
  void rename(std::size_t i, const Worker& worker, ProcessOutput& output);

  // A new generation: forgets the previous one's processes (reaped and drained by then; their
  // groups are released from the watchdog) and its stop sequence.
  void begin_generation();
  // Spawns process `i` as `worker` says. False, with `error` saying why, when it could not be;
  // nothing of it is left running then.
  bool start(std::size_t i, const Worker& worker, std::string& error);
  // Reaps every process that has ended (call on SIGCHLD; never blocks), telling Events::exited.
  void reap();

  // The stop sequence of this generation (see group_stop.h): `signo` to every group and SIGKILL
  // after kill_timeout; later calls do nothing and return false.
  bool stop(int signo);
  bool stopping() const { return stop_.begun(); }
  // SIGKILL to every group now.
  void kill_now() { stop_.kill_now(); }
  // Once every process is reaped: SIGKILL to what is left in the groups, and the pipes get
  // kDrainTimeout to reach EOF; those still open then are closed with a warning.
  void finish();

  // Throws SupervisorError unless `workers` (restart number `restart`) are this group's, in its
  // order: same roles, same indices unless `indices_may_change`.
  void check_restart(const std::vector<Worker>& workers, int restart,
                     bool indices_may_change) const;

  // Processes not reaped yet.
  int running() const;
  // True when every pipe of this generation reached EOF or was closed.
  bool output_closed() const;
  const std::vector<std::unique_ptr<Process>>& processes() const { return processes_; }
  std::size_t size() const { return processes_.size(); }

 private:
  void read_output(Process& p);
  void on_output(Process& p, const boost::system::error_code& ec, std::size_t n);
  void close_output(Process& p);
  void read_progress(Process& p);
  void on_progress(Process& p, std::size_t n);

  boost::asio::io_context& io_;
  Events events_;
  GroupStop stop_;
  boost::asio::steady_timer drain_timer_;
  std::optional<Watchdog> watchdog_;                 // made by the first begin_generation()
  std::vector<std::unique_ptr<Process>> processes_;  // stable addresses for the handlers
  int epoch_ = 0;  // bumped by begin_generation(); a handler of an earlier one does nothing
};

}  // namespace ddl::launcher
