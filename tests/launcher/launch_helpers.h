// Helpers shared by the launcher's integration tests (launch_test.cpp, multinode_test.cpp): run
// the built `launch`, wait for conditions with deadlines, find the processes a job left behind.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "env/contract.h"
#include "launcher/ports.h"

namespace ddl::launch_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline const std::string kBin = DDL_BIN_DIR;
inline const std::string kLaunch = kBin + "/launch";
inline const std::string kHello = kBin + "/hello_worker";
inline constexpr int kHangExitCode = 124;  // launcher/supervisor.h; this test links no launcher code

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Polls `done` every 10 ms until it holds or `timeout` passes.
// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then closed), below 65000 so
// that a few ports after it exist too (--started_port P uses P, P+1, ...).
inline int free_loopback_port() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const std::uint16_t port = ddl::launcher::pick_free_ports("127.0.0.1", 1).front();
    if (port < 65000) return port;
  }
  ADD_FAILURE() << "no free port below 65000 on 127.0.0.1";
  return 0;
}

inline bool wait_until(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

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
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    auto pgrp = stat_field(pid, 5);
    if (pgrp && groups.count(std::stoi(*pgrp)) && alive(pid)) found.push_back(pid);
  }
  return found;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ddl_launch_test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// One run of `launch` with stdout and stderr captured in files.
class LaunchRun {
 public:
  LaunchRun(const TempDir& dir, const std::vector<std::string>& args,
            ddl::env::EnvMap overrides = {})
      : out_(dir.path() / "stdout"), err_(dir.path() / "stderr") {
    ddl::env::EnvMap env = ddl::env::current_environment();
    env.erase(ddl::env::kOmpNumThreads);
    env.erase(ddl::env::kLogLevel);
    // A test chooses the job's identity and node layout itself, whatever the caller's shell has.
    env.erase(ddl::env::kJobId);
    env.erase(ddl::env::kJobSecret);
    for (auto it = env.begin(); it != env.end();) {
      it = it->first.rfind("SLURM_", 0) == 0 ? env.erase(it) : std::next(it);
    }
    for (const auto& [k, v] : overrides) env[k] = v;
    std::vector<std::string> argv{kLaunch};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> envv;
    for (const auto& [k, v] : env) envv.push_back(k + "=" + v);
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : envv) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    started_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      int o = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, 1);
      ::dup2(e, 2);
      ::execve(cargv[0], cargv.data(), cenv.data());
      ::_exit(126);
    }
  }
  ~LaunchRun() {
    if (!exit_code_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }

  // The exit code (128+signal when killed), or nullopt if it is still running after `timeout`.
  std::optional<int> wait(milliseconds timeout) {
    if (exit_code_) return exit_code_;
    int status = 0;
    const bool done =
        wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!done) return std::nullopt;
    elapsed_ = std::chrono::duration_cast<milliseconds>(Clock::now() - started_);
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

  milliseconds elapsed() const { return elapsed_; }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }

  // Worker pids (= their process groups) from the launcher's debug log "started rank N as pid P";
  // the latest start of each rank.
  std::map<int, pid_t> worker_pids() const {
    std::map<int, pid_t> pids;
    for (const auto& [rank, pid] : starts()) pids[rank] = pid;
    return pids;
  }

  // Every start of every rank, in order (several per rank after restarts).
  std::vector<std::pair<int, pid_t>> starts() const {
    std::vector<std::pair<int, pid_t>> found;
    static const std::regex started(R"(started rank (\d+) as pid (\d+))");
    const std::string text = err();
    for (std::sregex_iterator it(text.begin(), text.end(), started), end; it != end; ++it) {
      found.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
    }
    return found;
  }

 private:
  fs::path out_, err_;
  pid_t pid_ = -1;
  Clock::time_point started_;
  milliseconds elapsed_{0};
  std::optional<int> exit_code_;
};

inline std::set<pid_t> groups_of(const std::map<int, pid_t>& pids) {
  std::set<pid_t> groups;
  for (const auto& [rank, pid] : pids) groups.insert(pid);
  return groups;
}

// Waits until every worker log in `dir` for ranks [0, n) says READY.
inline bool all_ready(const fs::path& dir, int n, milliseconds timeout) {
  return wait_until(
      [&] {
        for (int r = 0; r < n; ++r) {
          if (!contains(read_file(dir / ("workerlog." + std::to_string(r))), "READY")) return false;
        }
        return true;
      },
      timeout);
}

inline void expect_nothing_left(const std::set<pid_t>& groups) {
  EXPECT_TRUE(wait_until([&] { return live_members(groups).empty(); }, milliseconds(2000)))
      << live_members(groups).size() << " process(es) of the job still alive";
}

inline void expect_nothing_left(const std::map<int, pid_t>& pids) { expect_nothing_left(groups_of(pids)); }

// Every process group the launcher ever started, across restarts.
inline std::set<pid_t> all_groups(const LaunchRun& run) {
  std::set<pid_t> groups;
  for (const auto& [rank, pid] : run.starts()) groups.insert(pid);
  return groups;
}

inline std::string worker_log(const fs::path& dir, int rank) {
  return read_file(dir / ("workerlog." + std::to_string(rank)));
}

// The values of "ENV NAME=value" lines in a log, in order (one per start of the rank).
inline std::vector<std::string> env_values(const std::string& log, const std::string& name) {
  std::vector<std::string> values;
  const std::regex line("ENV " + name + "=(\\S+)");
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it) {
    values.push_back((*it)[1]);
  }
  return values;
}

}  // namespace ddl::launch_test
