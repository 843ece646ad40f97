#include "launcher/supervise/watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "launcher/supervise/output.h"

namespace ddl::launcher {

namespace {

constexpr std::int32_t kDone = 0;

// The watchdog process: reads group ids (positive: guard, negative: release, 0: done) until EOF,
// then SIGKILLs what it still guards.
[[noreturn]] void watch(int fd, const sigset_t& mask) {
  ::dup2(fd, STDIN_FILENO);
  ::close_range(3, ~0U, 0);  // no copies of the launcher's pipes, logs or sockets
  // Ctrl-C in a terminal reaches the launcher's whole process group; the watchdog stays.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  for (int signo : {SIGTERM, SIGCHLD, SIGPIPE}) ::signal(signo, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  std::vector<pid_t> groups;
  std::int32_t value = 0;
  while (true) {
    ssize_t n = ::read(STDIN_FILENO, &value, sizeof value);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof value)) break;  // EOF: the launcher is gone
    if (value == kDone) ::_exit(0);
    if (value > 0) {
      groups.push_back(value);
    } else {
      groups.erase(std::remove(groups.begin(), groups.end(), -value), groups.end());
    }
  }
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  ::_exit(0);
}

}  // namespace

Watchdog::Watchdog() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    spdlog::warn("no watchdog (pipe2: {}): a SIGKILLed launcher may leave grandchildren behind",
                 std::strerror(errno));
    return;
  }
  // Signals stay blocked across fork() until the child has dropped the launcher's handlers.
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) watch(fds[0], old);  // never returns
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    spdlog::warn("no watchdog (fork: {}): a SIGKILLed launcher may leave grandchildren behind",
                 std::strerror(errno));
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  ::close(fds[0]);
  pid_ = pid;
  fd_ = fds[1];
}

Watchdog::Watchdog(Watchdog&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), fd_(std::exchange(o.fd_, -1)) {}

Watchdog::~Watchdog() {
  if (fd_ >= 0) {
    send(kDone);
    ::close(fd_);
  }
  if (pid_ <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      break;
    }
    ::usleep(1000);
  }
}

void Watchdog::guard(pid_t group) { tell(group); }

void Watchdog::release(pid_t group) { tell(-group); }

void Watchdog::tell(std::int32_t value) {
  if (fd_ >= 0 && !send(value)) {
    spdlog::warn("the watchdog is gone: a SIGKILLed launcher may leave grandchildren behind");
    ::close(fd_);
    fd_ = -1;
  }
}

bool Watchdog::send(std::int32_t value) {
  return write_all(fd_, reinterpret_cast<const char*>(&value), sizeof value);
}

}  // namespace ddl::launcher
