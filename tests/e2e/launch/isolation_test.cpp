// What a job writes and what its workers inherit, with the built
// `launch` and hello_worker:
// - links planted in the log folder as the files the launcher writes (workerlog.N, stacks.N.txt,
//   report.json, report.html, error.N.json) are not followed: their targets stay as they were and
//   the job gets its own files;
// - workers inherit only descriptors 0, 1 and 2;
// - a helper a worker leaves running does not keep the control store's port: the next two-node
//   job on the same port starts.
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>

#include "env/contract.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

const std::string kNode0 = "127.0.0.1";
const std::string kNode1 = "127.0.0.2";

TEST(Isolation, PlantedLinksInTheLogFolderAreNotFollowed) {
  TempDir tmp, outside("ddl_isolation_outside");
  const fs::path logs = tmp.path() / "logs";
  fs::create_directories(logs);
  const fs::path precious = outside.path() / "precious";
  { std::ofstream(precious) << "precious\n"; }
  // A link to an existing file for each name, and one dangling link (its target must not be
  // created).
  const std::vector<std::string> linked{"workerlog.0", "stacks.0.txt", "report.json", "report.html",
                                        "error.0.json"};
  for (const std::string& name : linked) fs::create_symlink(precious, logs / name);
  const fs::path created = outside.path() / "created";
  fs::create_symlink(created, logs / "workerlog.1");

  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), "--log_level=debug",
                      "--print_config=false", "hello_worker", "--sleep_ms", "2000"});
  ASSERT_TRUE(all_ready(logs, 2, milliseconds(10'000))) << run.err();
  ::kill(run.pid(), SIGUSR1);  // a stack dump into stacks.0.txt
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();

  EXPECT_EQ(read_file(precious), "precious\n") << "a planted link's target was written";
  EXPECT_FALSE(fs::exists(created)) << "a dangling link's target was created";
  for (const char* name :
       {"workerlog.0", "workerlog.1", "stacks.0.txt", "report.json", "report.html"}) {
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(logs / name))) << name;
  }
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(logs / "error.0.json")))
      << "the stale error file (a link) is removed before rank 0 starts";
  EXPECT_TRUE(contains(read_file(logs / "workerlog.0"), "hello from rank 0 of 2")) << run.err();
  EXPECT_TRUE(contains(read_file(logs / "workerlog.1"), "hello from rank 1 of 2")) << run.err();
  EXPECT_TRUE(contains(read_file(logs / "stacks.0.txt"), "==== stack dump: SIGUSR1"));
  EXPECT_NE(read_file(logs / "report.json").find("{"), std::string::npos);
  // Each replaced link is named once in the launcher's log.
  EXPECT_TRUE(contains(run.err(), "'" + (logs / "workerlog.0").string() +
                                      "' was a symbolic link to '" + precious.string() + "'"))
      << run.err();
}

TEST(Isolation, WorkersInheritOnlyTheirStandardStreams) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), "--print_config=false",
                      "hello_worker", "--list_fds"});
  ASSERT_EQ(run.wait(milliseconds(20'000)), 0) << run.err();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = worker_log(logs, rank);
    EXPECT_TRUE(contains(log, "\nFDS 0 1 2 progress\n")) << log;
  }
}

// The helpers' pids ("HELPER <pid>") in a worker log.
std::vector<pid_t> helpers_in(const std::string& log) {
  std::vector<pid_t> pids;
  const std::regex helper(R"(HELPER (\d+))");
  for (std::sregex_iterator it(log.begin(), log.end(), helper), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

// Kills the helpers at scope exit, whatever the test's outcome.
struct HelperReaper {
  std::vector<pid_t> pids;
  ~HelperReaper() {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
  }
};

TEST(Isolation, HelperLeftByAWorkerDoesNotKeepTheControlStoresPort) {
  const int port = free_loopback_port();
  auto args = [&](int node, const fs::path& logs, bool leave_helper) {
    std::vector<std::string> a{"--nnodes=2",
                               "--node_rank=" + std::to_string(node),
                               "--master_addr=" + kNode0,
                               "--master_port=" + std::to_string(port),
                               "--nproc_per_node=1",
                               "--log_dir",
                               logs.string(),
                               "--print_config=false",
                               "--rendezvous_timeout=20"};
    if (node == 1) a.push_back("--node_ip=" + kNode1);
    a.push_back("hello_worker");
    if (leave_helper) a.insert(a.end(), {"--leave_helper", "30000", "--list_fds"});
    return a;
  };
  const ddl::env::EnvMap secret{{ddl::env::kJobSecret, "isolation-test-secret"}};
  HelperReaper reaper;
  {
    TempDir tmp0, tmp1;
    const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
    LaunchRun node0(tmp0, args(0, logs0, true), secret);
    LaunchRun node1(tmp1, args(1, logs1, true), secret);
    const auto code0 = node0.wait(milliseconds(30'000));
    const auto code1 = node1.wait(milliseconds(30'000));
    for (const fs::path& log : {logs0 / "workerlog.0", logs1 / "workerlog.1"}) {
      for (pid_t pid : helpers_in(read_file(log))) reaper.pids.push_back(pid);
    }
    ASSERT_EQ(code0, 0) << node0.err();
    ASSERT_EQ(code1, 0) << node1.err();
    ASSERT_EQ(reaper.pids.size(), 2u) << read_file(logs0 / "workerlog.0");
    for (pid_t pid : reaper.pids) ASSERT_TRUE(alive(pid)) << "helper " << pid << " is gone";
    EXPECT_TRUE(contains(read_file(logs0 / "workerlog.0"), "\nFDS 0 1 2 progress\n"))
        << read_file(logs0 / "workerlog.0");
  }
  // The same port again while the helpers live.
  TempDir tmp0, tmp1;
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  LaunchRun node0(tmp0, args(0, logs0, false), secret);
  LaunchRun node1(tmp1, args(1, logs1, false), secret);
  EXPECT_EQ(node0.wait(milliseconds(30'000)), 0) << node0.err();
  EXPECT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
}

}  // namespace
