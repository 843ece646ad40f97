// Stragglers and the step timeout end to end (launcher/health/, docs/failures.md): real workers
// report their steps on DDL_PROGRESS_FD and are slowed or stopped for real: a rank that shares its
// core with a busy loop is named a straggler, a SIGSTOPped rank is caught at the job's own pace
// (its stacks dumped, exit code 124), a Python worker speaks the protocol with os.write, and a
// worker that reports nothing is left to the fixed hang guard as before. Across nodes: a node whose
// launcher's CPU cgroup is throttled mid-run is named by node 0, and evicted from an elastic job.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;
using std::chrono::milliseconds;

// Waits until `path` contains `text`.
bool wait_for_text(const fs::path& path, const std::string& text, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (contains(read_file(path), text)) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

// A process that spins on `cpu` until destroyed: real competition for that core.
class BusyLoop {
 public:
  explicit BusyLoop(int cpu) {
    pid_ = ::fork();
    if (pid_ == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      ::sched_setaffinity(0, sizeof set, &set);
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
  }
  ~BusyLoop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  BusyLoop(const BusyLoop&) = delete;
  BusyLoop& operator=(const BusyLoop&) = delete;

 private:
  pid_t pid_ = -1;
};

TEST(Pace, ARankSharingItsCoreWithABusyLoopIsNamedAStraggler) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two CPUs";
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  // Each rank on a core of its own (--bind=core: rank 0 on CPU 0, rank 1 on CPU 1), 30 ms of
  // computing per step; from rank 1's 15th step on, a busy loop on CPU 1 halves its share of it.
  LaunchRun run(tmp, {"--nproc_per_node=2", "--bind=core", "--log_dir", logs.string(),
                      "--print_config=false", "hello_worker", "--steps", "60", "--busy_ms", "30"});
  ASSERT_TRUE(wait_for_text(logs / "workerlog.1", "rank 1 step 14 ", milliseconds(30'000)))
      << run.err();
  std::optional<BusyLoop> busy(std::in_place, 1);
  const int turned_slow = 16;  // the first step (as reported, from 1) that can be slow
  ASSERT_EQ(run.wait(milliseconds(60'000)), 0) << run.err();
  busy.reset();
  const std::string err = run.err();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      err, m,
      std::regex(R"(straggler: rank 1 takes (\d+\.\d) ms of its own per step, (\d+\.\d\d)x the )"
                 R"(other ranks' median (\d+\.\d) ms \(last 7 steps, at step (\d+)\))")))
      << err;
  EXPECT_GE(std::stod(m[2]), 1.5) << m[0];
  EXPECT_LE(std::stoi(m[4]), turned_slow + 10) << "named within 10 steps: " << m[0];
  EXPECT_FALSE(contains(err, "straggler: rank 0")) << err;
  // The run report keeps it.
  const std::string report = read_file(logs / "report.json");
  EXPECT_TRUE(contains(report, "straggler: rank 1 takes")) << report.substr(0, 2000);
}

TEST(Pace, EqualRanksAreNoStragglers) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), "--print_config=false",
                      "hello_worker", "--steps", "40", "--step_ms", "20", "--busy_ms", "5"});
  ASSERT_EQ(run.wait(milliseconds(60'000)), 0) << run.err();
  EXPECT_FALSE(contains(run.err(), "straggler")) << run.err();
  EXPECT_FALSE(contains(run.err(), "step timeout")) << run.err();
}

TEST(Pace, AStoppedRankIsCaughtAtTheJobsPaceAndItsStackDumped) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--step_timeout_floor=0.3", "--log_dir", logs.string(),
                      "--log_level=debug", "--print_config=false", "hello_worker", "--steps", "600",
                      "--step_ms", "100"});
  ASSERT_TRUE(wait_for_text(logs / "workerlog.1", "rank 1 step 12 ", milliseconds(30'000)))
      << run.err();
  const auto pids = run.worker_pids();
  ASSERT_EQ(pids.count(1), 1u) << run.err();
  ASSERT_EQ(::kill(pids.at(1), SIGSTOP), 0);
  // The pace is 100 ms a step: the timeout is 4 x 100 ms (above the 0.3 s floor).
  ASSERT_EQ(run.wait(milliseconds(30'000)), kExitDeadline) << run.err();
  const std::string err = run.err();
  EXPECT_TRUE(std::regex_search(
      err, std::regex(R"(step timeout: no step finished for \d+\.\d ms by rank 1 \(the job's pace )"
                      R"(is 1\d\d\.\d ms per step; the timeout 4\d\d\.\d ms is 4 times that)")))
      << err;
  EXPECT_TRUE(contains(err, "rank 1 is stopped (state T: SIGSTOP or a debugger)")) << err;
  EXPECT_TRUE(contains(err, "launcher exit code 124")) << err;
  const fs::path stacks = logs / "stacks.0.txt";
  ASSERT_TRUE(fs::exists(stacks)) << err;
  EXPECT_TRUE(contains(read_file(stacks), "step timeout: no step finished")) << read_file(stacks);
  expect_nothing_left(pids);
}

TEST(Pace, APythonWorkerReportsItsStepsWithOsWrite) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  const fs::path script = tmp.path() / "train.py";
  std::ofstream(script) << R"(import os, time
fd = int(os.environ["DDL_PROGRESS_FD"])
def report(line):
    try:
        os.write(fd, (line + "\n").encode())
    except OSError:
        pass
for step in range(1, 16):
    time.sleep(0.05)
    report("step %d compute=0.05" % step)
report("not a message")
report("pause evaluation")
time.sleep(1.0)
for step in range(16, 21):
    time.sleep(0.05)
    report("step %d" % step)
time.sleep(60)
)";
  LaunchRun run(tmp, {"--nproc_per_node=1", "--step_timeout_floor=0.2", "--log_dir", logs.string(),
                      "--print_config=false", script.string()});
  ASSERT_EQ(run.wait(milliseconds(30'000)), kExitDeadline) << run.err();
  const std::string err = run.err();
  // The pause kept the evaluation's 1 s from counting; the silence after step 20 did not.
  EXPECT_TRUE(contains(err, "step timeout: no step finished for")) << err;
  EXPECT_TRUE(contains(err, "last steps: rank 0 at step 20 ")) << err;
  EXPECT_TRUE(
      contains(err,
               "rank 0: not a progress message (not step, pause, checkpoint, phase or epoch): "
               "'not a message'"))
      << err;
}

TEST(Pace, AWorkerThatReportsNothingIsWatchedAsBefore) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--step_timeout_floor=0.1", "--log_dir", logs.string(),
                      "--print_config=false", "hello_worker", "--sleep_ms", "1500"});
  ASSERT_EQ(run.wait(milliseconds(30'000)), 0) << run.err();
  EXPECT_FALSE(contains(run.err(), "step timeout")) << run.err();
}

// Every start fails at the same step: after the first start, two restarts in a row make no
// progress, and the job stops with 93 although three more restarts were allowed.
TEST(Pace, RestartsThatMakeNoProgressEndTheJobWithExitCode93) {
  TempDir tmp;
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(
      tmp,
      {"--nproc_per_node=1", "--max_restarts=5", "--no_progress_restarts=2", "--log_dir",
       logs.string(), "--log_level=debug", "--print_config=false", "hello_worker", "--steps", "20"},
      {{ddl::env::kFault, "rank=0,step=5,exit=3"}});
  ASSERT_EQ(run.wait(milliseconds(30'000)), 93) << run.err();
  const std::string err = run.err();
  EXPECT_EQ(run.starts().size(), 3u) << err;
  EXPECT_TRUE(contains(err,
                       "not restarting: no progress: generations 1 and 2 failed without "
                       "passing step 5 (the furthest any generation reached) "
                       "(--no_progress_restarts=2); exit code 93"))
      << err;
  EXPECT_TRUE(contains(err, "launcher exit code 93")) << err;
}

// Stragglers across nodes: three launchers on loopback running hello_worker (10 ms of work per
// step); once node 2's rank is at step 30, its launcher's CPU cgroup (and so its worker's) gets a
// fraction of a core. Node 0, which watches the others, names node 2 from the paces the nodes'
// heartbeats carry.
struct NodeRun {
  TempDir dir;
  fs::path logs = dir.path() / "logs";
  std::optional<LaunchRun> run;
};

void start_nodes(NodeRun (&nodes)[3], const std::string& nnodes, const CpuQuota& quota,
                 const std::vector<std::string>& more, int steps) {
  const int port = free_loopback_port();
  for (int k = 0; k < 3; ++k) {
    std::vector<std::string> args = {
        "--nnodes=" + nnodes,      "--node_rank=" + std::to_string(k),
        "--master_addr=127.0.0.1", "--master_port=" + std::to_string(port),
        "--nproc_per_node=1",      "--log_dir",
        nodes[k].logs.string(),    "--print_config=false",
        "--rendezvous_timeout=60"};
    args.insert(args.end(), more.begin(), more.end());
    args.insert(args.end(), {kHello, "--steps", std::to_string(steps), "--busy_ms", "10"});
    nodes[k].run.emplace(nodes[k].dir, args,
                         ddl::env::EnvMap{{ddl::env::kJobSecret, "pace-test-secret"}},
                         k == 2 ? quota.prefix() : std::vector<std::string>{});
  }
}

TEST(NodePace, ASlowNodeIsEvictedAndTheElasticJobGoesOnWithoutIt) {
  CpuQuota quota(-1);
  NodeRun nodes[3];
  start_nodes(nodes, "2:3", quota, {"--max_restarts=1", "--straggler=evict"}, 400);
  ASSERT_TRUE(wait_for_text(nodes[2].logs / "workerlog.2", "rank 2 step 30 ", milliseconds(30'000)))
      << nodes[2].run->err();
  quota.set_percent(5);
  const std::optional<int> code2 = nodes[2].run->wait(milliseconds(60'000));
  ASSERT_TRUE(code2) << "node 2 still runs:\n" << nodes[2].run->err();
  EXPECT_EQ(*code2, 1) << nodes[2].run->err();
  EXPECT_TRUE(contains(nodes[2].run->err(),
                       "this node (node 2) was evicted from the job: straggler: node 2 takes"))
      << nodes[2].run->err();
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(nodes[k].run->wait(milliseconds(60'000)), 0) << nodes[k].run->err();
    EXPECT_TRUE(contains(nodes[k].run->err(),
                         "generation 0 failed on node 2: node 2 is a straggler: re-forming the "
                         "job without it; restarting the job"))
        << nodes[k].run->err();
    EXPECT_TRUE(
        contains(worker_log(nodes[k].logs, k), "hello from rank " + std::to_string(k) + " of 2"))
        << worker_log(nodes[k].logs, k);
  }
  EXPECT_TRUE(contains(nodes[0].run->err(), "evicting node 2 (--straggler=evict)"))
      << nodes[0].run->err();
  // Node 0's run report keeps the verdict with its line.
  const std::string report = read_file(nodes[0].logs / "report.json");
  EXPECT_TRUE(contains(report, "\"process\":\"node 2\"")) << report.substr(0, 3000);
  EXPECT_TRUE(contains(report, "evicting node 2 (--straggler=evict)")) << report.substr(0, 3000);
}

TEST(NodePace, ASlowNodeOfAFixedJobIsNamedAndTheJobGoesOn) {
  CpuQuota quota(-1);
  NodeRun nodes[3];
  start_nodes(nodes, "3", quota, {}, 60);
  ASSERT_TRUE(wait_for_text(nodes[2].logs / "workerlog.2", "rank 2 step 30 ", milliseconds(30'000)))
      << nodes[2].run->err();
  // 5% of a core: every 10 ms step spans two of the quota's 100 ms periods. (At 20%, two steps
  // of three would still fit in a period's 20 ms and the median step would not look slow.)
  quota.set_percent(5);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(nodes[k].run->wait(milliseconds(60'000)), 0) << nodes[k].run->err();
  }
  EXPECT_TRUE(contains(nodes[0].run->err(), "straggler: node 2 takes")) << nodes[0].run->err();
  EXPECT_FALSE(contains(nodes[0].run->err(), "straggler: node 1 takes")) << nodes[0].run->err();
  const std::string report = read_file(nodes[0].logs / "report.json");
  EXPECT_TRUE(contains(report, "\"process\":\"node 2\"")) << report.substr(0, 3000);
  EXPECT_TRUE(contains(report, "straggler: node 2 takes")) << report.substr(0, 3000);
}

}  // namespace
