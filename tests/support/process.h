// Child processes for tests: start a program with its output in files, wait for it with a
// deadline, and look at what is still alive in /proc.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/poll.h"
#include "tests/support/text.h"

extern char** environ;

namespace ddl::testing {

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program's path (no PATH lookup)
  // The whole environment as NAME -> value; nullopt inherits the test's.
  std::optional<std::map<std::string, std::string>> env;
  std::filesystem::path stdout_path;
  std::optional<std::filesystem::path> stderr_path;  // nullopt: into stdout_path as well
  bool own_process_group = false;  // the child leads a new group (killed as a whole at the end)
};

// One started program. The destructor SIGKILLs it (its group, when it leads one) and reaps it if
// it is still running, so a failing test leaves nothing behind.
class ChildProcess {
 public:
  explicit ChildProcess(SpawnOptions options) : options_(std::move(options)) {
    std::vector<char*> argv;
    for (auto& a : options_.argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> envv;
    std::vector<char*> envp;
    if (options_.env) {
      for (const auto& [k, v] : *options_.env) envv.push_back(k + "=" + v);
      for (auto& e : envv) envp.push_back(e.data());
      envp.push_back(nullptr);
    }
    char** child_env = options_.env ? envp.data() : environ;
    started_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed for " + options_.argv.at(0));
    if (pid_ == 0) {
      if (options_.own_process_group) ::setpgid(0, 0);
      const int out = ::open(options_.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = options_.stderr_path
                          ? ::open(options_.stderr_path->c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)
                          : out;
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execve(argv[0], argv.data(), child_env);
      ::_exit(126);
    }
    if (options_.own_process_group) ::setpgid(pid_, pid_);  // no race with the child's own call
  }
  ~ChildProcess() {
    if (!exit_code_ && pid_ > 0) {
      ::kill(options_.own_process_group ? -pid_ : pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    } else if (options_.own_process_group && pid_ > 0) {
      ::kill(-pid_, SIGKILL);  // whatever of its group is left
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The exit code (128+signal when killed), or nullopt if it still runs after `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    if (exit_code_) return exit_code_;
    int status = 0;
    const bool done =
        wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!done) return std::nullopt;
    elapsed_ = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - started_);
    signaled_ = WIFSIGNALED(status);
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

  // True once wait() saw the process die by a signal.
  bool signaled() const { return signaled_; }
  // Start to exit, once wait() returned a code.
  std::chrono::milliseconds elapsed() const { return elapsed_; }
  std::string out() const { return read_file(options_.stdout_path); }
  std::string err() const {
    return options_.stderr_path ? read_file(*options_.stderr_path) : out();
  }

 private:
  SpawnOptions options_;
  pid_t pid_ = -1;
  std::chrono::steady_clock::time_point started_;
  std::chrono::milliseconds elapsed_{0};
  std::optional<int> exit_code_;
  bool signaled_ = false;
};

// Field `n` (1-based, as in proc(5)) of /proc/<pid>/stat, if the process exists.
inline std::optional<std::string> stat_field(pid_t pid, int n) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t paren = stat.rfind(')');
  if (stat.empty() || paren == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= n && rest >> field; ++i) {
  }
  return field;
}

// Alive = exists and is not a zombie (orphans whose reaper is slow do not count).
inline bool alive(pid_t pid) {
  auto state = stat_field(pid, 3);
  return state && *state != "Z" && *state != "X";
}

// Live processes whose process group is one of `groups`.
inline std::vector<pid_t> live_members(const std::set<pid_t>& groups) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    auto pgrp = stat_field(pid, 5);
    if (pgrp && groups.count(std::stoi(*pgrp)) && alive(pid)) found.push_back(pid);
  }
  return found;
}

}  // namespace ddl::testing
