#include "env/contract.h"

#include <gtest/gtest.h>

#include "logging/log.h"

namespace ddl::env {
namespace {

WorkerContract two_rank_contract(int rank) {
  WorkerContract c;
  c.rank = rank;
  c.world_size = 2;
  c.local_rank = rank;
  c.local_world_size = 2;
  c.endpoints = {{"127.0.0.1", 6170}, {"127.0.0.1", 6171}};
  c.current = c.endpoints[rank];
  c.job_id = "job-1";
  c.secret = "s3cret";
  c.rendezvous_timeout = std::chrono::milliseconds(1500);
  c.restart_count = 2;
  return c;
}

TEST(Endpoint, ParsesHostAndPort) {
  Endpoint e = parse_endpoint("10.0.0.7:6170", "X");
  EXPECT_EQ(e.host, "10.0.0.7");
  EXPECT_EQ(e.port, 6170);
  EXPECT_EQ(e.str(), "10.0.0.7:6170");
}

TEST(Endpoint, RejectsBadText) {
  for (const char* bad : {"", "host", ":80", "h:", "h:0", "h:65536", "h:-1", "h:+5", "h:8x",
                          "a b:80"}) {
    EXPECT_THROW(parse_endpoint(bad, "X"), EnvError) << bad;
  }
}

TEST(Endpoint, ErrorQuotesVariableAndValue) {
  try {
    parse_endpoint_list("127.0.0.1:1,oops", kTrainerEndpoints);
    FAIL();
  } catch (const EnvError& e) {
    EXPECT_NE(std::string(e.what()).find("PADDLE_TRAINER_ENDPOINTS='127.0.0.1:1,oops'"),
              std::string::npos)
        << e.what();
  }
}

TEST(NonNegativeInt, ParsesAndRejects) {
  EXPECT_EQ(parse_non_negative_int("0", "N"), 0);
  EXPECT_EQ(parse_non_negative_int("42", "N"), 42);
  for (const char* bad : {"", "-1", "+1", "1.5", "x", " 1", "99999999999"}) {
    EXPECT_THROW(parse_non_negative_int(bad, "N"), EnvError) << bad;
  }
}

TEST(Contract, WriteThenReadBack) {
  WorkerContract c = two_rank_contract(1);
  c.gpu = 3;
  EnvMap vars = to_env(c);
  EXPECT_EQ(vars.at(kTrainerId), "1");
  EXPECT_EQ(vars.at(kTrainersNum), "2");
  EXPECT_EQ(vars.at(kCurrentEndpoint), "127.0.0.1:6171");
  EXPECT_EQ(vars.at(kTrainerEndpoints), "127.0.0.1:6170,127.0.0.1:6171");
  EXPECT_EQ(vars.at(kSelectedGpus), "3");
  EXPECT_EQ(vars.at(kRank), "1");
  EXPECT_EQ(vars.at(kLocalRank), "1");
  EXPECT_EQ(vars.at(kWorldSize), "2");
  EXPECT_EQ(vars.at(kLocalWorldSize), "2");
  EXPECT_EQ(vars.at(kMasterAddr), "127.0.0.1");
  EXPECT_EQ(vars.at(kMasterPort), "6170");

  auto back = from_env(vars);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->world_size, 2);
  EXPECT_EQ(back->local_rank, 1);
  EXPECT_EQ(back->local_world_size, 2);
  EXPECT_EQ(back->current, c.current);
  EXPECT_EQ(back->endpoints, c.endpoints);
  EXPECT_EQ(back->gpu, 3);
  EXPECT_EQ(back->job_id, "job-1");
  EXPECT_EQ(back->secret, "s3cret");
  EXPECT_EQ(back->rendezvous_timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(back->restart_count, 2);
}

TEST(Contract, TorchrunAgentVariables) {
  WorkerContract c = two_rank_contract(1);
  c.node_rank = 1;
  c.nnodes = 3;
  c.run_id = "run-7";
  c.max_restarts = 4;
  c.role_name = "trainer";
  c.error_file = "/logs/error.1.json";
  const EnvMap vars = to_env(c);
  EXPECT_EQ(vars.at(kGroupRank), "1");
  EXPECT_EQ(vars.at(kGroupWorldSize), "3");
  EXPECT_EQ(vars.at(kRoleRank), "1");
  EXPECT_EQ(vars.at(kRoleWorldSize), "2");
  EXPECT_EQ(vars.at(kRoleName), "trainer");
  EXPECT_EQ(vars.at(kElasticRunId), "run-7");
  EXPECT_EQ(vars.at(kElasticRestartCount), "2") << "the generation, as DDL_RESTART_COUNT";
  EXPECT_EQ(vars.at(kElasticMaxRestarts), "4");
  EXPECT_EQ(vars.at(kElasticUseAgentStore), "False");
  EXPECT_EQ(vars.at(kElasticErrorFile), "/logs/error.1.json");
  c.error_file.clear();
  EXPECT_EQ(to_env(c).count(kElasticErrorFile), 0u);
  // Defaults: one node, torchrun's role and run id.
  const EnvMap plain = to_env(two_rank_contract(0));
  EXPECT_EQ(plain.at(kGroupRank), "0");
  EXPECT_EQ(plain.at(kGroupWorldSize), "1");
  EXPECT_EQ(plain.at(kRoleName), "default");
  EXPECT_EQ(plain.at(kElasticRunId), "none");
}

TEST(Contract, Paddle2Variables) {
  WorkerContract c = two_rank_contract(1);
  const EnvMap cpu = to_env(c);
  EXPECT_EQ(cpu.at(kPaddleGlobalRank), "1");
  EXPECT_EQ(cpu.at(kPaddleLocalRank), "1");
  EXPECT_EQ(cpu.at(kPaddleGlobalSize), "2");
  EXPECT_EQ(cpu.at(kPaddleLocalSize), "2");
  EXPECT_EQ(cpu.at(kPaddleNnodes), "1");
  EXPECT_EQ(cpu.at(kPaddleMaster), "127.0.0.1:6170");
  EXPECT_EQ(cpu.at(kPaddleRankInNode), "1");
  EXPECT_EQ(cpu.at(kPaddleWorldDeviceIds), "0,1") << "CPU processes are numbered by local rank";
  EXPECT_EQ(cpu.at(kPaddleLocalDeviceIds), "1");
  EXPECT_EQ(cpu.at(kPaddleJobId), "default");
  EXPECT_EQ(cpu.at(kPaddleDistriBackend), "gloo") << "no GPU: Paddle must not take the NCCL way";

  c.gpu = 5;
  c.world_device_ids = {4, 5};
  c.paddle_job_id = "mnist";
  const EnvMap gpu = to_env(c);
  EXPECT_EQ(gpu.at(kPaddleWorldDeviceIds), "4,5");
  EXPECT_EQ(gpu.at(kPaddleLocalDeviceIds), "5");
  EXPECT_EQ(gpu.at(kPaddleJobId), "mnist");
  EXPECT_EQ(gpu.count(kPaddleDistriBackend), 0u);

  c.world_device_ids = {4, 6};
  EXPECT_THROW(to_env(c), EnvError) << "the local device must be FLAGS_selected_gpus";
  c.world_device_ids = {4};
  EXPECT_THROW(to_env(c), EnvError) << "one device per rank";
}

TEST(Contract, JobPlaceMustBeConsistent) {
  WorkerContract c = two_rank_contract(0);
  c.node_rank = 2;
  c.nnodes = 2;
  EXPECT_THROW(to_env(c), EnvError);
  c = two_rank_contract(0);
  c.max_restarts = -1;
  EXPECT_THROW(to_env(c), EnvError);
  c = two_rank_contract(0);
  c.run_id.clear();
  EXPECT_THROW(to_env(c), EnvError);
}

TEST(Contract, ServersGetNoTorchrunOrPaddle2Variables) {
  WorkerContract c = two_rank_contract(0);
  c.role = Role::kServer;
  c.server_endpoints = {{"127.0.0.1", 7000}};
  c.current = c.server_endpoints[0];
  c.local_rank = 0;
  c.local_world_size = 1;
  const EnvMap vars = to_env(c);
  for (const char* name : {kGroupRank, kElasticRunId, kElasticUseAgentStore, kPaddleGlobalRank,
                           kPaddleWorldDeviceIds, kPaddleMaster}) {
    EXPECT_EQ(vars.count(name), 0u) << name;
  }
}

TEST(Contract, NoGpuMeansNoFlag) {
  EnvMap vars = to_env(two_rank_contract(0));
  EXPECT_EQ(vars.count(kSelectedGpus), 0u);
  EXPECT_FALSE(from_env(vars)->gpu.has_value());
}

TEST(Contract, EmptySelectedGpusIsACpuWorker) {
  // Paddle 1.8 and the fleet launcher give a CPU worker an empty device list.
  EnvMap vars = to_env(two_rank_contract(0));
  vars[kSelectedGpus] = "";
  const auto c = from_env(vars);
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(c->gpu.has_value());
}

TEST(Contract, AbsentMeansWorldOfOne) {
  EXPECT_FALSE(from_env(EnvMap{{"PATH", "/bin"}}).has_value());
}

TEST(Contract, LocalPlacementDerivedFromEndpointsWithoutTorchrunVars) {
  EnvMap vars = {{kTrainerId, "3"},
                 {kTrainersNum, "4"},
                 {kCurrentEndpoint, "10.0.0.2:7001"},
                 {kTrainerEndpoints, "10.0.0.1:7000,10.0.0.1:7001,10.0.0.2:7000,10.0.0.2:7001"}};
  auto c = from_env(vars);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->local_rank, 1);
  EXPECT_EQ(c->local_world_size, 2);
}

void expect_env_error(const EnvMap& vars, const std::string& fragment) {
  try {
    from_env(vars);
    ADD_FAILURE() << "no error; expected one mentioning " << fragment;
  } catch (const EnvError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Contract, PartialOrInconsistentIsAClearError) {
  EnvMap good = to_env(two_rank_contract(1));
  EnvMap partial = good;
  partial.erase(kTrainerEndpoints);
  expect_env_error(partial, "PADDLE_TRAINER_ENDPOINTS is not set");

  EnvMap rank_too_big = good;
  rank_too_big[kTrainerId] = "2";
  expect_env_error(rank_too_big, "PADDLE_TRAINER_ID='2'");

  EnvMap count_mismatch = good;
  count_mismatch[kTrainersNum] = "3";
  expect_env_error(count_mismatch, "has 2 endpoints, expected PADDLE_TRAINERS_NUM=3");

  EnvMap bad_endpoint = good;
  bad_endpoint[kCurrentEndpoint] = "127.0.0.1";
  expect_env_error(bad_endpoint, "PADDLE_CURRENT_ENDPOINT='127.0.0.1'");

  EnvMap not_mine = good;
  not_mine[kCurrentEndpoint] = "127.0.0.1:6170";
  expect_env_error(not_mine, "is not entry 1 of PADDLE_TRAINER_ENDPOINTS");

  EnvMap bad_gpu = good;
  bad_gpu[kSelectedGpus] = "0,1";
  expect_env_error(bad_gpu, "FLAGS_selected_gpus='0,1'");

  EnvMap bad_timeout = good;
  bad_timeout[kRendezvousTimeoutMs] = "0";
  expect_env_error(bad_timeout, "DDL_RENDEZVOUS_TIMEOUT_MS='0'");
}

TEST(Contract, OmpThreads) {
  EXPECT_EQ(default_omp_threads(8, 2), 4);
  EXPECT_EQ(default_omp_threads(2, 4), 1);
  EXPECT_EQ(default_omp_threads(3, 2), 1);
  EXPECT_EQ(default_omp_threads(4, 0), 4);
}

TEST(CurrentEnvironment, SeesProcessVariables) {
  EnvMap vars = current_environment();
  EXPECT_TRUE(lookup(vars, "PATH").has_value());
  EXPECT_FALSE(lookup(vars, "DDL_SURELY_NOT_SET_ANYWHERE").has_value());
}

TEST(Logging, ParsesNamesAndPaddleNumbers) {
  EXPECT_EQ(logging::parse_level("debug"), spdlog::level::debug);
  EXPECT_EQ(logging::parse_level("INFO"), spdlog::level::info);
  EXPECT_EQ(logging::parse_level("30"), spdlog::level::warn);
  EXPECT_EQ(logging::parse_level("40"), spdlog::level::err);
  EXPECT_THROW(logging::parse_level("loud"), std::invalid_argument);
  EXPECT_THROW(logging::parse_level("25"), std::invalid_argument);
}

}  // namespace
}  // namespace ddl::env

