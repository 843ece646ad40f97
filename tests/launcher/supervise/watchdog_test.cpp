// Watchdog alone: a launcher (a forked process here) that is SIGKILLed takes the process groups
// it guards along; released groups and a launcher that ends normally kill nothing.
#include "launcher/supervise/watchdog.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/support/poll.h"
#include "tests/support/process.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;
using testing::alive;
using testing::wait_until;

// `sleep 30` leading a process group of its own, SIGKILLed and reaped at scope exit.
class Sleeper {
 public:
  Sleeper() {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(126);
    }
    ::setpgid(pid_, pid_);
  }
  ~Sleeper() {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;

  pid_t pid() const { return pid_; }
  // Killed by SIGKILL within `timeout` (reaped then).
  bool killed(milliseconds timeout) {
    int status = 0;
    if (!wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) {
      return false;
    }
    reaped_ = true;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// A stand-in launcher: a forked process that makes a Watchdog, guards `guard`, releases
// `release`, then either waits to be killed (`die_normally` false) or destroys the watchdog and
// exits. Returns once the launcher has told its watchdog everything.
class FakeLauncher {
 public:
  FakeLauncher(const std::vector<pid_t>& guard, const std::vector<pid_t>& release,
               bool die_normally) {
    int ready[2];
    if (::pipe(ready) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(ready[0]);
      {
        Watchdog watchdog;
        for (pid_t g : guard) watchdog.guard(g);
        for (pid_t g : release) watchdog.release(g);
        if (!die_normally) {
          (void)!::write(ready[1], "x", 1);
          while (true) ::pause();
        }
      }
      (void)!::write(ready[1], "x", 1);
      ::_exit(0);
    }
    ::close(ready[1]);
    char c;
    const bool told = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
    if (!told) throw std::runtime_error("the fake launcher died early");
  }
  ~FakeLauncher() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  FakeLauncher(const FakeLauncher&) = delete;
  FakeLauncher& operator=(const FakeLauncher&) = delete;

  void sigkill() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
};

TEST(Watchdog, AKilledLauncherTakesItsGuardedGroupsAlong) {
  Sleeper a, b;
  FakeLauncher launcher({a.pid(), b.pid()}, {}, false);
  EXPECT_TRUE(alive(a.pid()));
  launcher.sigkill();
  EXPECT_TRUE(a.killed(milliseconds(5000)));
  EXPECT_TRUE(b.killed(milliseconds(5000)));
}

TEST(Watchdog, AReleasedGroupIsLeftAlone) {
  Sleeper kept, released;
  FakeLauncher launcher({kept.pid(), released.pid()}, {released.pid()}, false);
  launcher.sigkill();
  EXPECT_TRUE(kept.killed(milliseconds(5000)));
  EXPECT_TRUE(alive(released.pid()));
}

TEST(Watchdog, ALauncherThatEndsNormallyKillsNothing) {
  Sleeper guarded;
  FakeLauncher launcher({guarded.pid()}, {}, true);
  launcher.sigkill();  // already exited: only reaps it
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(alive(guarded.pid()));
}

}  // namespace
}  // namespace ddl::launcher
