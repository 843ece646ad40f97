// make_plan() for a job placed by a rank mapping file (JobConfig::rank_mapping).
#include <gtest/gtest.h>

#include "launcher/cluster/plan.h"

namespace ddl::launcher {
namespace {

RankMapping mapping(const std::string& json) { return parse_rank_mapping(json, "map.json"); }

JobConfig mapped(const std::string& json, const std::string& node_ip) {
  JobConfig config;
  config.rank_mapping = mapping(json);
  config.cluster_node_ips = config.rank_mapping->hosts();
  config.node_ip = node_ip;
  return config;
}

PlanInputs fixed_inputs(std::vector<std::uint16_t> ports = {}) {
  PlanInputs in;
  in.cores = 8;
  in.job_id = "job";
  in.job_secret = "secret";
  in.pick_ports = [ports](const std::string&, int count) {
    return std::vector<std::uint16_t>(ports.begin(), ports.begin() + count);
  };
  return in;
}

std::string var(const PlannedWorker& w, const char* name) {
  const auto it = w.env.find(name);
  return it == w.env.end() ? "(unset)" : it->second;
}

constexpr const char* kTwoNodes =
    R"({"ip_ranks": [{"ip": "10.0.0.1", "ranks": [3, 0]}, {"ip": "10.0.0.2", "ranks": [1, 4, 2]}]})";

TEST(MappedPlan, OneNodeAsPaddlesTest) {
  // Paddle's test_fleet_launch_rank_mapping.sh: one node, ranks [0, 1], FLAGS_START_PORT=35789.
  JobConfig config = mapped(R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [0, 1]}]})", "127.0.0.1");
  config.started_port = 35789;
  const ClusterPlan plan = make_plan(config, fixed_inputs());
  ASSERT_EQ(plan.local.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const PlannedWorker& w = plan.local[i];
    EXPECT_EQ(var(w, env::kTrainerId), std::to_string(i));
    EXPECT_EQ(var(w, env::kSelectedGpus), std::to_string(i));
    EXPECT_EQ(var(w, env::kTrainerEndpoints), "127.0.0.1:35789,127.0.0.1:35790");
    EXPECT_EQ(var(w, env::kCurrentEndpoint), "127.0.0.1:" + std::to_string(35789 + i));
    EXPECT_EQ(var(w, "PADDLE_TRAINERS_NUM"), "2");
  }
}

TEST(MappedPlan, UnevenNodesInFileOrderWithEndpointsInRankOrder) {
  JobConfig config = mapped(kTwoNodes, "10.0.0.2");
  config.started_port = 7000;
  const ClusterPlan plan = make_plan(config, fixed_inputs());
  EXPECT_EQ(plan.world_size, 5);
  // rank r's endpoint: node 10.0.0.1 runs 3, 0 on 7000, 7001; 10.0.0.2 runs 1, 4, 2 on 7000..7002.
  std::vector<std::string> want = {"10.0.0.1:7001", "10.0.0.2:7000", "10.0.0.2:7002",
                                   "10.0.0.1:7000", "10.0.0.2:7001"};
  ASSERT_EQ(plan.endpoints.size(), want.size());
  for (std::size_t r = 0; r < want.size(); ++r) EXPECT_EQ(plan.endpoints[r].str(), want[r]);
  EXPECT_EQ(plan.world_device_ids, (std::vector<int>{1, 0, 2, 0, 1}));
  ASSERT_EQ(plan.local.size(), 3u);
  const std::vector<int> ranks = {1, 4, 2};
  for (int i = 0; i < 3; ++i) {
    const env::WorkerContract& c = plan.local[i].contract;
    EXPECT_EQ(c.rank, ranks[i]);
    EXPECT_EQ(c.local_rank, i);
    EXPECT_EQ(c.local_world_size, 3);
    EXPECT_EQ(c.gpu, i);
    EXPECT_EQ(c.current, plan.endpoints[ranks[i]]);
    EXPECT_EQ(c.node_rank, 1);
    EXPECT_EQ(c.nnodes, 2);
  }
  EXPECT_EQ(local_endpoint_count(config), 3);
}

TEST(MappedPlan, SelectedGpusGiveTheDevices) {
  JobConfig config = mapped(kTwoNodes, "10.0.0.1");
  config.started_port = 7000;
  config.selected_gpus = {6, 7};
  const ClusterPlan plan = make_plan(config, fixed_inputs());
  EXPECT_EQ(plan.local[0].contract.gpu, 6);
  EXPECT_EQ(plan.local[1].contract.gpu, 7);
  EXPECT_EQ(plan.local[0].contract.rank, 3);
}

TEST(MappedPlan, PublishedEndpointsSplitByEachNodesCount) {
  JobConfig config = mapped(kTwoNodes, "10.0.0.1");
  PlanInputs in = fixed_inputs();
  in.cluster_endpoints = std::vector<env::Endpoint>{{"10.0.0.1", 100}, {"10.0.0.1", 101},
                                                    {"10.0.0.2", 200}, {"10.0.0.2", 201},
                                                    {"10.0.0.2", 202}};
  in.node_rank = 0;
  const ClusterPlan plan = make_plan(config, in);
  EXPECT_EQ(plan.endpoints[3].str(), "10.0.0.1:100");
  EXPECT_EQ(plan.endpoints[0].str(), "10.0.0.1:101");
  EXPECT_EQ(plan.endpoints[2].str(), "10.0.0.2:202");
  in.cluster_endpoints->pop_back();
  EXPECT_THROW(make_plan(config, in), PlanError);
}

TEST(MappedPlan, OneNodePicksPortsSeveralNeedStartedPort) {
  const JobConfig one = mapped(R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [1, 0]}]})", "127.0.0.1");
  const ClusterPlan plan = make_plan(one, fixed_inputs({5001, 5002}));
  EXPECT_EQ(plan.endpoints[1].port, 5001);  // rank 1 is local rank 0: the first port
  EXPECT_EQ(plan.endpoints[0].port, 5002);
  try {
    make_plan(mapped(kTwoNodes, "10.0.0.1"), fixed_inputs({5001, 5002}));
    FAIL() << "expected PlanError";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("give every node the same --started_port"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace ddl::launcher
