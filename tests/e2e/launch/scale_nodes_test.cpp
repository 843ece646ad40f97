// A job of 32 simulated nodes (one `launch` per loopback address, 127.0.0.1 .. .32, one
// hello_worker each, joined through node 0's control store) joins, runs and finishes; stops on
// every node, naming the failed node's rank, when one worker fails; and with --max_restarts
// restarts as one, every node in the next generation. Larger counts are timed by
// bench/scale_nodes.py.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <stdexcept>

#include "env/contract.h"
#include "tests/e2e/launch/launch_helpers.h"
#include "tests/support/ports.h"

namespace {

using namespace ddl::launch_test;

constexpr int kNodes = 32;
constexpr const char* kSecret = "scale-nodes-test-secret";

std::string node_ip(int node) { return "127.0.0." + std::to_string(node + 1); }

// kNodes launchers, node i on node_ip(i), each with its own scratch folder and log folder.
class Nodes {
 public:
  Nodes(const std::vector<std::string>& extra, const std::vector<std::string>& worker,
        const std::string& fault = "") {
    // --master_port P: rank 0 takes P, the control store P + 1; 31 launchers retry their
    // connects to P + 1 before node 0 binds it.
    const int port = ddl::testing::free_port_block_above_ephemeral();
    ddl::env::EnvMap env{{ddl::env::kJobSecret, kSecret}};
    if (!fault.empty()) env[ddl::env::kFault] = fault;
    for (int i = 0; i < kNodes; ++i) {
      dirs_.push_back(std::make_unique<TempDir>());
      std::vector<std::string> args{"--nnodes=" + std::to_string(kNodes),
                                    "--node_rank=" + std::to_string(i),
                                    "--master_addr=" + node_ip(0),
                                    "--master_port=" + std::to_string(port),
                                    "--node_ip=" + node_ip(i),
                                    "--nproc_per_node=1",
                                    "--log_dir",
                                    logs(i).string(),
                                    "--log_level=debug",
                                    "--print_config=false",
                                    "--rendezvous_timeout=60",
                                    "--kill_timeout=3"};
      args.insert(args.end(), extra.begin(), extra.end());
      args.push_back("hello_worker");
      args.insert(args.end(), worker.begin(), worker.end());
      runs_.push_back(std::make_unique<LaunchRun>(*dirs_.back(), args, env));
    }
  }

  fs::path logs(int node) const { return dirs_[node]->path() / "logs"; }
  LaunchRun& operator[](int node) { return *runs_[node]; }

  // Every launcher's exit code (nullopt: still running at the deadline, then killed).
  std::vector<std::optional<int>> wait_all(milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::vector<std::optional<int>> codes;
    for (auto& run : runs_) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      codes.push_back(run->wait(std::max(left, milliseconds(1))));
    }
    for (std::size_t i = 0; i < runs_.size(); ++i) {
      if (!codes[i]) {
        ::kill(runs_[i]->pid(), SIGKILL);
        runs_[i]->wait(milliseconds(5000));
      }
    }
    return codes;
  }

  // No worker of any node is left (the launchers were waited for by wait_all).
  void expect_nothing_left() {
    for (auto& run : runs_) ddl::launch_test::expect_nothing_left(run->worker_pids());
  }

 private:
  std::vector<std::unique_ptr<TempDir>> dirs_;
  std::vector<std::unique_ptr<LaunchRun>> runs_;
};

TEST(ScaleNodes, ThirtyTwoNodesJoinRunAndFinish) {
  Nodes nodes({}, {});
  const auto codes = nodes.wait_all(milliseconds(60'000));
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(codes[i], 0) << "node " << i << ":\n" << nodes[i].err();
    const std::string log = worker_log(nodes.logs(i), i);
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(i) + " of " +
                                  std::to_string(kNodes) + " (local rank 0 of 1)"))
        << log;
    EXPECT_EQ(env_values(log, "WORLD_SIZE"), std::vector<std::string>{std::to_string(kNodes)});
    const auto endpoints = env_values(log, ddl::env::kTrainerEndpoints);
    ASSERT_EQ(endpoints.size(), 1u) << log;
    const auto list = ddl::env::parse_endpoint_list(endpoints[0], "endpoints");
    ASSERT_EQ(list.size(), static_cast<std::size_t>(kNodes));
    EXPECT_EQ(list[i].host, node_ip(i)) << "rank " << i << "'s endpoint is on its own node";
  }
  EXPECT_TRUE(contains(nodes[0].err(), "node 0: all 32 node(s) agree; world size 32"))
      << nodes[0].err();
  nodes.expect_nothing_left();
}

TEST(ScaleNodes, OneFailingWorkerStopsEveryNodeAndIsNamed) {
  // Rank 19 (node 19) exits with 3 at its third step; every other rank would step for 50 s.
  Nodes nodes({}, {"--steps", "1000", "--step_ms", "50"}, "rank=19,step=2,exit=3");
  const auto codes = nodes.wait_all(milliseconds(40'000));
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(codes[i]) << "node " << i << " still running:\n" << nodes[i].err();
    EXPECT_NE(*codes[i], 0) << "node " << i << ":\n" << nodes[i].err();
    EXPECT_LT(nodes[i].elapsed(), milliseconds(30'000)) << "node " << i << " did not stop fast";
    EXPECT_TRUE(contains(nodes[i].err(), "first failure: node 19 rank 19 exit 3"))
        << "node " << i << ":\n"
        << nodes[i].err();
  }
  EXPECT_EQ(codes[19], 3) << nodes[19].err();
  nodes.expect_nothing_left();
}

TEST(ScaleNodes, ARestartTakesEveryNodeIntoTheNextGeneration) {
  // Rank 7 exits with 3 at step 2 of generation 0 only; with one restart every node runs
  // generation 1 to the end.
  Nodes nodes({"--max_restarts=1"}, {"--steps", "5", "--step_ms", "20", "--show_env", "DDL_JOB_ID"},
              "rank=7,step=2,exit=3,restart=0");
  const auto codes = nodes.wait_all(milliseconds(60'000));
  std::string job_id;
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(codes[i], 0) << "node " << i << ":\n" << nodes[i].err();
    const std::string log = worker_log(nodes.logs(i), i);
    SCOPED_TRACE("node " + std::to_string(i) + ", workerlog:\n" + log);
    EXPECT_TRUE(contains(log, "==== restart 1 ===="));
    EXPECT_TRUE(contains(log, "rank " + std::to_string(i) + " step 4 restart 1"));
    const auto ids = env_values(log, ddl::env::kJobId);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back().substr(ids.back().size() - 3), "-g1");
    if (i == 0) job_id = ids.back();
    EXPECT_EQ(ids.back(), job_id) << "every node in the same generation";
  }
  EXPECT_TRUE(contains(nodes[0].err(), "generation 0 failed on node 7: rank 7 exited with code 3"))
      << nodes[0].err();
  nodes.expect_nothing_left();
}

}  // namespace