namespace ddl::env {
namespace {

TEST(Fault, ParsesEveryAction) {
  FaultSpec f = parse_fault_spec("rank=1,step=30,exit=3,restart=0");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 30);
  EXPECT_EQ(f.action, FaultSpec::Action::kExit);
  EXPECT_EQ(f.exit_code, 3);
  EXPECT_EQ(f.restart, 0);
  EXPECT_TRUE(f.fires(1, 30, 0));
  EXPECT_FALSE(f.fires(1, 30, 1));
  EXPECT_FALSE(f.fires(0, 30, 0));
  EXPECT_FALSE(f.fires(1, 29, 0));
  EXPECT_EQ(parse_fault_spec("step=2,abort,rank=0").action, FaultSpec::Action::kAbort);
  FaultSpec hang = parse_fault_spec("rank=0,step=2,hang");
  EXPECT_EQ(hang.action, FaultSpec::Action::kHang);
  EXPECT_TRUE(hang.fires(0, 2, 5));
}

TEST(Fault, MalformedIsAClearError) {
  for (const char* bad : {"", "rank=1", "rank=1,step=2", "rank=1,step=2,exit", "rank=x,step=2,abort",
                          "rank=1,step=2,abort,hang", "rank=1,step=2,explode"}) {
    try {
      parse_fault_spec(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const EnvError& e) {
      EXPECT_NE(std::string(e.what()).find("DDL_FAULT"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fault_spec(EnvMap{}).has_value());
  EXPECT_TRUE(fault_spec(EnvMap{{kFault, "rank=0,step=1,abort"}}).has_value());
}

// --- Roles (parameter-server jobs) --------------------------------------------------------------

// Server `index` of a job with two trainers on 127.0.0.1 and two servers on 127.0.0.2.
WorkerContract server_contract(int index) {
  WorkerContract c = two_rank_contract(0);
  c.role = Role::kServer;
  c.server_endpoints = {{"127.0.0.2", 8000}, {"127.0.0.2", 8001}};
  c.rank = index;
  c.local_rank = index;
  c.current = c.server_endpoints[index];
  return c;
}

TEST(Role, ValuesAndNames) {
  EXPECT_EQ(role_value(Role::kTrainer), "TRAINER");
  EXPECT_EQ(role_value(Role::kServer), "PSERVER");
  EXPECT_EQ(role_noun(Role::kServer), "server");
  EXPECT_EQ(parse_role("TRAINER", kTrainingRole), Role::kTrainer);
  EXPECT_EQ(parse_role("PSERVER", kTrainingRole), Role::kServer);
  EXPECT_EQ(role_value(Role::kHeterTrainer), "HETER_TRAINER");
  EXPECT_EQ(role_noun(Role::kHeterTrainer), "heter worker");
  EXPECT_EQ(parse_role("HETER_TRAINER", kTrainingRole), Role::kHeterTrainer);
  for (const char* bad : {"", "trainer", "SERVER", "PSERVER ", "HETER"}) {
    try {
      parse_role(bad, kTrainingRole);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const EnvError& e) {
      EXPECT_NE(std::string(e.what()).find("TRAINING_ROLE='" + std::string(bad) +
                                           "': expected TRAINER, PSERVER or HETER_TRAINER"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Role, TypedReadersAndWriters) {
  EnvMap env;
  EXPECT_EQ(role_of(env), Role::kTrainer) << "unset means a trainer";
  set_role(env, Role::kServer);
  EXPECT_EQ(env.at(kTrainingRole), "PSERVER");
  EXPECT_EQ(role_of(env), Role::kServer);
  env[kTrainingRole] = "worker";
  EXPECT_THROW(role_of(env), EnvError);

  EXPECT_TRUE(server_endpoints_of(env).empty());
  set_server_endpoints(env, {{"10.0.0.1", 6000}, {"10.0.0.2", 6001}});
  EXPECT_EQ(env.at(kPserverEndpoints), "10.0.0.1:6000,10.0.0.2:6001");
  EXPECT_EQ(server_endpoints_of(env).size(), 2u);
  set_server_endpoints(env, {});
  EXPECT_EQ(env.count(kPserverEndpoints), 0u) << "an empty list removes the variable";
  env[kPserverEndpoints] = "";
  EXPECT_THROW(server_endpoints_of(env), EnvError);
  env[kPserverEndpoints] = "10.0.0.1:6000,nope";
  EXPECT_THROW(server_endpoints_of(env), EnvError);
}

TEST(Role, CollectiveJobsCarryNoRoleVariables) {
  // Paddle's collective launch sets neither; only its parameter-server launch does.
  const EnvMap vars = to_env(two_rank_contract(1));
  EXPECT_EQ(vars.count(kTrainingRole), 0u);
  EXPECT_EQ(vars.count(kPserverEndpoints), 0u);
  EXPECT_EQ(vars.count(kServerPort), 0u);
  EXPECT_EQ(vars.count(kPodIp), 0u);
  EXPECT_EQ(from_env(vars)->role, Role::kTrainer);
  EXPECT_TRUE(from_env(vars)->server_endpoints.empty());
}

TEST(Role, TrainerOfAServerJobKnowsTheServers) {
  WorkerContract c = two_rank_contract(1);
  c.server_endpoints = server_contract(0).server_endpoints;
  const EnvMap vars = to_env(c);
  EXPECT_EQ(vars.at(kTrainingRole), "TRAINER");
  EXPECT_EQ(vars.at(kPserverEndpoints), "127.0.0.2:8000,127.0.0.2:8001");
  EXPECT_EQ(vars.at(kTrainerId), "1");
  EXPECT_EQ(vars.at(kPaddleRole), "TRAINER") << "Paddle 2.x's name of the role";
  EXPECT_EQ(vars.at(kServerPort), "6171") << "the fleet and 2.x launchers give trainers theirs";
  EXPECT_EQ(vars.at(kPodIp), "127.0.0.1");
  const auto back = from_env(vars);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->role, Role::kTrainer);
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->server_endpoints, c.server_endpoints);
}

TEST(Role, HeterWorkerWriteThenReadBack) {
  // Two trainers, stage 2 with one heter worker on gpu, stage 3 with two on xpu.
  WorkerContract c = server_contract(0);
  const std::vector<Endpoint> s2 = {{"127.0.0.3", 9000}};
  const std::vector<Endpoint> s3 = {{"127.0.0.3", 9001}, {"127.0.0.3", 9002}};
  c.heter_stages = {HeterStage{"gpu", s2}, HeterStage{"xpu", s3}};
  c.heter_endpoints = {s2[0], s3[0], s3[1]};
  c.role = Role::kHeterTrainer;
  c.rank = 2;
  c.stage = 3;
  c.local_rank = 2;
  c.local_world_size = 3;
  c.current = s3[1];
  EnvMap vars = to_env(c);
  EXPECT_EQ(vars.at(kTrainingRole), "HETER_TRAINER");
  EXPECT_EQ(vars.at(kPaddleRole), "HETER_TRAINER");
  EXPECT_EQ(vars.at(kAllHeterEndpoints), "127.0.0.3:9000,127.0.0.3:9001,127.0.0.3:9002");
  EXPECT_EQ(vars.at(kPreviousHeterEndpoints), "127.0.0.3:9000");
  EXPECT_EQ(vars.at(kNextHeterEndpoints), "") << "the last stage has none";
  EXPECT_EQ(vars.at(kHeterDeviceType), "xpu");
  EXPECT_EQ(vars.at(kStageId), "3");
  EXPECT_EQ(vars.at(kStageNum), "3");
  EXPECT_EQ(vars.at(kStageTrainersNum), "[2, 1, 2]");
  EXPECT_EQ(vars.at(kServerPort), "9002");
  EXPECT_EQ(vars.at(kPodIp), "127.0.0.3");
  EXPECT_EQ(vars.count(kTrainerId), 0u);
  EXPECT_EQ(vars.count(kRank), 0u);
  const auto back = from_env(vars);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->role, Role::kHeterTrainer);
  EXPECT_EQ(back->rank, 2) << "its position in the heter list";
  EXPECT_EQ(back->local_world_size, 3);

  // A trainer of that job is stage 1: previous none, next stage 2, device cpu.
  WorkerContract t = two_rank_contract(1);
  t.server_endpoints = c.server_endpoints;
  t.heter_endpoints = c.heter_endpoints;
  t.heter_stages = c.heter_stages;
  vars = to_env(t);
  EXPECT_EQ(vars.at(kStageId), "1");
  EXPECT_EQ(vars.at(kPreviousHeterEndpoints), "");
  EXPECT_EQ(vars.at(kNextHeterEndpoints), "127.0.0.3:9000");
  EXPECT_EQ(vars.at(kHeterDeviceType), "cpu");
  // Stage 2's previous stage is the trainers.
  c.rank = 0;
  c.stage = 2;
  c.local_rank = 0;
  c.current = s2[0];
  vars = to_env(c);
  EXPECT_EQ(vars.at(kPreviousHeterEndpoints), "127.0.0.1:6170,127.0.0.1:6171");
  EXPECT_EQ(vars.at(kNextHeterEndpoints), "127.0.0.3:9001,127.0.0.3:9002");
  // Inconsistent: a stage that does not hold the worker, a heter worker without the list.
  c.stage = 3;
  EXPECT_THROW(to_env(c), EnvError);
  EnvMap partial = to_env(server_contract(0));
  partial[kTrainingRole] = "HETER_TRAINER";
  EXPECT_THROW(from_env(partial), EnvError);
}

TEST(Role, ServerWriteThenReadBack) {
  const EnvMap vars = to_env(server_contract(1));
  EXPECT_EQ(vars.at(kTrainingRole), "PSERVER");
  EXPECT_EQ(vars.at(kPaddleRole), "PSERVER");
  EXPECT_EQ(vars.at(kPaddleNnodes), "1");
  EXPECT_EQ(vars.at(kPserverEndpoints), "127.0.0.2:8000,127.0.0.2:8001");
  EXPECT_EQ(vars.at(kCurrentEndpoint), "127.0.0.2:8001");
  EXPECT_EQ(vars.at(kTrainersNum), "2");
  EXPECT_EQ(vars.at(kTrainerEndpoints), "127.0.0.1:6170,127.0.0.1:6171");
  EXPECT_EQ(vars.at(kServerPort), "8001");
  EXPECT_EQ(vars.at(kPodIp), "127.0.0.2");
  for (const char* trainer_only : {kTrainerId, kRank, kLocalRank, kWorldSize, kLocalWorldSize,
                                   kMasterAddr, kMasterPort}) {
    EXPECT_EQ(vars.count(trainer_only), 0u) << trainer_only << " is not written for a server";
  }
  const auto back = from_env(vars);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->role, Role::kServer);
  EXPECT_EQ(back->rank, 1) << "the index is the endpoint's position in the server list";
  EXPECT_EQ(back->current, (Endpoint{"127.0.0.2", 8001}));
  EXPECT_EQ(back->local_rank, 1);
  EXPECT_EQ(back->local_world_size, 2) << "counted among the servers on this host";
  EXPECT_EQ(back->world_size, 2);
  EXPECT_EQ(back->job_id, "job-1");
  EXPECT_EQ(back->restart_count, 2);
}

TEST(Role, BadServerContractsAreClearErrors) {
  const EnvMap good = to_env(server_contract(0));
  EnvMap stranger = good;
  stranger[kCurrentEndpoint] = "127.0.0.2:9999";
  expect_env_error(stranger,
                   "PADDLE_CURRENT_ENDPOINT='127.0.0.2:9999': a server's endpoint must be one of "
                   "PADDLE_PSERVERS_IP_PORT_LIST='127.0.0.2:8000,127.0.0.2:8001'");
  EnvMap no_list = good;
  no_list.erase(kPserverEndpoints);
  expect_env_error(no_list, "partial server contract: PADDLE_PSERVERS_IP_PORT_LIST is not set");
  EnvMap no_trainers = good;
  no_trainers.erase(kTrainersNum);
  expect_env_error(no_trainers, "partial server contract: PADDLE_TRAINERS_NUM is not set");
  EnvMap bad_role = good;
  bad_role[kTrainingRole] = "pserver";
  expect_env_error(bad_role, "TRAINING_ROLE='pserver'");

  WorkerContract listless = server_contract(0);
  listless.server_endpoints.clear();
  EXPECT_THROW(listless.validate(), EnvError);
  WorkerContract misplaced = server_contract(0);
  misplaced.current = misplaced.server_endpoints[1];
  try {
    misplaced.validate();
    ADD_FAILURE() << "accepted a server whose endpoint is another's";
  } catch (const EnvError& e) {
    EXPECT_NE(std::string(e.what()).find("is not entry 0 of PADDLE_PSERVERS_IP_PORT_LIST"),
              std::string::npos)
        << e.what();
  }
}

TEST(Role, ServerPortAndHostMustMatchItsEndpoint) {
  const EnvMap good = to_env(server_contract(1));
  EnvMap without = good;
  without.erase(kServerPort);
  without.erase(kPodIp);
  ASSERT_TRUE(from_env(without)) << "PADDLE_PORT and POD_IP are optional when reading";
  EXPECT_EQ(from_env(without)->rank, 1);

  EnvMap other_port = good;
  other_port[kServerPort] = "8000";
  expect_env_error(other_port,
                   "PADDLE_PORT='8000': a server's port must be the one of "
                   "PADDLE_CURRENT_ENDPOINT='127.0.0.2:8001'");
  EnvMap other_host = good;
  other_host[kPodIp] = "10.1.1.1";
  expect_env_error(other_host,
                   "POD_IP='10.1.1.1': a server's host must be the one of "
                   "PADDLE_CURRENT_ENDPOINT='127.0.0.2:8001'");
}

TEST(Role, TrainersIgnoreServerOnlyVariables) {
  // A cluster manager may set POD_IP for every process; a trainer does not read it.
  WorkerContract c = two_rank_contract(0);
  c.server_endpoints = server_contract(0).server_endpoints;
  EnvMap vars = to_env(c);
  vars[kPodIp] = "10.9.9.9";
  vars[kServerPort] = "1";
  const auto back = from_env(vars);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->role, Role::kTrainer);
  EXPECT_EQ(back->current, (Endpoint{"127.0.0.1", 6170}));
}

}  // namespace
}  // namespace ddl::env
