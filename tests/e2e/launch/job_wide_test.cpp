// A job of several nodes recovers as one: `launch` processes on loopback addresses (Linux routes
// all of 127/8 to lo), hello_workers as ranks. A failure on one node restarts every node's ranks
// together into the next generation; an elastic job (--nnodes=MIN:MAX) goes on without a lost
// node and takes in a node that comes later.
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>

#include "env/contract.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

constexpr const char* kSecret = "job-wide-test-secret";

std::string node_ip(int node) { return "127.0.0." + std::to_string(node + 1); }

ddl::env::EnvMap job_env(const std::string& fault = "") {
  ddl::env::EnvMap env{{ddl::env::kJobSecret, kSecret}};
  if (!fault.empty()) env[ddl::env::kFault] = fault;
  return env;
}

// torchrun's spelling for node `node` of a job of `nnodes` ("2" or "2:3"), 2 ranks per node.
std::vector<std::string> node_args(int node, const std::string& nnodes, int port,
                                   const fs::path& logs, const std::vector<std::string>& extra,
                                   const std::vector<std::string>& worker) {
  std::vector<std::string> args{"--nnodes=" + nnodes,
                                "--node_rank=" + std::to_string(node),
                                "--master_addr=" + node_ip(0),
                                "--master_port=" + std::to_string(port),
                                "--node_ip=" + node_ip(node),
                                "--nproc_per_node=2",
                                "--log_dir",
                                logs.string(),
                                "--log_level=debug",
                                "--print_config=false",
                                "--rendezvous_timeout=30",
                                "--kill_timeout=3"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("hello_worker");
  args.insert(args.end(), worker.begin(), worker.end());
  return args;
}

// Milliseconds since midnight of the first launcher log line containing `marker` (spdlog's
// "[YYYY-MM-DD HH:MM:SS.mmm]" prefix); nullopt when there is none.
std::optional<long> stamp_of(const std::string& log, const std::string& marker) {
  const std::size_t at = log.find(marker);
  if (at == std::string::npos) return std::nullopt;
  const std::size_t begin = log.rfind('\n', at);
  const std::string line = log.substr(begin == std::string::npos ? 0 : begin + 1, at);
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(R"(\d{4}-\d\d-\d\d (\d\d):(\d\d):(\d\d)\.(\d{3}))"))) {
    return std::nullopt;
  }
  return ((std::stol(m[1]) * 60 + std::stol(m[2])) * 60 + std::stol(m[3])) * 1000 +
         std::stol(m[4]);
}

const std::vector<std::string> kSteps{"--steps", "40", "--step_ms", "50", "--show_env",
                                      "DDL_JOB_ID", "--show_env", "WORLD_SIZE"};

