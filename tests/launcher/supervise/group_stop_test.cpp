// GroupStop alone, on real process groups: the signal to every group, SIGKILL after kill_timeout
// for a process that ignores it, SIGKILL at once, and nothing left in a group after finish().
#include "launcher/supervise/group_stop.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "tests/support/poll.h"
#include "tests/support/process.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using testing::alive;
using testing::live_members;
using testing::wait_until;

// `/bin/sh -c command` leading a process group of its own (its pid is the group id), SIGKILLed
// and reaped at scope exit if still there.
class Group {
 public:
  explicit Group(const std::string& command) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(126);
    }
    ::setpgid(pid_, pid_);
  }
  ~Group() {
    ::kill(-pid_, SIGKILL);
    if (!status_) ::waitpid(pid_, nullptr, 0);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  pid_t pid() const { return pid_; }
  // The leader's wait status once it ended within `timeout`.
  std::optional<int> wait(milliseconds timeout) {
    int status = 0;
    if (!status_ &&
        wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) {
      status_ = status;
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Waits until the group's shell has exec'd `sleep` (its trap, if any, is set by then).
void wait_for_sleep(const Group& g) {
  const std::string cmdline = "/proc/" + std::to_string(g.pid()) + "/cmdline";
  ASSERT_TRUE(wait_until([&] { return testing::read_file(cmdline).rfind("sleep", 0) == 0; },
                         milliseconds(5000)));
}

bool killed_by(std::optional<int> status, int signo) {
  return status && WIFSIGNALED(*status) && WTERMSIG(*status) == signo;
}

TEST(GroupStop, BeginSignalsEveryGroupOnce) {
  boost::asio::io_context io;
  GroupStop stop(io, milliseconds(5000));
  Group a("exec sleep 30");
  Group b("exec sleep 30");
  stop.add(a.pid(), "rank 0");
  stop.add(b.pid(), "rank 1");
  EXPECT_FALSE(stop.begun());
  EXPECT_TRUE(stop.begin(SIGTERM));
  EXPECT_TRUE(stop.begun());
  EXPECT_FALSE(stop.begin(SIGINT));  // the stop sequence runs once per generation
  EXPECT_TRUE(killed_by(a.wait(milliseconds(5000)), SIGTERM));
  EXPECT_TRUE(killed_by(b.wait(milliseconds(5000)), SIGTERM));
}

TEST(GroupStop, ALeaderIgnoringTheSignalIsKilledAfterKillTimeout) {
  boost::asio::io_context io;
  const milliseconds kill_timeout(300);
  GroupStop stop(io, kill_timeout);
  Group stubborn("trap '' TERM; exec sleep 30");  // ignored signals stay ignored across exec
  wait_for_sleep(stubborn);
  stop.add(stubborn.pid(), "rank 0");
  const auto began = std::chrono::steady_clock::now();
  stop.begin(SIGTERM);
  EXPECT_FALSE(stubborn.wait(milliseconds(100)));
  io.run_for(milliseconds(5000));  // returns once step 2 has run
  EXPECT_TRUE(killed_by(stubborn.wait(milliseconds(5000)), SIGKILL));
  EXPECT_GE(testing::elapsed_ms(began), kill_timeout.count());
}

TEST(GroupStop, KillNowDoesNotWaitForKillTimeout) {
  boost::asio::io_context io;
  GroupStop stop(io, milliseconds(60'000));
  Group stubborn("trap '' TERM; exec sleep 30");
  wait_for_sleep(stubborn);
  stop.add(stubborn.pid(), "rank 0");
  stop.begin(SIGTERM);
  stop.kill_now();
  EXPECT_TRUE(killed_by(stubborn.wait(milliseconds(5000)), SIGKILL));
}

TEST(GroupStop, FinishKillsWhatIsLeftInTheGroups) {
  boost::asio::io_context io;
  GroupStop stop(io, milliseconds(5000));
  // The leader exits at once; its child stays behind in the group, as a data loader would.
  Group leader("sleep 30 & exit 0");
  stop.add(leader.pid(), "rank 0");
  ASSERT_TRUE(leader.wait(milliseconds(5000)));
  stop.reaped(leader.pid());
  ASSERT_TRUE(
      wait_until([&] { return !live_members({leader.pid()}).empty(); }, milliseconds(5000)));
  stop.finish();
  EXPECT_TRUE(wait_until([&] { return live_members({leader.pid()}).empty(); }, milliseconds(5000)));
}

TEST(GroupStop, ResetForgetsThePreviousGenerationAndItsPendingKill) {
  boost::asio::io_context io;
  const milliseconds kill_timeout(200);
  GroupStop stop(io, kill_timeout);
  Group stubborn("trap '' TERM; exec sleep 30");
  wait_for_sleep(stubborn);
  stop.add(stubborn.pid(), "rank 0");
  stop.begin(SIGTERM);
  stop.reset();
  EXPECT_FALSE(stop.begun());
  io.run_for(kill_timeout * 3);
  EXPECT_TRUE(alive(stubborn.pid()));  // step 2 of the old generation did nothing
  EXPECT_TRUE(stop.begin(SIGTERM));    // and the new generation has its own stop sequence
  stop.finish();                       // with no group added, it signals nobody
  EXPECT_TRUE(alive(stubborn.pid()));
}

}  // namespace
}  // namespace ddl::launcher
