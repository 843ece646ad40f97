// Two nodes on one machine: two `launch` processes, one per loopback address (Linux routes all
// of 127/8 to lo), 2 hello_workers each, joined through node 0's control store.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "env/contract.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

constexpr const char* kSecret = "multinode-test-secret";
const std::string kNode0 = "127.0.0.1";
const std::string kNode1 = "127.0.0.2";


ddl::env::EnvMap secret_env() { return {{ddl::env::kJobSecret, kSecret}}; }

// Paddle's spelling for node `node_ip` of the two-node job.
std::vector<std::string> paddle_args(const std::string& node_ip, int control_port,
                                     const fs::path& logs, std::vector<std::string> worker_args,
                                     const std::string& nproc = "2") {
  std::vector<std::string> args{"--cluster_node_ips=" + kNode0 + "," + kNode1,
                                "--node_ip=" + node_ip,
                                "--nproc_per_node=" + nproc,
                                "--master_port=" + std::to_string(control_port),
                                "--log_dir",
                                logs.string(),
                                "--log_level=debug",
                                "--print_config=false",
                                "--rendezvous_timeout=20",
                                "hello_worker"};
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  return args;
}

// Checks both nodes' log folders after a successful run: each holds its own ranks' logs, with
// global rank numbers, and every rank saw the same endpoints and job id.
void expect_four_ranks(const fs::path& logs0, const fs::path& logs1) {
  std::string endpoints, job_id;
  for (int r = 0; r < 4; ++r) {
    const fs::path& mine = r < 2 ? logs0 : logs1;
    const fs::path& other = r < 2 ? logs1 : logs0;
    const std::string R = std::to_string(r);
    EXPECT_FALSE(fs::exists(other / ("workerlog." + R))) << "rank " << r << " on the wrong node";
    const std::string log = worker_log(mine, r);
    SCOPED_TRACE("workerlog." + R + ":\n" + log);
    EXPECT_TRUE(contains(log, "hello from rank " + R + " of 4 (local rank " +
                                  std::to_string(r % 2) + " of 2)"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_TRAINERS_NUM=4\n"));
    EXPECT_TRUE(contains(log, "ENV MASTER_ADDR=" + kNode0 + "\n"));
    const auto e = env_values(log, ddl::env::kTrainerEndpoints);
    const auto j = env_values(log, ddl::env::kJobId);
    ASSERT_EQ(e.size(), 1u);
    ASSERT_EQ(j.size(), 1u);
    if (r == 0) {
      endpoints = e[0];
      job_id = j[0];
    }
    EXPECT_EQ(e[0], endpoints) << "every rank sees the same endpoint list";
    EXPECT_EQ(j[0], job_id) << "every rank has the same job id";
    const auto list = ddl::env::parse_endpoint_list(e[0], "endpoints");
    ASSERT_EQ(list.size(), 4u);
    EXPECT_EQ(list[r].host, r < 2 ? kNode0 : kNode1);
    EXPECT_TRUE(contains(log, "ENV PADDLE_CURRENT_ENDPOINT=" + list[r].str() + "\n"));
  }
}

TEST(MultiNode, TwoNodesFormOneJob) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  LaunchRun node1(tmp1, paddle_args(kNode1, port, logs1, {"--lines", "2"}), secret_env());
  LaunchRun node0(tmp0, paddle_args(kNode0, port, logs0, {"--lines", "2"}), secret_env());
  ASSERT_EQ(node0.wait(milliseconds(30'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
  EXPECT_TRUE(contains(node0.err(), "node 0 of 2")) << node0.err();
  EXPECT_TRUE(contains(node1.err(), "node 1: all 2 node(s) agree; world size 4")) << node1.err();
  expect_four_ranks(logs0, logs1);
  expect_nothing_left(node0.worker_pids());
  expect_nothing_left(node1.worker_pids());
}

TEST(MultiNode, TorchrunSpelling) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  auto args = [&](int node, const fs::path& logs) {
    std::vector<std::string> a{"--nnodes=2", "--node_rank=" + std::to_string(node),
                               "--master_addr=" + kNode0, "--master_port=" + std::to_string(port),
                               "--nproc_per_node=2", "--log_dir", logs.string(),
                               "--print_config=false", "--rendezvous_timeout=20"};
    if (node == 1) a.push_back("--node_ip=" + kNode1);  // node 0's is found by routing
    a.push_back("hello_worker");
    return a;
  };
  LaunchRun node0(tmp0, args(0, logs0), secret_env());
  LaunchRun node1(tmp1, args(1, logs1), secret_env());
  ASSERT_EQ(node0.wait(milliseconds(30'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
  expect_four_ranks(logs0, logs1);
  // As under torchrun's static rendezvous: every rank's MASTER_ADDR:MASTER_PORT is the given one,
  // rank 0's own endpoint (its torch store binds it); launch's control store is on the next port.
  for (int r = 0; r < 4; ++r) {
    const std::string log = worker_log(r < 2 ? logs0 : logs1, r);
    EXPECT_TRUE(contains(log, "ENV MASTER_PORT=" + std::to_string(port) + "\n")) << log;
  }
  EXPECT_TRUE(contains(worker_log(logs0, 0), "ENV PADDLE_CURRENT_ENDPOINT=" + kNode0 + ":" +
                                                 std::to_string(port) + "\n"))
      << worker_log(logs0, 0);
  EXPECT_TRUE(contains(node0.err(), "control store at " + kNode0 + ":" + std::to_string(port + 1)))
      << node0.err();
}

TEST(MultiNode, ParameterServerJobThroughTheControlStore) {
  // torchrun's spelling, free ports: each node publishes 1 server + 2 trainer endpoints. The
  // servers exit on their own once they printed their contract; the grace keeps a node whose
  // trainers are done first from stopping its server before it has written anything.
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  auto args = [&](int node, const fs::path& logs) {
    return std::vector<std::string>{"--nnodes=2", "--node_rank=" + std::to_string(node),
                                    "--master_addr=" + kNode0,
                                    "--master_port=" + std::to_string(port),
                                    "--node_ip=" + (node == 0 ? kNode0 : kNode1),
                                    "--server_num=1", "--worker_num=2", "--server_grace=20",
                                    "--log_dir", logs.string(),
                                    "--log_level=debug", "--print_config=false",
                                    "--rendezvous_timeout=20", "hello_worker"};
  };
  LaunchRun node1(tmp1, args(1, logs1), secret_env());
  LaunchRun node0(tmp0, args(0, logs0), secret_env());
  ASSERT_EQ(node0.wait(milliseconds(30'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
  EXPECT_TRUE(contains(node1.err(), "all 2 node(s) agree; 2 server(s), 4 trainer(s)"))
      << node1.err();
  const std::string s1 = read_file(logs1 / "serverlog.1");
  const auto servers = env_values(s1, ddl::env::kPserverEndpoints);
  ASSERT_EQ(servers.size(), 1u) << s1;
  const auto list = ddl::env::parse_endpoint_list(servers[0], "servers");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].host, kNode0);
  EXPECT_EQ(list[1].host, kNode1);
  EXPECT_TRUE(contains(s1, "ENV POD_IP=" + kNode1 + "\n")) << s1;
  EXPECT_TRUE(contains(s1, "ENV PADDLE_TRAINERS_NUM=4\n")) << s1;
  EXPECT_TRUE(fs::exists(logs0 / "serverlog.0"));
  for (int r = 0; r < 4; ++r) {
    const fs::path& mine = r < 2 ? logs0 : logs1;
    const std::string log = worker_log(mine, r);
    SCOPED_TRACE("workerlog." + std::to_string(r) + ":\n" + log);
    EXPECT_TRUE(contains(log, "ROLE TRAINER id " + std::to_string(r) + " of 4 trainers, servers " +
                                  servers[0] + "\n"));
  }
  expect_nothing_left(node0.worker_pids());
  expect_nothing_left(node1.worker_pids());
}

TEST(MultiNode, SlurmAllocationNeedsNoNodeFlags) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  auto slurm = [&](int node) {
    ddl::env::EnvMap env = secret_env();
    env["SLURM_JOB_NODELIST"] = "127.0.0.[1-2]";
    env["SLURM_NNODES"] = "2";
    env["SLURM_NODEID"] = std::to_string(node);
    env["SLURM_JOB_ID"] = "77";
    return env;
  };
  auto args = [&](const fs::path& logs) {
    return std::vector<std::string>{"--nproc_per_node=2", "--master_port=" + std::to_string(port),
                                    "--log_dir", logs.string(), "--print_config=false",
                                    "--rendezvous_timeout=20", "hello_worker"};
  };
  LaunchRun node0(tmp0, args(logs0), slurm(0));
  LaunchRun node1(tmp1, args(logs1), slurm(1));
  ASSERT_EQ(node0.wait(milliseconds(30'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
  EXPECT_TRUE(contains(node1.err(), "Slurm job 77")) << node1.err();
  expect_four_ranks(logs0, logs1);
}

TEST(MultiNode, KilledWorkerOnTheSecondNodeStopsBothNodes) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const std::vector<std::string> worker{"--sleep_ms", "60000", "--spawn_child"};
  LaunchRun node0(tmp0, paddle_args(kNode0, port, logs0, worker), secret_env());
  LaunchRun node1(tmp1, paddle_args(kNode1, port, logs1, worker), secret_env());
  ASSERT_TRUE(all_ready(logs0, 2, milliseconds(20'000))) << node0.err();
  ASSERT_TRUE(wait_until(
      [&] {
        return contains(worker_log(logs1, 2), "READY") && contains(worker_log(logs1, 3), "READY");
      },
      milliseconds(20'000)))
      << node1.err();
  const auto pids0 = node0.worker_pids(), pids1 = node1.worker_pids();
  ASSERT_EQ(pids0.size(), 2u) << node0.err();
  ASSERT_EQ(pids1.size(), 2u) << node1.err();
  ASSERT_EQ(pids1.count(3), 1u) << node1.err();

  const auto killed = Clock::now();
  ::kill(pids1.at(3), SIGKILL);
  const auto code1 = node1.wait(milliseconds(10'000));
  const auto code0 = node0.wait(milliseconds(10'000));
  EXPECT_LT(Clock::now() - killed, milliseconds(10'000));
  ASSERT_TRUE(code1) << node1.err();
  ASSERT_TRUE(code0) << node0.err();
  EXPECT_EQ(*code1, 128 + SIGKILL) << node1.err();
  EXPECT_NE(*code0, 0) << node0.err();
  const std::string first = "first failure: node 1 rank 3 exit 137";
  EXPECT_TRUE(contains(node0.err(), first)) << node0.err();
  EXPECT_TRUE(contains(node1.err(), first)) << node1.err();
  // Node 1 publishes the generation's failure and, with no restart left, the job's; node 0 may
  // read either first.
  EXPECT_TRUE(contains(node0.err(), "generation 0 failed on node 1: rank 3 was killed by SIGKILL") ||
              contains(node0.err(), "node 1 failed first (node 1 rank 3 exit 137"))
      << node0.err();
  expect_nothing_left(pids0);
  expect_nothing_left(pids1);
}

TEST(MultiNode, VanishedLauncherIsNoticed) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const std::vector<std::string> worker{"--sleep_ms", "60000"};
  LaunchRun node0(tmp0, paddle_args(kNode0, port, logs0, worker), secret_env());
  LaunchRun node1(tmp1, paddle_args(kNode1, port, logs1, worker), secret_env());
  ASSERT_TRUE(all_ready(logs0, 2, milliseconds(20'000))) << node0.err();
  ASSERT_TRUE(wait_until([&] { return node1.worker_pids().size() == 2; }, milliseconds(20'000)));
  const auto pids0 = node0.worker_pids(), pids1 = node1.worker_pids();
  const auto killed = Clock::now();
  ::kill(node1.pid(), SIGKILL);
  ASSERT_EQ(node1.wait(milliseconds(5000)), 128 + SIGKILL);
  const auto code0 = node0.wait(milliseconds(10'000));
  ASSERT_TRUE(code0) << node0.err();
  EXPECT_NE(*code0, 0);
  EXPECT_LT(Clock::now() - killed, milliseconds(10'000));
  EXPECT_TRUE(contains(node0.err(), "node 1's launcher stopped answering")) << node0.err();
  expect_nothing_left(pids0);
  expect_nothing_left(pids1);
}

// Both sides of a disagreement fail with the differing field and both values, well before the
// 20 s rendezvous deadline.
void expect_mismatch(const std::vector<std::string>& args0, const std::vector<std::string>& args1,
                     const std::string& field0, const std::string& field1) {
  TempDir tmp0, tmp1;
  LaunchRun node0(tmp0, args0, secret_env());
  LaunchRun node1(tmp1, args1, secret_env());
  const auto code0 = node0.wait(milliseconds(20'000));
  const auto code1 = node1.wait(milliseconds(20'000));
  ASSERT_TRUE(code0) << node0.err();
  ASSERT_TRUE(code1) << node1.err();
  EXPECT_EQ(*code0, 2) << node0.err();
  EXPECT_EQ(*code1, 2) << node1.err();
  EXPECT_TRUE(contains(node0.err(), field0)) << node0.err();
  EXPECT_TRUE(contains(node1.err(), field1)) << node1.err();
  EXPECT_LT(node0.elapsed(), milliseconds(15'000));
  EXPECT_FALSE(contains(node0.err(), "started rank")) << "no worker starts";
  EXPECT_FALSE(contains(node1.err(), "started rank")) << "no worker starts";
}

// Node 1 arrives after node 0 gave up waiting for it: node 0 names the missing node, node 1 is
// told that nobody answers at node 0's address within its rendezvous deadline and why that may
// be, naming the endpoint and the deadline (not the last connect attempt's "timed out").
TEST(MultiNode, ALateNodeIsToldTheRendezvousDeadlinePassed) {
  TempDir logs, tmp0, tmp1;
  const int port = free_loopback_port();
  auto args0 = paddle_args(kNode0, port, logs.path() / "a", {});
  auto args1 = paddle_args(kNode1, port, logs.path() / "b", {});
  for (auto* args : {&args0, &args1}) {
    std::replace(args->begin(), args->end(), std::string("--rendezvous_timeout=20"),
                 std::string("--rendezvous_timeout=1"));
  }
  LaunchRun node0(tmp0, args0, secret_env());
  const auto code0 = node0.wait(milliseconds(20'000));
  ASSERT_TRUE(code0) << node0.err();
  EXPECT_NE(*code0, 0) << node0.err();
  EXPECT_TRUE(contains(node0.err(), "node(s) 1 of 2 did not join")) << node0.err();

  LaunchRun node1(tmp1, args1, secret_env());
  const auto code1 = node1.wait(milliseconds(20'000));
  ASSERT_TRUE(code1) << node1.err();
  EXPECT_NE(*code1, 0) << node1.err();
  const std::string err = node1.err();
  EXPECT_TRUE(contains(err, "node 1: cannot join the job: no control store answered at " + kNode0 +
                                ":" + std::to_string(port)))
      << err;
  EXPECT_TRUE(contains(err, "within the rendezvous deadline (1 s, --rendezvous_timeout)")) << err;
  EXPECT_TRUE(contains(err,
                       "its rendezvous deadline passed before this node arrived, or the "
                       "job already started or ended without it"))
      << err;
  EXPECT_TRUE(contains(err, "Connection refused")) << err;
  EXPECT_FALSE(contains(err, "timed out")) << err;
  EXPECT_LT(node1.elapsed(), milliseconds(5'000));
  EXPECT_FALSE(contains(err, "started rank")) << "no worker starts";
}

TEST(MultiNode, DifferentWorkerCountsFailOnBothSides) {
  TempDir logs;
  const int port = free_loopback_port();
  expect_mismatch(paddle_args(kNode0, port, logs.path() / "a", {}, "2"),
                  paddle_args(kNode1, port, logs.path() / "b", {}, "3"),
                  "nproc_per_node is '2' on node 0 (this node) but '3' on node 1",
                  "nproc_per_node is '3' on node 1 (this node) but '2' on node 0");
}

TEST(MultiNode, DifferentNodeListsFailOnBothSides) {
  TempDir logs;
  const int port = free_loopback_port();
  auto args1 = paddle_args("127.0.0.3", port, logs.path() / "b", {});
  args1[0] = "--cluster_node_ips=127.0.0.1,127.0.0.3";
  expect_mismatch(paddle_args(kNode0, port, logs.path() / "a", {}), args1,
                  "node list is '127.0.0.1,127.0.0.2' on node 0 (this node) but "
                  "'127.0.0.1,127.0.0.3' on node 1",
                  "node list is '127.0.0.1,127.0.0.3' on node 1 (this node) but "
                  "'127.0.0.1,127.0.0.2' on node 0");
}

// Without a secret Paddle's spelling runs as Paddle does (tests/e2e/paddle/multinode_test.cpp);
// a site that demands one gets today's refusal.
TEST(MultiNode, SecretIsRequiredWhenDemanded) {
  TempDir tmp;
  LaunchRun run(tmp, paddle_args(kNode0, free_loopback_port(), tmp.path() / "logs", {}),
                {{ddl::env::kRequireSecret, "1"}});
  ASSERT_EQ(run.wait(milliseconds(10'000)), 2) << run.err();
  EXPECT_TRUE(contains(run.err(), "DDL_JOB_SECRET")) << run.err();
  EXPECT_FALSE(fs::exists(tmp.path() / "logs")) << "nothing was set up";
}

}  // namespace
