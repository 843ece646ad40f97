// The command line as the planner sees it: the JobConfig part of LaunchOptions
// (launcher/cluster/job_config.h). The plan's own rules are tested on configs built directly
// (tests/launcher/cluster/plan_test.cpp); these tests check which flag sets which field, and one
// plan made from a parsed command line.
#include "launcher/cluster/job_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "launcher/cluster/plan.h"
#include "launcher/options/options.h"

namespace ddl::launcher {
namespace {

using std::chrono::milliseconds;

JobConfig from_command_line(std::vector<std::string> args) {
  args.insert(args.begin(), "launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

// Every field of `actual` is that of `expected`.
void expect_same(const JobConfig& actual, const JobConfig& expected) {
  EXPECT_EQ(actual.cluster_node_ips, expected.cluster_node_ips);
  EXPECT_EQ(actual.node_ip, expected.node_ip);
  EXPECT_EQ(actual.nproc_per_node, expected.nproc_per_node);
  EXPECT_EQ(actual.selected_gpus, expected.selected_gpus);
  EXPECT_EQ(actual.started_port, expected.started_port);
  EXPECT_EQ(actual.master_port, expected.master_port);
  EXPECT_EQ(actual.server_num, expected.server_num);
  EXPECT_EQ(actual.worker_num, expected.worker_num);
  EXPECT_EQ(actual.servers, expected.servers);
  EXPECT_EQ(actual.workers, expected.workers);
  EXPECT_EQ(actual.rdzv_id, expected.rdzv_id);
  EXPECT_EQ(actual.role, expected.role);
  EXPECT_EQ(actual.job_id, expected.job_id);
  EXPECT_EQ(actual.log_level_name, expected.log_level_name);
  EXPECT_EQ(actual.rendezvous_timeout, expected.rendezvous_timeout);
  EXPECT_EQ(actual.max_restarts, expected.max_restarts);
}

TEST(JobConfig, DefaultsAreTheCommandLinesDefaults) {
  expect_same(from_command_line({"w"}), JobConfig());
}

TEST(JobConfig, WhoseFlagsDecideTheCpuDeviceListAndBackend) {
  // An empty FLAGS_selected_gpus on CPU: launch's own, Paddle 1.8's and fleetrun's spellings.
  EXPECT_TRUE(from_command_line({"w"}).empty_gpus_on_cpu);
  EXPECT_TRUE(from_command_line({"--cluster_node_ips=127.0.0.1", "w"}).empty_gpus_on_cpu);
  EXPECT_TRUE(from_command_line({"--backend=gloo", "w"}).empty_gpus_on_cpu);
  EXPECT_FALSE(from_command_line({"--job_id=x", "w"}).empty_gpus_on_cpu) << "Paddle 2.x";
  EXPECT_FALSE(from_command_line({"--nproc-per-node=2", "w"}).empty_gpus_on_cpu) << "torchrun";
  EXPECT_FALSE(from_command_line({"w"}).distri_backend);
  EXPECT_EQ(from_command_line({"--backend=gloo", "w"}).distri_backend, "gloo");
  EXPECT_EQ(from_command_line({"--backend=auto", "--gpus=0", "w"}).distri_backend, "nccl");
}

TEST(JobConfig, EachFlagSetsItsField) {
  JobConfig expected;
  expected.cluster_node_ips = {"10.0.0.1", "10.0.0.2"};
  expected.node_ip = "10.0.0.2";
  expected.nproc_per_node = 2;  // one per selected GPU
  expected.selected_gpus = {3, 1};
  expected.started_port = 6170;
  expected.master_port = 6000;
  expected.rdzv_id = "r9";
  expected.role = "tr";
  expected.job_id = "mnist";
  expected.log_level_name = "debug";
  expected.rendezvous_timeout = milliseconds(2500);
  expected.max_restarts = 2;
  expect_same(from_command_line({"--ips=10.0.0.1,10.0.0.2", "--node_ip=10.0.0.2",
                                 "--started_port=6170", "--master_port=6000", "--devices=3,1",
                                 "--max_restarts=2", "--job_id=mnist", "--rdzv_id=r9", "--role=tr",
                                 "--log_level=10", "--rendezvous_timeout=2.5", "w"}),
              expected);
}

TEST(JobConfig, ParameterServerCounts) {
  JobConfig expected;
  expected.server_num = 1;
  expected.worker_num = 2;  // --worker_num's default: the trainers per node, one per GPU
  expected.nproc_per_node = 2;
  expected.selected_gpus = {4, 6};
  expect_same(from_command_line({"--server_num=1", "--gpus=4,6", "w"}), expected);
}

TEST(JobConfig, ParameterServerLists) {
  JobConfig expected;
  expected.servers = {{"10.0.0.1", 7000}, {"10.0.0.2", 7000}, {"10.0.0.1", 7001}};
  expected.workers = {{"10.0.0.2", 7100}, {"10.0.0.1", 7100}};
  expected.server_num = 3;
  expected.worker_num = 2;
  expected.nproc_per_node = 1;               // this node's trainers
  expected.cluster_node_ips = {"10.0.0.2"};  // with explicit lists the node is --node_ip
  expected.node_ip = "10.0.0.2";
  expect_same(
      from_command_line({"--servers=10.0.0.1:7000,10.0.0.2:7000,10.0.0.1:7001",
                         "--workers=10.0.0.2:7100,10.0.0.1:7100", "--node_ip=10.0.0.2", "w"}),
      expected);
}

// torchrun's --master_port on one node without --started_port: rank 0's endpoint is that port,
// the picked ports around it.
TEST(JobConfig, MasterPortIsRankZerosOnOneNode) {
  PlanInputs in;
  in.pick_ports = [](const std::string&, int) { return std::vector<std::uint16_t>{5001, 6000}; };
  in.job_id = "j";
  const ClusterPlan plan =
      make_plan(from_command_line({"--master_port=6000", "--nproc_per_node=2", "w"}), in);
  EXPECT_EQ(env::join_endpoints(plan.endpoints), "127.0.0.1:6000,127.0.0.1:5001");
  EXPECT_EQ(plan.local[1].env.at(env::kMasterPort), "6000");

  const ClusterPlan fixed = make_plan(
      from_command_line({"--master_port=6000", "--started_port=7000", "--nproc_per_node=2", "w"}),
      in);
  EXPECT_EQ(env::join_endpoints(fixed.endpoints), "127.0.0.1:7000,127.0.0.1:7001")
      << "--started_port fixes every port";
}

}  // namespace
}  // namespace ddl::launcher