TEST(JobWide, AFailureOnNode1RestartsBothNodesTogether) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const std::vector<std::string> extra{"--max_restarts=1"};
  // Rank 3 (node 1) exits with 7 at step 5 of the first generation only.
  const auto env = job_env("rank=3,step=5,exit=7,restart=0");
  LaunchRun node0(tmp0, node_args(0, "2", port, logs0, extra, kSteps), env);
  LaunchRun node1(tmp1, node_args(1, "2", port, logs1, extra, kSteps), env);
  ASSERT_EQ(node1.wait(milliseconds(60'000)), 0) << node1.err() << "\nnode 0:\n" << node0.err();
  ASSERT_EQ(node0.wait(milliseconds(60'000)), 0) << node0.err();

  // Node 0 heard of it, stopped its ranks and both started generation 1, within 5 s.
  EXPECT_TRUE(contains(node0.err(), "generation 0 failed on node 1: rank 3 exited with code 7"))
      << node0.err();
  const auto failed = stamp_of(node1.err(), "rank 3 (pid");
  const auto restarted0 = stamp_of(node0.err(), "restart 1 of 1: starting 2 worker(s)");
  const auto restarted1 = stamp_of(node1.err(), "restart 1 of 1: starting 2 worker(s)");
  ASSERT_TRUE(failed && restarted0 && restarted1) << node0.err() << node1.err();
  EXPECT_LT(*restarted0 - *failed, 5000) << node0.err() << node1.err();
  EXPECT_LT(*restarted1 - *failed, 5000) << node1.err();
  EXPECT_TRUE(contains(node0.err(), "first failure of each generation:\n    generation 0 failed "
                                    "on node 1: rank 3 exited with code 7"))
      << node0.err();

  // Every rank ran to the end in generation 1, with generation 1's job id everywhere.
  std::string job_id;
  for (int r = 0; r < 4; ++r) {
    const std::string log = worker_log(r < 2 ? logs0 : logs1, r);
    SCOPED_TRACE("workerlog." + std::to_string(r) + ":\n" + log);
    EXPECT_TRUE(contains(log, "==== restart 1 ===="));
    EXPECT_TRUE(contains(log, "rank " + std::to_string(r) + " step 39 restart 1"));
    const auto ids = env_values(log, ddl::env::kJobId);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids.front().substr(ids.front().size() - 3), "-g0");
    EXPECT_EQ(ids.back().substr(ids.back().size() - 3), "-g1");
    if (r == 0) job_id = ids.back();
    EXPECT_EQ(ids.back(), job_id);
  }
  expect_nothing_left(node0.worker_pids());
  expect_nothing_left(node1.worker_pids());
}

TEST(JobWide, WithoutRestartsLeftBothNodesStopWithTheFailure) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const auto env = job_env("rank=2,step=3,exit=9");
  LaunchRun node0(tmp0, node_args(0, "2", port, logs0, {"--max_restarts=1"}, kSteps), env);
  LaunchRun node1(tmp1, node_args(1, "2", port, logs1, {"--max_restarts=1"}, kSteps), env);
  EXPECT_EQ(node1.wait(milliseconds(60'000)), 9) << node1.err();
  EXPECT_EQ(node0.wait(milliseconds(60'000)), 9) << node0.err();
  EXPECT_TRUE(contains(node1.err(), "job failed after 1 restart(s): rank 2")) << node1.err();
  EXPECT_TRUE(contains(node0.err(), "first failure: node 1 rank 2 exit 9")) << node0.err();
  expect_nothing_left(node0.worker_pids());
  expect_nothing_left(node1.worker_pids());
}

TEST(JobWide, ElasticJobGoesOnWithoutALostNode) {
  TempDir tmp0, tmp1, tmp2;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs",
                 logs2 = tmp2.path() / "logs";
  const std::vector<std::string> extra{"--max_restarts=1", "--rdzv_conf=last_call_timeout=5"};
  const std::vector<std::string> worker{"--steps", "60", "--step_ms", "50", "--show_env",
                                        "WORLD_SIZE"};
  LaunchRun node0(tmp0, node_args(0, "2:3", port, logs0, extra, worker), job_env());
  LaunchRun node1(tmp1, node_args(1, "2:3", port, logs1, extra, worker), job_env());
  LaunchRun node2(tmp2, node_args(2, "2:3", port, logs2, extra, worker), job_env());
  ASSERT_TRUE(wait_until([&] { return contains(worker_log(logs2, 5), "step 3 "); },
                         milliseconds(30'000)))
      << node0.err() << node2.err();
  const auto pids2 = node2.worker_pids();
  ::kill(node2.pid(), SIGKILL);  // the launcher; its workers go with it (PR_SET_PDEATHSIG)
  ASSERT_EQ(node2.wait(milliseconds(5000)), 128 + SIGKILL);
  ASSERT_EQ(node0.wait(milliseconds(60'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(60'000)), 0) << node1.err();
  expect_nothing_left(pids2);

  const std::string rank0 = worker_log(logs0, 0);
  EXPECT_TRUE(contains(rank0, "ENV WORLD_SIZE=6\n")) << rank0;
  EXPECT_TRUE(contains(rank0, "==== restart 1 ====")) << rank0;
  EXPECT_TRUE(contains(rank0, "ENV WORLD_SIZE=4\n")) << rank0;
  EXPECT_TRUE(contains(rank0, "rank 0 step 59 restart 1")) << rank0;
  EXPECT_TRUE(contains(worker_log(logs1, 3), "rank 3 step 59 restart 1")) << worker_log(logs1, 3);
  EXPECT_TRUE(contains(node0.err(), "generation 1: nodes 0, 1")) << node0.err();
}

TEST(JobWide, ElasticJobStartsWithMinNodesAndTakesInALateOne) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const std::vector<std::string> extra{"--max_restarts=1", "--rdzv_conf=last_call_timeout=1"};
  const std::vector<std::string> worker{"--steps", "80", "--step_ms", "50", "--show_env",
                                        "WORLD_SIZE"};
  LaunchRun node0(tmp0, node_args(0, "1:2", port, logs0, extra, worker), job_env());
  ASSERT_TRUE(wait_until([&] { return contains(worker_log(logs0, 0), "step 5 "); },
                         milliseconds(30'000)))
      << node0.err();
  EXPECT_TRUE(contains(worker_log(logs0, 0), "ENV WORLD_SIZE=2\n"));
  LaunchRun node1(tmp1, node_args(1, "1:2", port, logs1, extra, worker), job_env());
  ASSERT_EQ(node0.wait(milliseconds(60'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(60'000)), 0) << node1.err();
  EXPECT_TRUE(contains(node0.err(), "node 1 asks to join the job")) << node0.err();
  const std::string rank0 = worker_log(logs0, 0);
  EXPECT_TRUE(contains(rank0, "==== restart 1 ====")) << rank0;
  EXPECT_TRUE(contains(rank0, "ENV WORLD_SIZE=4\n")) << rank0;
  EXPECT_TRUE(contains(worker_log(logs1, 3), "rank 3 step 79 restart 1")) << node1.err();
}

TEST(JobWide, FixedSizeJobEndsWhenANodeIsLost) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const std::vector<std::string> worker{"--sleep_ms", "60000"};
  LaunchRun node0(tmp0, node_args(0, "2", port, logs0, {"--max_restarts=3"}, worker), job_env());
  LaunchRun node1(tmp1, node_args(1, "2", port, logs1, {"--max_restarts=3"}, worker), job_env());
  ASSERT_TRUE(all_ready(logs0, 2, milliseconds(20'000))) << node0.err();
  ASSERT_TRUE(wait_until([&] { return node1.worker_pids().size() == 2; }, milliseconds(20'000)));
  const auto pids1 = node1.worker_pids();
  ::kill(node1.pid(), SIGKILL);
  const auto code0 = node0.wait(milliseconds(20'000));
  ASSERT_TRUE(code0) << node0.err();
  EXPECT_NE(*code0, 0);
  EXPECT_TRUE(contains(node0.err(), "node 1's launcher stopped answering")) << node0.err();
  expect_nothing_left(node0.worker_pids());
  expect_nothing_left(pids1);
}

}  // namespace
