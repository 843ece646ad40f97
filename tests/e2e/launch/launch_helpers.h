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
#include <cstdint>
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
#include "env/exit_codes.h"
#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace ddl::launch_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline const std::string kBin = DDL_BIN_DIR;
inline const std::string kLaunch = kBin + "/launch";
inline const std::string kHello = kBin + "/hello_worker";
inline constexpr int kExitDeadline = ddl::kExitDeadline;  // the hang guard (env/exit_codes.h)

using testing::alive;
using testing::contains;
using testing::count;
using testing::live_members;
using testing::read_file;
using testing::TempDir;
using testing::wait_until;

// A port for a job's --master_port or --started_port: free, with its neighbours, on 127.0.0.1,
// above the ephemeral range (tests/support/ports.h).
inline int free_loopback_port() { return testing::free_port_block_above_ephemeral(); }

// One run of `launch` with stdout and stderr captured in files. `prefix` goes in front of the
// launcher's argv (e.g. {"/usr/sbin/ip", "netns", "exec", NAME} to start it in a namespace).
class LaunchRun {
 public:
  LaunchRun(const TempDir& dir, const std::vector<std::string>& args,
            ddl::env::EnvMap overrides = {}, const std::vector<std::string>& prefix = {})
      : child_(spawn_options(dir, args, std::move(overrides), prefix)) {}

  pid_t pid() const { return child_.pid(); }

  // The exit code (128+signal when killed), or nullopt if it is still running after `timeout`.
  std::optional<int> wait(milliseconds timeout) { return child_.wait(timeout); }

  milliseconds elapsed() const { return child_.elapsed(); }
  std::string out() const { return child_.out(); }
  std::string err() const { return child_.err(); }

  // Worker pids (= their process groups) from the launcher's debug log "started rank N as pid P";
  // the latest start of each rank.
  std::map<int, pid_t> worker_pids() const {
    std::map<int, pid_t> pids;
    for (const auto& [rank, pid] : starts()) pids[rank] = pid;
    return pids;
  }

  // Server pids from "started server N as pid P", the latest start of each server.
  std::map<int, pid_t> server_pids() const {
    std::map<int, pid_t> pids;
    for (const auto& [index, pid] : starts("server")) pids[index] = pid;
    return pids;
  }

  // Every start of every rank (or, with role "server", every server), in order (several per
  // process after restarts).
  std::vector<std::pair<int, pid_t>> starts(const std::string& role = "rank") const {
    std::vector<std::pair<int, pid_t>> found;
    const std::regex started("started " + role + R"( (\d+) as pid (\d+))");
    const std::string text = err();
    for (std::sregex_iterator it(text.begin(), text.end(), started), end; it != end; ++it) {
      found.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
    }
    return found;
  }

 private:
  static testing::SpawnOptions spawn_options(const TempDir& dir,
                                             const std::vector<std::string>& args,
                                             ddl::env::EnvMap overrides,
                                             const std::vector<std::string>& prefix) {
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
    testing::SpawnOptions o;
    o.argv = prefix;
    o.argv.push_back(kLaunch);
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.env = std::move(env);
    o.stdout_path = dir.path() / "stdout";
    o.stderr_path = dir.path() / "stderr";
    return o;
  }

  testing::ChildProcess child_;
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

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

// A CPU cgroup giving its processes `percent` of one core (-1: no limit yet): cgroup v1's cpu
// controller (cpu.cfs_quota_us) or v2's cpu.max. Processes enter it through prefix() (and what
// they start stays in it); set_percent() changes the quota of everything in it at once. The
// destructor kills what is left in it and removes it. Needs root.
class CpuQuota {
 public:
  explicit CpuQuota(int percent) {
    const std::string name = "ddl-test-" + std::to_string(::getpid()) + "-" +
                             std::to_string(reinterpret_cast<std::uintptr_t>(this) % 100000);
    const fs::path v1 = "/sys/fs/cgroup/cpu";
    const fs::path v2 = "/sys/fs/cgroup";
    if (fs::exists(v1 / "cpu.cfs_quota_us")) {
      dir_ = v1 / name;
      fs::create_directories(dir_);
      write_text(dir_ / "cpu.cfs_period_us", "100000");
    } else if (contains(read_file(v2 / "cgroup.controllers"), "cpu")) {
      std::ofstream(v2 / "cgroup.subtree_control") << "+cpu";
      dir_ = v2 / name;
      v2_ = true;
      fs::create_directories(dir_);
    } else {
      throw std::runtime_error("no cgroup cpu controller at " + v1.string() + " or " + v2.string() +
                               ": cannot throttle a node");
    }
    set_percent(percent);
  }
  ~CpuQuota() {
    std::istringstream pids(read_file(dir_ / "cgroup.procs"));
    for (pid_t pid; pids >> pid;) ::kill(pid, SIGKILL);
    for (int i = 0; i < 50; ++i) {
      std::error_code ignored;
      if (fs::remove(dir_, ignored)) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  void set_percent(int percent) {
    if (v2_) {
      write_text(dir_ / "cpu.max",
                 (percent < 0 ? std::string("max") : std::to_string(percent * 1000)) + " 100000");
    } else {
      write_text(dir_ / "cpu.cfs_quota_us", std::to_string(percent < 0 ? -1 : percent * 1000));
    }
  }

  // In front of a launcher's argv: the shell enters the cgroup, then becomes the launcher.
  std::vector<std::string> prefix() const {
    return {"/bin/sh", "-c",
            "echo $$ > '" + (dir_ / "cgroup.procs").string() + "' && exec \"$0\" \"$@\""};
  }

 private:
  fs::path dir_;
  bool v2_ = false;
};

}  // namespace ddl::launch_test
