// A multi-node job inside a Slurm allocation needs no DDL_JOB_SECRET:
// the launchers admit each other with munge credentials and node 0 hands every node the
// workers' secret. Two `launch` processes on 127.0.0.1 / 127.0.0.2 get the variables srun gives
// its tasks (SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NODEID, SLURM_JOB_ID) and a munged of the
// test's own (tests/support/munged.h; skipped without root or munged). The real `srun -N2 launch`
// is in tests/e2e/schedulers/slurm_munge_test.cpp.
#include <gtest/gtest.h>

#include <fstream>

#include "env/contract.h"
#include "env/slurm.h"
#include "tests/e2e/launch/launch_helpers.h"
#include "tests/support/munged.h"

namespace {

using namespace ddl::launch_test;
using ddl::testing::TestMunged;

const std::string kNode0 = "127.0.0.1";
const std::string kNode1 = "127.0.0.2";

// What srun sets in node `node`'s task of Slurm job `job`.
ddl::env::EnvMap slurm_env(int node, const std::string& job) {
  return {{ddl::env::kSlurmJobNodelist, "127.0.0.[1-2]"},
          {ddl::env::kSlurmNnodes, "2"},
          {ddl::env::kSlurmNodeId, std::to_string(node)},
          {ddl::env::kSlurmJobId, job}};
}

std::vector<std::string> launch_args(int port, const fs::path& logs) {
  return {"--nproc_per_node=2",       "--master_port=" + std::to_string(port),
          "--log_dir",                logs.string(),
          "--print_config=false",     "--rendezvous_timeout=10",
          "hello_worker",             "--show_env",
          ddl::env::kJobSecret};
}

// Node 0 finds munged through DDL_MUNGE_SOCKET, node 1 through slurm.conf's AuthInfo (as srun
// passes SLURM_CONF); neither has a secret, and all four workers get node 0's.
TEST(SlurmMunge, TwoNodesWithoutSecretShareNodeZerosSecret) {
  TestMunged munged;
  if (!munged.skip_reason().empty()) GTEST_SKIP() << munged.skip_reason();
  const std::string conf = munged.dir().file("slurm.conf");
  std::ofstream(conf) << "AuthType=auth/munge\nAuthInfo=socket=" << munged.socket() << "\n";
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  auto env0 = slurm_env(0, "4242");
  env0[ddl::env::kMungeSocket] = munged.socket();
  auto env1 = slurm_env(1, "4242");
  env1[ddl::env::kSlurmConf] = conf;
  LaunchRun node1(tmp1, launch_args(port, tmp1.path() / "logs"), env1);
  LaunchRun node0(tmp0, launch_args(port, tmp0.path() / "logs"), env0);
  ASSERT_EQ(node0.wait(milliseconds(30'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
  EXPECT_TRUE(contains(node0.err(), "admit each other with munge credentials (munged at " +
                                        munged.socket() + " (from DDL_MUNGE_SOCKET))"))
      << node0.err();
  EXPECT_TRUE(contains(node1.err(), "(from AuthInfo in " + conf + ")")) << node1.err();
  std::set<std::string> secrets;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string log = worker_log((rank < 2 ? tmp0 : tmp1).path() / "logs", rank);
    const auto values = env_values(log, ddl::env::kJobSecret);
    ASSERT_EQ(values.size(), 1u) << log;
    EXPECT_GE(values[0].size(), 32u) << "a random secret, 16 bytes in hex";
    secrets.insert(values[0]);
  }
  EXPECT_EQ(secrets.size(), 1u) << "every worker of both nodes has the same secret";
}

// A launcher of another Slurm job presents a credential for that job: node 0's store refuses it.
TEST(SlurmMunge, LauncherOfAnotherSlurmJobIsRefused) {
  TestMunged munged;
  if (!munged.skip_reason().empty()) GTEST_SKIP() << munged.skip_reason();
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  auto env0 = slurm_env(0, "100");
  auto env1 = slurm_env(1, "101");
  env0[ddl::env::kMungeSocket] = env1[ddl::env::kMungeSocket] = munged.socket();
  auto args = launch_args(port, tmp0.path() / "logs");
  args[5] = "--rendezvous_timeout=3";
  LaunchRun node0(tmp0, args, env0);
  LaunchRun node1(tmp1, launch_args(port, tmp1.path() / "logs"), env1);
  const auto code1 = node1.wait(milliseconds(20'000));
  ASSERT_TRUE(code1) << node1.err();
  EXPECT_EQ(*code1, 2) << node1.err();
  EXPECT_TRUE(contains(node1.err(), "munge credential for another job or node refused")) << node1.err();
  EXPECT_TRUE(contains(node1.err(), "slurm job 101")) << node1.err();
  const auto code0 = node0.wait(milliseconds(20'000));
  ASSERT_TRUE(code0) << node0.err();
  EXPECT_NE(*code0, 0) << "node 1 never joined: " << node0.err();
  EXPECT_FALSE(fs::exists(tmp0.path() / "logs" / "workerlog.0")) << "no worker started";
}

// munged not reachable: today's refusal, naming munge's socket and DDL_JOB_SECRET.
TEST(SlurmMunge, UnreachableMungedRefusesTheJobNamingSocketAndSecret) {
  TempDir tmp;
  auto env = slurm_env(1, "4243");
  env[ddl::env::kMungeSocket] = tmp.file("no-munged.socket");
  LaunchRun node1(tmp, launch_args(free_loopback_port(), tmp.path() / "logs"), env);
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 2) << node1.err();
  const std::string err = node1.err();
  EXPECT_TRUE(contains(err, "munge cannot be used")) << err;
  EXPECT_TRUE(contains(err, tmp.file("no-munged.socket"))) << err;
  EXPECT_TRUE(contains(err, ddl::env::kJobSecret)) << err;
  EXPECT_TRUE(contains(err, ddl::env::kMungeSocket)) << err;
}

}  // namespace
