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

}  // namespace ddl::launch_test
