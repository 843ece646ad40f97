#include "launcher/diagnose/tool_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "env/exit_codes.h"

namespace ddl::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// The longest a poll() waits before the exits are looked at again: a tool that exited while
// something else still holds its pipes open is noticed only that way.
constexpr std::chrono::milliseconds kPollSlice{20};

constexpr std::size_t kReadChunk = 64 * 1024;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// One running tool and the read ends of its stdout [0] and stderr [1].
struct Child {
  ToolResult* result = nullptr;
  std::array<int, 2> fds{-1, -1};
  std::array<bool, 2> cut{false, false};
  bool done_exiting = false;  // reaped, or found gone without a status
};

// In the forked child: only async-signal-safe calls from here to execve.
[[noreturn]] void exec_tool(char* const* argv, char* const* envp, pid_t parent, int in_fd,
                            int out_fd, int err_fd, int max_fd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between fork() and prctl(); then nobody would kill us.
  if (::getppid() != parent) ::_exit(kExitNotFound);
  ::dup2(in_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // The caller's own descriptors (worker pipes, the watchdog's pipe) must not live on in a tool
  // that might outlast them; not all of them are close-on-exec.
  if (::close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < max_fd; ++fd) ::close(fd);
  }
  // Handlers are reset by exec, but ignored signals stay ignored (gdb needs SIGCHLD) and the mask
  // is inherited (an event loop may block signals).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int signo = 1; signo < NSIG; ++signo) ::sigaction(signo, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(argv[0], argv, envp);
  const char message[] = "cannot execute the stack tool\n";
  [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
  ::_exit(kExitNotFound);
}

// Starts one tool; fills child.fds and result.pid, or result.start_error.
void start_tool(const ToolCommand& command, char* const* envp, int devnull, int max_fd,
                Child& child) {
  ToolResult& result = *child.result;
  if (command.argv.empty()) {
    result.start_error = "no command";
    return;
  }
  std::vector<std::string> args = command.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    result.start_error = std::string("pipe failed: ") + std::strerror(errno);
    for (int* fd : {&out[0], &out[1], &err[0], &err[1]}) close_fd(*fd);
    return;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.start_error = std::string("fork failed: ") + std::strerror(errno);
    for (int* fd : {&out[0], &out[1], &err[0], &err[1]}) close_fd(*fd);
    return;
  }
  if (pid == 0) exec_tool(argv.data(), envp, parent, devnull, out[1], err[1], max_fd);
  ::setpgid(pid, pid);  // also here, so that the group exists before we might kill it
  close_fd(out[1]);
  close_fd(err[1]);
  for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  child.fds = {out[0], err[0]};
  result.pid = pid;
}

// Reads what is available on stream `k` without blocking; closes it at EOF or on an error.
void drain(Child& child, int k) {
  int& fd = child.fds[k];
  std::string& buffer = k == 0 ? child.result->out : child.result->err;
  std::array<char, kReadChunk> chunk;
  while (fd >= 0) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n > 0) {
      const std::size_t room = kMaxToolOutputBytes - std::min(buffer.size(), kMaxToolOutputBytes);
      buffer.append(chunk.data(), std::min(room, static_cast<std::size_t>(n)));
      if (static_cast<std::size_t>(n) > room) child.cut[k] = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close_fd(fd);  // EOF or a read error: nothing more will come
  }
}

