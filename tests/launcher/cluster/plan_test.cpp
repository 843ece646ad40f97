#include "launcher/cluster/plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "launcher/supervise/exit_status.h"
#include "launcher/supervise/worker_lookup.h"

namespace ddl::launcher {
namespace {

// The plans are made from JobConfigs built here; tests/launcher/job/job_config_test.cpp checks
// how the command line maps onto them.

// A collective job of `nproc` trainers per node, on one node (127.0.0.1) unless changed.
JobConfig collective(int nproc) {
  JobConfig config;
  config.nproc_per_node = nproc;
  return config;
}

// A collective job on the nodes 10.0.0.1 and 10.0.0.2, this node being `ip`, `nproc` trainers
// per node from port `started_port` on.
JobConfig two_nodes(const std::string& ip, int started_port, int nproc) {
  JobConfig config = collective(nproc);
  config.cluster_node_ips = {"10.0.0.1", "10.0.0.2"};
  config.node_ip = ip;
  config.started_port = started_port;
  return config;
}

// A parameter-server job of `servers` servers and `trainers` trainers per node.
JobConfig ps(int servers, int trainers) {
  JobConfig config = collective(trainers);
  config.server_num = servers;
  config.worker_num = trainers;
  return config;
}

// A port picker that hands out `ports` and records how often it was asked.
struct FakePicker {
  std::vector<std::uint16_t> ports;
  int calls = 0;
  PortPicker fn() {
    return [this](const std::string&, int count) {
      ++calls;
      return std::vector<std::uint16_t>(ports.begin(),
                                        ports.begin() + std::min<std::size_t>(count, ports.size()));
    };
  }
};

PlanInputs inputs(FakePicker& picker, int cores = 8, env::EnvMap caller = {}) {
  PlanInputs in;
  in.cores = cores;
  in.caller_env = std::move(caller);
  in.pick_ports = picker.fn();
  in.job_id = "job1";
  in.job_secret = "s3cret";
  return in;
}

TEST(Plan, CpuTrainersGetAnEmptyDeviceListWhenAsked) {
  FakePicker picker{{5001, 5002, 5003, 5004}};
  JobConfig config = collective(2);
  config.empty_gpus_on_cpu = true;  // Paddle 1.8, fleetrun, launch's own spelling
  for (const PlannedWorker& w : make_plan(config, inputs(picker)).local) {
    EXPECT_EQ(w.env.at("FLAGS_selected_gpus"), "");
    EXPECT_EQ(w.env.at("PADDLE_DISTRI_BACKEND"), "gloo");
  }
  JobConfig gpus = config;
  gpus.selected_gpus = {3, 5};
  gpus.distri_backend = "nccl";  // --backend=nccl
  const ClusterPlan plan = make_plan(gpus, inputs(picker));
  EXPECT_EQ(plan.local[1].env.at("FLAGS_selected_gpus"), "5");
  EXPECT_EQ(plan.local[1].env.at("PADDLE_DISTRI_BACKEND"), "nccl");
  JobConfig servers = ps(1, 1);
  servers.empty_gpus_on_cpu = true;
  for (const PlannedWorker& w : make_plan(servers, inputs(picker)).local) {
    EXPECT_EQ(w.env.count("FLAGS_selected_gpus"), 0u) << "collective trainers only";
  }
}

TEST(Plan, OneNodeFreePorts) {
  FakePicker picker{{5001, 5002}};
  const ClusterPlan plan = make_plan(collective(2), inputs(picker));
  EXPECT_EQ(picker.calls, 1);
  EXPECT_EQ(plan.world_size, 2);
  ASSERT_EQ(plan.local.size(), 2u);
  EXPECT_EQ(env::join_endpoints(plan.endpoints), "127.0.0.1:5001,127.0.0.1:5002");
  ASSERT_TRUE(plan.omp_threads_defaulted);
  EXPECT_EQ(*plan.omp_threads_defaulted, 4);
  for (int i = 0; i < 2; ++i) {
    const PlannedWorker& w = plan.local[i];
    EXPECT_EQ(w.contract.rank, i);
    EXPECT_EQ(w.contract.local_rank, i);
    const env::EnvMap& e = w.env;
    EXPECT_EQ(e.at("PADDLE_TRAINER_ID"), std::to_string(i));
    EXPECT_EQ(e.at("PADDLE_TRAINERS_NUM"), "2");
    EXPECT_EQ(e.at("PADDLE_CURRENT_ENDPOINT"), "127.0.0.1:" + std::to_string(5001 + i));
    EXPECT_EQ(e.at("PADDLE_TRAINER_ENDPOINTS"), "127.0.0.1:5001,127.0.0.1:5002");
    EXPECT_EQ(e.count("FLAGS_selected_gpus"), 0u);
    EXPECT_EQ(e.at("RANK"), std::to_string(i));
    EXPECT_EQ(e.at("LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(e.at("WORLD_SIZE"), "2");
    EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(e.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(e.at("MASTER_PORT"), "5001");
    EXPECT_EQ(e.at("OMP_NUM_THREADS"), "4");
    EXPECT_EQ(e.at("DDL_JOB_ID"), "job1-g0") << "generation 0 of job1";
    EXPECT_EQ(e.at("DDL_JOB_SECRET"), "s3cret");
    EXPECT_EQ(e.count("DDL_LOG_LEVEL"), 0u);
  }
}

TEST(Plan, CallerOmpWinsAndOtherVariablesPassThrough) {
  FakePicker picker{{5001, 5002, 5003}};
  const ClusterPlan plan =
      make_plan(collective(3), inputs(picker, 2, {{"OMP_NUM_THREADS", "7"}, {"HOME", "/h"}}));
  EXPECT_FALSE(plan.omp_threads_defaulted);
  const env::EnvMap merged =
      merge_env({{"OMP_NUM_THREADS", "7"}, {"HOME", "/h"}, {"RANK", "99"}}, plan.local[2].env);
  EXPECT_EQ(merged.at("OMP_NUM_THREADS"), "7");
  EXPECT_EQ(merged.at("HOME"), "/h");
  EXPECT_EQ(merged.at("RANK"), "2") << "the plan wins over the caller";
}

TEST(Plan, OmpNeverZero) {
  FakePicker picker{{1, 2, 3, 4}};
  const ClusterPlan plan = make_plan(collective(4), inputs(picker, 2));
  EXPECT_EQ(plan.local[0].env.at("OMP_NUM_THREADS"), "1");
}

TEST(Plan, TwoNodesAreNodeMajor) {
  FakePicker picker{{1}};
  const ClusterPlan plan = make_plan(two_nodes("10.0.0.2", 6170, 2), inputs(picker));
  EXPECT_EQ(picker.calls, 0) << "fixed ports need no picking";
  EXPECT_EQ(plan.world_size, 4);
  EXPECT_EQ(env::join_endpoints(plan.endpoints),
            "10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170,10.0.0.2:6171");
  ASSERT_EQ(plan.local.size(), 2u);
  EXPECT_EQ(plan.local[0].env.at("PADDLE_TRAINER_ID"), "2");
  EXPECT_EQ(plan.local[0].env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(plan.local[0].env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.2:6170");
  EXPECT_EQ(plan.local[1].env.at("PADDLE_TRAINER_ID"), "3");
  EXPECT_EQ(plan.local[1].env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(plan.local[1].env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.2:6171");
  EXPECT_EQ(plan.local[1].env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(plan.local[1].env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(plan.local[1].env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(plan.local[1].env.at("MASTER_PORT"), "6170");

  const ClusterPlan first = make_plan(two_nodes("10.0.0.1", 6170, 2), inputs(picker));
  EXPECT_EQ(first.endpoints, plan.endpoints) << "every node computes the same endpoint list";
  EXPECT_EQ(first.local[1].env.at("PADDLE_TRAINER_ID"), "1");
}

TEST(Plan, NodePlaceAndDevicesForTorchrunAndPaddle2) {
  FakePicker picker{{1}};
  JobConfig config = two_nodes("10.0.0.2", 6170, 2);
  config.selected_gpus = {3, 1};
  config.max_restarts = 2;
  config.job_id = "mnist";
  config.rdzv_id = "r9";
  config.role = "tr";
  const ClusterPlan plan = make_plan(config, inputs(picker));
  ASSERT_EQ(plan.local.size(), 2u);
  const env::EnvMap& e = plan.local[1].env;
  EXPECT_EQ(e.at("GROUP_RANK"), "1");
  EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(e.at("PADDLE_NNODES"), "2");
  EXPECT_EQ(e.at("ROLE_RANK"), "3");
  EXPECT_EQ(e.at("ROLE_NAME"), "tr");
  EXPECT_EQ(e.at("TORCHELASTIC_RUN_ID"), "r9");
  EXPECT_EQ(e.at("TORCHELASTIC_MAX_RESTARTS"), "2");
  EXPECT_EQ(e.at("PADDLE_JOB_ID"), "mnist");
  EXPECT_EQ(e.at("FLAGS_selected_gpus"), "1");
  EXPECT_EQ(e.at("PADDLE_WORLD_DEVICE_IDS"), "3,1,3,1") << "every node uses the same GPU list";
  EXPECT_EQ(e.at("PADDLE_LOCAL_DEVICE_IDS"), "1");
  EXPECT_EQ(e.at("PADDLE_MASTER"), "10.0.0.1:6170");
  EXPECT_EQ(e.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_EQ(e.count("TORCHELASTIC_ERROR_FILE"), 0u) << "no error file folder given";

  // Without a run id (--rdzv_id) the run id is the job's, the same in every generation; error
  // files go to the folder given; the caller's NCCL setting wins.
  PlanInputs in = inputs(picker, 8, {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  in.error_file_dir = "/logs";
  in.generation = Generation().next();
  JobConfig single = collective(2);
  single.started_port = 6170;
  const ClusterPlan restarted = make_plan(single, in);
  const env::EnvMap& r = restarted.local[1].env;
  EXPECT_EQ(r.at("TORCHELASTIC_RUN_ID"), "job1");
  EXPECT_EQ(r.at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(r.at("TORCHELASTIC_ERROR_FILE"), "/logs/error.1.json");
  EXPECT_EQ(r.count("TORCH_NCCL_ASYNC_ERROR_HANDLING"), 0u) << "the plan does not override it";
  EXPECT_EQ(r.at("PADDLE_JOB_ID"), "default");
  EXPECT_EQ(r.at("PADDLE_WORLD_DEVICE_IDS"), "0,1");
}

TEST(Plan, SeveralNodesNeedStartedPort) {
  FakePicker picker{{5001}};
  try {
    JobConfig config = collective(1);
    config.cluster_node_ips = {"10.0.0.1", "10.0.0.2"};
    config.node_ip = "10.0.0.1";
    make_plan(config, inputs(picker));
    FAIL() << "planned several nodes without --started_port";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("--started_port"), std::string::npos) << e.what();
  }
}

TEST(Plan, GpusLevelAndRendezvousTimeout) {
  FakePicker picker{{7001, 7002}};
  JobConfig config = collective(2);
  config.selected_gpus = {3, 5};
  config.log_level_name = "debug";
  config.rendezvous_timeout = std::chrono::milliseconds(2500);
  const ClusterPlan plan = make_plan(config, inputs(picker));
  ASSERT_EQ(plan.local.size(), 2u);
  EXPECT_EQ(plan.local[0].env.at("FLAGS_selected_gpus"), "3");
  EXPECT_EQ(plan.local[1].env.at("FLAGS_selected_gpus"), "5");
  EXPECT_EQ(plan.local[1].env.at("DDL_LOG_LEVEL"), "debug");
  EXPECT_EQ(plan.local[1].env.at("DDL_RENDEZVOUS_TIMEOUT_MS"), "2500");
}

TEST(Plan, RoundTripThroughTheEnvironment) {
  FakePicker picker{{7001, 7002, 7003}};
  JobConfig config = collective(3);
  config.selected_gpus = {0, 1, 2};
  config.rendezvous_timeout = std::chrono::milliseconds(9000);
  const ClusterPlan plan = make_plan(config, inputs(picker, 8, {{"PATH", "/bin"}}));
  for (const PlannedWorker& w : plan.local) {
    const auto back = env::from_env(merge_env({{"PATH", "/bin"}}, w.env));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->rank, w.contract.rank);
    EXPECT_EQ(back->world_size, 3);
    EXPECT_EQ(back->local_rank, w.contract.local_rank);
    EXPECT_EQ(back->local_world_size, 3);
    EXPECT_EQ(back->current, w.contract.current);
    EXPECT_EQ(back->endpoints, plan.endpoints);
    EXPECT_EQ(back->gpu, w.contract.gpu);
    EXPECT_EQ(back->job_id, "job1-g0") << "the first generation's job id";
    EXPECT_EQ(back->secret, "s3cret");
    EXPECT_EQ(back->rendezvous_timeout, std::chrono::milliseconds(9000));
    EXPECT_EQ(back->restart_count, 0);
  }
}

TEST(Plan, EachRestartIsANewGeneration) {
  FakePicker picker{{5001, 5002}};
  PlanInputs in = inputs(picker);
  in.generation = Generation(2);
  EXPECT_EQ(Generation(2).job_id("job1"), "job1-g2");
  EXPECT_NE(Generation().job_id("job1"), Generation().next().job_id("job1"));
  EXPECT_EQ(Generation().next(), Generation(1));
  EXPECT_TRUE(Generation().first());
  EXPECT_FALSE(Generation(1).first());
  EXPECT_THROW(Generation(-1), std::invalid_argument);
  const ClusterPlan plan = make_plan(collective(2), in);
  for (const PlannedWorker& w : plan.local) {
    EXPECT_EQ(w.env.at(env::kRestartCount), "2");
    EXPECT_EQ(w.env.at(env::kJobId), "job1-g2");
    const auto back = env::from_env(w.env);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->restart_count, 2);
  }
}

TEST(Plan, BadPickerIsAnError) {
  FakePicker dup{{5001, 5001}};
  EXPECT_THROW(make_plan(collective(2), inputs(dup)), PlanError);
  FakePicker short_list{{5001}};
  EXPECT_THROW(make_plan(collective(2), inputs(short_list)), PlanError);
}

TEST(Plan, DescribeHidesTheSecret) {
  FakePicker picker{{5001}};
  const std::string text = describe_plan(make_plan(JobConfig(), inputs(picker)));
  EXPECT_NE(text.find("PADDLE_TRAINER_ID=0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("s3cret"), std::string::npos) << text;
}

// --- Parameter-server jobs ---------------------------------------------------------------------

// The message of the PlanError `plan` throws, or "" when it plans.
std::string plan_error(const JobConfig& config, const PlanInputs& in) {
  try {
    make_plan(config, in);
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

TEST(PsPlan, HeterWorkersAfterTheTrainers) {
  // 1 server, 2 trainers, stage 2: 1 gpu worker, stage 3: 2 xpu workers; one node, free ports.
  JobConfig config = ps(1, 2);
  config.heter = {JobConfig::HeterStage{"gpu", 1, {}}, JobConfig::HeterStage{"xpu", 2, {}}};
  FakePicker picker{{5001, 5002, 5003, 5004, 5005, 5006}};
  const ClusterPlan plan = make_plan(config, inputs(picker, 12));
  EXPECT_EQ(env::join_endpoints(plan.server_endpoints), "127.0.0.1:5001");
  EXPECT_EQ(env::join_endpoints(plan.endpoints), "127.0.0.1:5002,127.0.0.1:5003");
  EXPECT_EQ(env::join_endpoints(plan.heter_endpoints),
            "127.0.0.1:5004,127.0.0.1:5005,127.0.0.1:5006");
  ASSERT_EQ(plan.heter_stages.size(), 2u);
  EXPECT_EQ(plan.heter_stages[1].device, "xpu");
  ASSERT_EQ(plan.local.size(), 6u);
  EXPECT_EQ(*plan.omp_threads_defaulted, 2) << "12 cores over 6 local processes";
  const PlannedWorker& h = plan.local[5];
  EXPECT_EQ(h.contract.role, env::Role::kHeterTrainer);
  EXPECT_EQ(h.contract.rank, 2);
  EXPECT_EQ(h.contract.local_rank, 2);
  EXPECT_EQ(h.env.at("TRAINING_ROLE"), "HETER_TRAINER");
  EXPECT_EQ(h.env.at("STAGE_ID"), "3");
  EXPECT_EQ(h.env.at("HETER_DEVICE_TYPE"), "xpu");
  EXPECT_EQ(h.env.at("PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST"), "127.0.0.1:5004");
  EXPECT_EQ(h.env.at("PADDLE_STAGE_TRAINERS_NUM"), "[2, 1, 2]");
  EXPECT_EQ(h.env.at("PADDLE_PORT"), "5006");
  EXPECT_EQ(h.env.count("PADDLE_TRAINER_ID"), 0u);
  const PlannedWorker& t = plan.local[1];
  EXPECT_EQ(t.env.at("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"), "127.0.0.1:5004");
  EXPECT_EQ(t.env.at("STAGE_NUM"), "3");
  EXPECT_EQ(plan.local[0].env.at("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"),
            "127.0.0.1:5004,127.0.0.1:5005,127.0.0.1:5006");
  EXPECT_EQ(plan.local[0].env.count("STAGE_ID"), 0u) << "servers get the list alone";
  EXPECT_EQ(local_endpoint_count(config), 6);
  EXPECT_NE(describe_plan(plan).find("heter worker 0 (local heter worker 0) environment"),
            std::string::npos);
}

TEST(PsPlan, HeterWorkersOnTwoNodesAreStageMajor) {
  // Node k publishes 1 server, 1 trainer, 2 heter workers of stage 2 (node-major blocks); the
  // heter list is the stage's workers of node 0 then node 1.
  JobConfig config = ps(1, 1);
  config.heter = {JobConfig::HeterStage{"gpu", 2, {}}};
  FakePicker unused;
  PlanInputs in = inputs(unused);
  in.cluster_endpoints = std::vector<env::Endpoint>{
      {"10.0.0.1", 1}, {"10.0.0.1", 2}, {"10.0.0.1", 3}, {"10.0.0.1", 4},
      {"10.0.0.2", 1}, {"10.0.0.2", 2}, {"10.0.0.2", 3}, {"10.0.0.2", 4}};
  in.node_rank = 1;
  const ClusterPlan plan = make_plan(config, in);
  EXPECT_EQ(env::join_endpoints(plan.heter_endpoints),
            "10.0.0.1:3,10.0.0.1:4,10.0.0.2:3,10.0.0.2:4");
  ASSERT_EQ(plan.local.size(), 4u);
  EXPECT_EQ(plan.local[2].contract.rank, 2) << "node 1's first heter worker";
  EXPECT_EQ(plan.local[3].env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.2:4");
}

TEST(PsPlan, ListedHeterWorkersStartWhereTheirHostIs) {
  JobConfig config;
  config.server_num = 1;
  config.worker_num = 1;
  config.servers = {{"10.0.0.1", 7000}};
  config.workers = {{"10.0.0.1", 7001}};
  config.heter = {JobConfig::HeterStage{"gpu", 2, {{"10.0.0.1", 7002}, {"10.0.0.2", 7002}}}};
  config.node_ip = "10.0.0.2";
  FakePicker picker;
  const ClusterPlan plan = make_plan(config, inputs(picker));
  ASSERT_EQ(plan.local.size(), 1u) << "only the heter worker on 10.0.0.2";
  EXPECT_EQ(plan.local[0].contract.role, env::Role::kHeterTrainer);
  EXPECT_EQ(plan.local[0].contract.rank, 1);
  EXPECT_EQ(plan.local[0].env.at("PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST"), "10.0.0.1:7001");
  config.node_ip = "10.0.0.9";
  try {
    make_plan(config, inputs(picker));
    ADD_FAILURE() << "planned a node that starts nothing";
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("--heter_workers"), std::string::npos) << e.what();
  }
}

TEST(PsPlan, OneNodeFreePortsServersFirst) {
  FakePicker picker{{5001, 5002, 5003, 5004, 5005}};
  const ClusterPlan plan = make_plan(ps(2, 3), inputs(picker, 10));
  EXPECT_EQ(picker.calls, 1) << "one request for every port of the node";
  EXPECT_EQ(env::join_endpoints(plan.server_endpoints), "127.0.0.1:5001,127.0.0.1:5002");
  EXPECT_EQ(env::join_endpoints(plan.endpoints), "127.0.0.1:5003,127.0.0.1:5004,127.0.0.1:5005");
  EXPECT_EQ(plan.world_size, 3) << "the trainers";
  ASSERT_EQ(plan.local.size(), 5u);
  ASSERT_TRUE(plan.omp_threads_defaulted);
  EXPECT_EQ(*plan.omp_threads_defaulted, 2) << "10 cores over 5 local processes";
  for (int i = 0; i < 2; ++i) {
    const PlannedWorker& s = plan.local[i];
    SCOPED_TRACE("server " + std::to_string(i));
    EXPECT_EQ(s.contract.role, env::Role::kServer);
    EXPECT_EQ(s.contract.rank, i);
    EXPECT_EQ(s.contract.local_rank, i);
    EXPECT_EQ(s.env.at("TRAINING_ROLE"), "PSERVER");
    EXPECT_EQ(s.env.at("PADDLE_PSERVERS_IP_PORT_LIST"), "127.0.0.1:5001,127.0.0.1:5002");
    EXPECT_EQ(s.env.at("PADDLE_CURRENT_ENDPOINT"), "127.0.0.1:" + std::to_string(5001 + i));
    EXPECT_EQ(s.env.at("PADDLE_PORT"), std::to_string(5001 + i));
    EXPECT_EQ(s.env.at("POD_IP"), "127.0.0.1");
    EXPECT_EQ(s.env.at("PADDLE_TRAINERS_NUM"), "3");
    EXPECT_EQ(s.env.count("PADDLE_TRAINER_ID"), 0u);
    EXPECT_EQ(s.env.count("RANK"), 0u);
    EXPECT_EQ(s.env.at("DDL_JOB_ID"), "job1-g0");
    EXPECT_EQ(s.env.at("OMP_NUM_THREADS"), "2");
    const auto back = env::from_env(s.env);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->role, env::Role::kServer);
    EXPECT_EQ(back->rank, i);
  }
  for (int i = 0; i < 3; ++i) {
    const PlannedWorker& t = plan.local[2 + i];
    SCOPED_TRACE("trainer " + std::to_string(i));
    EXPECT_EQ(t.contract.role, env::Role::kTrainer);
    EXPECT_EQ(t.contract.rank, i);
    EXPECT_EQ(t.env.at("TRAINING_ROLE"), "TRAINER");
    EXPECT_EQ(t.env.at("PADDLE_TRAINER_ID"), std::to_string(i));
    EXPECT_EQ(t.env.at("PADDLE_TRAINERS_NUM"), "3");
    EXPECT_EQ(t.env.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(t.env.at("PADDLE_PSERVERS_IP_PORT_LIST"), "127.0.0.1:5001,127.0.0.1:5002");
    EXPECT_EQ(t.env.at("PADDLE_CURRENT_ENDPOINT"), "127.0.0.1:" + std::to_string(5003 + i));
    EXPECT_EQ(t.env.at("PADDLE_PORT"), std::to_string(5003 + i)) << "its own, as fleet and 2.x";
    EXPECT_EQ(t.env.at("POD_IP"), "127.0.0.1");
    EXPECT_EQ(t.env.at("PADDLE_ROLE"), "TRAINER");
    EXPECT_EQ(t.env.count("STAGE_ID"), 0u) << "no heter workers, no stages";
    const auto back = env::from_env(t.env);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->rank, i);
    EXPECT_EQ(back->server_endpoints, plan.server_endpoints);
  }
  const std::string text = describe_plan(plan);
  EXPECT_NE(text.find("----------- server 1 (local server 1) environment: as server 0 except"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("----------- rank 2 (local rank 2) environment: as rank 0 except"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nPADDLE_TRAINER_ID=2\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("PADDLE_TRAINERS_NUM=3", text.find("rank 2 (local")), std::string::npos)
      << "what rank 2 shares with rank 0 is printed once: " << text;
}

// Paddle's launchers hand every process of a parameter-server job its Gloo rendezvous.
TEST(PsPlan, EveryProcessGetsTheGlooRendezvous) {
  FakePicker picker{{5001, 5002, 5003}};
  JobConfig config = ps(1, 2);
  config.gloo_port = 7100;
  config.with_gloo = 0;
  const ClusterPlan plan = make_plan(config, inputs(picker, 4));
  ASSERT_EQ(plan.local.size(), 3u);
  std::string fs_path;
  for (const PlannedWorker& w : plan.local) {
    EXPECT_EQ(w.env.at("PADDLE_WITH_GLOO"), "0");
    EXPECT_EQ(w.env.at("PADDLE_GLOO_RENDEZVOUS"), "3");
    EXPECT_EQ(w.env.at("PADDLE_GLOO_HTTP_ENDPOINT"), "127.0.0.1:7100") << "server 0's host";
    if (fs_path.empty()) fs_path = w.env.at("PADDLE_GLOO_FS_PATH");
    EXPECT_EQ(w.env.at("PADDLE_GLOO_FS_PATH"), fs_path) << "one path for the job on this node";
  }
  EXPECT_NE(fs_path.find("ddl-gloo-job1-g0"), std::string::npos) << fs_path;
  // A collective job has none of them.
  FakePicker picker2{{6001}};
  const ClusterPlan collective = make_plan(JobConfig{}, inputs(picker2, 4));
  EXPECT_EQ(collective.local.at(0).env.count("PADDLE_GLOO_HTTP_ENDPOINT"), 0u);
}

TEST(PsPlan, StartedPortGivesServersThenTrainers) {
  FakePicker picker{{1}};
  JobConfig config = ps(2, 2);
  config.started_port = 6170;
  const ClusterPlan plan = make_plan(config, inputs(picker));
  EXPECT_EQ(picker.calls, 0);
  EXPECT_EQ(env::join_endpoints(plan.server_endpoints), "127.0.0.1:6170,127.0.0.1:6171");
  EXPECT_EQ(env::join_endpoints(plan.endpoints), "127.0.0.1:6172,127.0.0.1:6173");
}

TEST(PsPlan, TrainersGetGpusServersDoNot) {
  FakePicker picker{{5001, 5002, 5003}};
  JobConfig config = ps(1, 2);
  config.selected_gpus = {4, 6};
  const ClusterPlan plan = make_plan(config, inputs(picker));
  ASSERT_EQ(plan.local.size(), 3u);
  EXPECT_EQ(plan.local[0].env.count("FLAGS_selected_gpus"), 0u) << "a server";
  EXPECT_EQ(plan.local[1].env.at("FLAGS_selected_gpus"), "4");
  EXPECT_EQ(plan.local[2].env.at("FLAGS_selected_gpus"), "6");
}

TEST(PsPlan, SeveralNodesEachRunSServersAndWTrainers) {
  FakePicker picker{{1}};
  auto on = [&](const std::string& ip) {
    JobConfig config = two_nodes(ip, 7000, 3);
    config.server_num = 2;
    config.worker_num = 3;
    return make_plan(config, inputs(picker));
  };
  const ClusterPlan second = on("10.0.0.2");
  EXPECT_EQ(env::join_endpoints(second.server_endpoints),
            "10.0.0.1:7000,10.0.0.1:7001,10.0.0.2:7000,10.0.0.2:7001");
  EXPECT_EQ(env::join_endpoints(second.endpoints),
            "10.0.0.1:7002,10.0.0.1:7003,10.0.0.1:7004,10.0.0.2:7002,10.0.0.2:7003,10.0.0.2:7004");
  EXPECT_EQ(second.world_size, 6);
  ASSERT_EQ(second.local.size(), 5u);
  EXPECT_EQ(second.local[0].contract.rank, 2) << "global server index = node*S + i";
  EXPECT_EQ(second.local[1].contract.rank, 3);
  EXPECT_EQ(second.local[1].env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.2:7001");
  EXPECT_EQ(second.local[1].env.at("POD_IP"), "10.0.0.2");
  EXPECT_EQ(second.local[2].env.at("PADDLE_TRAINER_ID"), "3") << "trainer id = node*W + i";
  EXPECT_EQ(second.local[4].env.at("PADDLE_TRAINER_ID"), "5");
  EXPECT_EQ(second.local[4].env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.2:7004");
  const ClusterPlan first = on("10.0.0.1");
  EXPECT_EQ(first.server_endpoints, second.server_endpoints) << "every node sees the same lists";
  EXPECT_EQ(first.endpoints, second.endpoints);
  EXPECT_EQ(first.local[0].contract.rank, 0);

  JobConfig no_port = ps(1, 1);
  no_port.cluster_node_ips = {"10.0.0.1", "10.0.0.2"};
  no_port.node_ip = "10.0.0.1";
  EXPECT_NE(plan_error(no_port, inputs(picker)).find("--started_port"), std::string::npos);
}

TEST(PsPlan, PublishedEndpointsAreSplitPerNode) {
  // What the control store hands a multi-node job: each node's servers, then its trainers.
  FakePicker picker{{1}};
  PlanInputs in = inputs(picker);
  in.cluster_endpoints = std::vector<env::Endpoint>{
      {"10.0.0.1", 100}, {"10.0.0.1", 101}, {"10.0.0.1", 102},   // node 0: server, 2 trainers
      {"10.0.0.2", 200}, {"10.0.0.2", 201}, {"10.0.0.2", 202}};  // node 1
  in.node_rank = 1;
  // As `launch --nnodes=2 --node_rank=1 --server_num=1 --worker_num=2 ...` on the second node: the
  // nodes come from the published endpoints.
  const JobConfig o = ps(1, 2);
  const ClusterPlan plan = make_plan(o, in);
  EXPECT_EQ(picker.calls, 0);
  EXPECT_EQ(env::join_endpoints(plan.server_endpoints), "10.0.0.1:100,10.0.0.2:200");
  EXPECT_EQ(env::join_endpoints(plan.endpoints),
            "10.0.0.1:101,10.0.0.1:102,10.0.0.2:201,10.0.0.2:202");
  ASSERT_EQ(plan.local.size(), 3u);
  EXPECT_EQ(plan.local[0].contract.rank, 1);
  EXPECT_EQ(plan.local[0].env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.2:200");
  EXPECT_EQ(plan.local[2].env.at("PADDLE_TRAINER_ID"), "3");
  EXPECT_EQ(local_endpoint_count(o), 3);
  EXPECT_EQ(env::join_endpoints(local_endpoints(o, "10.0.0.2", {7, 8, 9})),
            "10.0.0.2:7,10.0.0.2:8,10.0.0.2:9");
  EXPECT_THROW(local_endpoints(o, "10.0.0.2", {7, 8}), PlanError);

  in.cluster_endpoints->pop_back();
  EXPECT_NE(plan_error(o, in).find("not a multiple of 1 servers + 2 trainers"), std::string::npos);
}

TEST(PsPlan, ExplicitListsStartTheEntriesOnNodeIp) {
  FakePicker picker{{1}};
  // --servers=10.0.0.1:7000,10.0.0.2:7000,10.0.0.1:7001 --workers=10.0.0.2:7100,10.0.0.1:7100
  // --node_ip=IP [--gpus=...]
  auto on = [&](const std::string& ip, std::vector<int> gpus = {}) {
    JobConfig config = ps(3, 2);
    config.servers = {{"10.0.0.1", 7000}, {"10.0.0.2", 7000}, {"10.0.0.1", 7001}};
    config.workers = {{"10.0.0.2", 7100}, {"10.0.0.1", 7100}};
    config.cluster_node_ips = {ip};
    config.node_ip = ip;
    config.nproc_per_node = static_cast<int>(std::count_if(
        config.workers.begin(), config.workers.end(),
        [&](const env::Endpoint& e) { return e.host == ip; }));  // this node's trainers
    config.selected_gpus = std::move(gpus);
    return config;
  };
  const ClusterPlan first = make_plan(on("10.0.0.1"), inputs(picker));
  EXPECT_EQ(picker.calls, 0) << "the lists give every port";
  ASSERT_EQ(first.local.size(), 3u);
  EXPECT_EQ(first.local[0].contract.rank, 0);
  EXPECT_EQ(first.local[1].contract.rank, 2) << "indices follow the list order";
  EXPECT_EQ(first.local[1].contract.local_rank, 1);
  EXPECT_EQ(first.local[1].env.at("PADDLE_PORT"), "7001");
  EXPECT_EQ(first.local[2].contract.role, env::Role::kTrainer);
  EXPECT_EQ(first.local[2].env.at("PADDLE_TRAINER_ID"), "1");
  EXPECT_EQ(first.local[2].env.at("PADDLE_TRAINERS_NUM"), "2");
  EXPECT_EQ(first.local[2].env.at("PADDLE_PSERVERS_IP_PORT_LIST"),
            "10.0.0.1:7000,10.0.0.2:7000,10.0.0.1:7001");
  const ClusterPlan second = make_plan(on("10.0.0.2"), inputs(picker));
  ASSERT_EQ(second.local.size(), 2u);
  EXPECT_EQ(second.local[0].contract.rank, 1);
  EXPECT_EQ(second.local[1].env.at("PADDLE_TRAINER_ID"), "0");
  EXPECT_EQ(second.local[1].env.at("LOCAL_WORLD_SIZE"), "1");

  const std::string none = plan_error(on("10.0.0.3"), inputs(picker));
  EXPECT_NE(none.find("--node_ip='10.0.0.3'"), std::string::npos) << none;
  EXPECT_NE(none.find("10.0.0.1,10.0.0.2"), std::string::npos) << none;
  const std::string gpus = plan_error(on("10.0.0.2", {0, 1}), inputs(picker));
  EXPECT_NE(gpus.find("starts 1 trainer(s)"), std::string::npos) << gpus;
  EXPECT_EQ(make_plan(on("10.0.0.2", {3}), inputs(picker)).local[1].env.at("FLAGS_selected_gpus"),
            "3");
}

TEST(PsPlan, CollectiveJobsAreUntouched) {
  FakePicker picker{{5001, 5002}};
  const ClusterPlan plan = make_plan(collective(2), inputs(picker));
  EXPECT_TRUE(plan.server_endpoints.empty());
  for (const PlannedWorker& w : plan.local) {
    for (const char* name : {"TRAINING_ROLE", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PORT",
                             "POD_IP"}) {
      EXPECT_EQ(w.env.count(name), 0u) << name;
    }
  }
  EXPECT_EQ(local_endpoint_count(collective(3)), 3);
}

TEST(Plan, RandomHex) {
  const std::string a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(FindWorker, Rules) {
  namespace fs = std::filesystem;
  const std::string bin = DDL_BIN_DIR;
  EXPECT_EQ(find_worker("hello_worker", bin, {{"PATH", "/nonexistent"}}), bin + "/hello_worker");
  EXPECT_EQ(find_worker("sh", "/nonexistent", {{"PATH", "/nonexistent:/bin:/usr/bin"}}), "/bin/sh");
  EXPECT_THROW(find_worker("no_such_worker_xyz", bin, {{"PATH", "/bin"}}), WorkerNotFoundError);
  EXPECT_THROW(find_worker("/nonexistent/worker", bin, {}), WorkerNotFoundError);
  const fs::path plain = fs::temp_directory_path() / ("ddl_not_exec_" + std::to_string(::getpid()));
  std::ofstream(plain) << "#!/bin/sh\n";
  fs::permissions(plain, fs::perms::owner_read | fs::perms::owner_write);
  try {
    find_worker(plain.string(), bin, {});
    ADD_FAILURE() << "a non-executable file was accepted";
  } catch (const WorkerNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("not an executable"), std::string::npos) << e.what();
  }
  fs::remove(plain);
  EXPECT_THROW(find_worker(bin, bin, {}), WorkerNotFoundError) << "a directory is no worker";
}

TEST(SignalName, Known) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(64), "signal 64");
}

}  // namespace
}  // namespace ddl::launcher
