// The stop sequence: the one way the launcher ends the processes of a generation, whatever the
// reason (a failed worker, the hang guard, a signal to the launcher, another node's failure):
//   1. begin(signo): `signo` (SIGTERM, or the signal the launcher got) to every process group;
//   2. kill_timeout later, SIGKILL to every group whose leader is still running (each named in a
//      warning: "rank 0 (pid P) still running 500 ms after it was told to stop: SIGKILL");
//   3. finish(), once every leader is reaped: SIGKILL to every group, so that nothing left in a
//      group (children, data loaders) outlives its generation.
// kill_now() is step 2 at once (a second signal to the launcher). Each process runs in its own
// group, its pid being the group id. Lives on the supervisor's thread and io_context.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <string>
#include <vector>

namespace ddl::launcher {

class GroupStop {
 public:
  GroupStop(boost::asio::io_context& io, std::chrono::milliseconds kill_timeout);

  // A new generation: forgets the previous one's groups and any pending step 2.
  void reset();

  // The group `pgid` of the process called `name` ("rank 3") belongs to this generation.
  void add(pid_t pgid, std::string name);
  // The group's leader has been reaped.
  void reaped(pid_t pgid);

  // Step 1, and step 2 armed. Later calls in the same generation do nothing but return false.
  bool begin(int signo);
  // True once begin() was called in this generation.
  bool begun() const { return begun_; }
  // SIGKILL to every group now.
  void kill_now();
  // Step 3 (cancels a pending step 2).
  void finish();

 private:
  struct Group {
    pid_t pgid;
    std::string name;
    bool running;
  };
  void signal_all(int signo);

  boost::asio::steady_timer timer_;
  std::chrono::milliseconds kill_timeout_;
  std::vector<Group> groups_;
  bool begun_ = false;
  int epoch_ = 0;  // bumped by reset(); a timer armed in an earlier epoch does nothing
};

}  // namespace ddl::launcher