// Collects the status of an exited tool. Its group is SIGKILLed first, while its pid is still
// held by the zombie (so the group id cannot belong to anyone else): a child it left behind
// would otherwise hold the pipes open. Returns true once the tool is reaped or known gone.
bool reap_if_exited(Child& child) {
  ToolResult& result = *child.result;
  siginfo_t info{};
  int r;
  do {
    r = ::waitid(P_PID, static_cast<id_t>(result.pid), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    // ECHILD: reaped by someone else (SIGCHLD ignored, or a waitpid(-1) elsewhere).
    child.done_exiting = true;
    return true;
  }
  if (info.si_pid != result.pid) return false;
  ::kill(-result.pid, SIGKILL);
  int status = 0;
  pid_t w;
  do {
    w = ::waitpid(result.pid, &status, 0);  // a zombie: returns at once
  } while (w < 0 && errno == EINTR);
  result.reaped = w == result.pid;
  result.status = status;
  child.done_exiting = true;
  return true;
}

// SIGKILLs a tool still running at the deadline, with its group, and reaps it within
// kKillReapTimeout.
void kill_and_reap(Child& child) {
  ToolResult& result = *child.result;
  result.timed_out = true;
  ::kill(-result.pid, SIGKILL);
  const auto give_up = Clock::now() + kKillReapTimeout;
  for (;;) {
    int status = 0;
    const pid_t w = ::waitpid(result.pid, &status, WNOHANG);
    if (w == result.pid) {
      result.reaped = true;
      result.status = status;
      break;
    }
    if (w < 0 && errno != EINTR) break;  // ECHILD: gone
    if (Clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  child.done_exiting = true;
}

void mark_cut(Child& child) {
  for (int k = 0; k < 2; ++k) {
    if (!child.cut[k]) continue;
    std::string& buffer = k == 0 ? child.result->out : child.result->err;
    buffer += "\n[... cut at " + std::to_string(kMaxToolOutputBytes) + " bytes ...]\n";
  }
}

}  // namespace

std::vector<ToolResult> run_tools(const std::vector<ToolCommand>& commands, const env::EnvMap& env,
                                  Clock::time_point deadline) {
  std::vector<ToolResult> results(commands.size());
  if (commands.empty()) return results;

  // Everything the children need is made before the first fork.
  std::vector<std::string> env_entries;
  for (const auto& [name, value] : env) env_entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env_entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  struct rlimit files {};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < 65536
                         ? static_cast<int>(files.rlim_cur)
                         : 65536;
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

  std::vector<Child> children(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    children[i].result = &results[i];
    if (devnull < 0) {
      results[i].start_error = std::string("cannot open /dev/null: ") + std::strerror(errno);
      children[i].done_exiting = true;
      continue;
    }
    start_tool(commands[i], envp.data(), devnull, max_fd, children[i]);
    if (results[i].pid < 0) children[i].done_exiting = true;
  }
  close_fd(devnull);

  std::vector<pollfd> polled;
  std::vector<std::pair<Child*, int>> owners;
  for (;;) {
    bool all_done = true;
    for (Child& c : children) {
      if (!c.done_exiting) reap_if_exited(c);
      if (!c.done_exiting || c.fds[0] >= 0 || c.fds[1] >= 0) all_done = false;
    }
    const auto now = Clock::now();
    if (all_done || now >= deadline) break;

    polled.clear();
    owners.clear();
    for (Child& c : children) {
      for (int k = 0; k < 2; ++k) {
        if (c.fds[k] < 0) continue;
        polled.push_back({c.fds[k], POLLIN, 0});
        owners.emplace_back(&c, k);
      }
    }
    const auto wait =
        std::min(std::chrono::ceil<std::chrono::milliseconds>(deadline - now), kPollSlice);
    const int ready = ::poll(polled.data(), polled.size(), static_cast<int>(wait.count()));
    if (ready <= 0) continue;  // timeout, EINTR (SIGCHLD), or a failure the deadline bounds
    for (std::size_t i = 0; i < polled.size(); ++i) {
      if (polled[i].revents != 0) drain(*owners[i].first, owners[i].second);
    }
  }

  for (Child& c : children) {
    if (!c.done_exiting) kill_and_reap(c);
    for (int k = 0; k < 2; ++k) {
      if (c.fds[k] >= 0) drain(c, k);
      close_fd(c.fds[k]);
    }
    mark_cut(c);
  }
  return results;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signo = WTERMSIG(status);
    const char* name = sigabbrev_np(signo);
    return "was killed by " +
           (name ? "SIG" + std::string(name) : "signal " + std::to_string(signo));
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace ddl::launcher
