// env/scheduler.h: the contract of a rank that Slurm's srun or Open MPI's mpirun started, read
// from the variables those schedulers set (values as Slurm 22.05 and Open MPI 4.1 write them).
#include "env/scheduler.h"

#include <gtest/gtest.h>

#include <string>

namespace ddl::env {
namespace {

std::string error_of(const EnvMap& env) {
  try {
    scheduler_contract(env);
  } catch (const EnvError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TasksPerNode, ExpandsRepeatsAndLists) {
  EXPECT_EQ(expand_tasks_per_node("4", "T"), (std::vector<int>{4}));
  EXPECT_EQ(expand_tasks_per_node("2(x3)", "T"), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(expand_tasks_per_node("2(x3),1", "T"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("1,3(x2),2", "T"), (std::vector<int>{1, 3, 3, 2}));
}

TEST(TasksPerNode, RejectsMalformedTextQuotingIt) {
  for (const std::string bad : {"", "0", "x", "2(x", "2(x0)", "2(3)", ",1", "1,", "2(x-1)",
                                "1(x99999999)"}) {
    try {
      expand_tasks_per_node(bad, "SLURM_STEP_TASKS_PER_NODE");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const EnvError& e) {
      EXPECT_TRUE(contains(e.what(), "SLURM_STEP_TASKS_PER_NODE")) << e.what();
    }
  }
}

TEST(SchedulerContract, NoneWithoutASchedulersVariables) {
  EXPECT_FALSE(scheduler_contract({}).has_value());
  EXPECT_FALSE(scheduler_contract({{"PATH", "/bin"}, {"MASTER_ADDR", "h"}}).has_value());
  // A batch script's own shell (or salloc's) has a job but no step: it is not a rank.
  EXPECT_FALSE(scheduler_contract({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"},
                                   {"SLURM_NTASKS", "1"}})
                   .has_value());
}

EnvMap srun_task(int procid) {
  // srun -N2 -n3 on n1,n2: n1 runs tasks 0 and 1, n2 task 2.
  return {{"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_NTASKS", "3"},
          {"SLURM_LOCALID", procid < 2 ? std::to_string(procid) : "0"},
          {"SLURM_STEP_NODELIST", "n[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
          {"SLURMD_NODENAME", procid < 2 ? "n1" : "n2"},
          {"DDL_JOB_SECRET", "job-secret"}};
}

TEST(SchedulerContract, SrunTaskOnTheSecondNode) {
  const auto c = scheduler_contract(srun_task(2));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->source, WorkerContract::Source::kSlurm);
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->world_size, 3);
  EXPECT_EQ(c->local_rank, 0);
  EXPECT_EQ(c->local_world_size, 1);
  ASSERT_EQ(c->endpoints.size(), 1u);
  EXPECT_EQ(c->endpoints[0].host, "n1") << "the store is on the step's first node";
  EXPECT_EQ(c->endpoints[0].port, kSlurmPortBase + 1234);
  EXPECT_EQ(c->current.host, "n2");
  EXPECT_EQ(c->current.port, 0);
  EXPECT_EQ(c->job_id, "slurm-1234.0");
  EXPECT_EQ(c->restart_count, 0);
}

TEST(SchedulerContract, SrunRankZeroHostsTheStoreAndMasterVariablesWin) {
  EnvMap env = srun_task(0);
  env["MASTER_ADDR"] = "10.1.2.3";
  env["MASTER_PORT"] = "29501";
  env["DDL_JOB_SECRET"] = "s";
  env["DDL_RENDEZVOUS_TIMEOUT_MS"] = "2500";
  env["SLURM_RESTART_COUNT"] = "2";
  const auto c = scheduler_contract(env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->local_world_size, 2);
  EXPECT_EQ(c->endpoints[0].host, "10.1.2.3");
  EXPECT_EQ(c->endpoints[0].port, 29501);
  EXPECT_EQ(c->current.host, "10.1.2.3") << "rank 0 serves the store where the others look";
  EXPECT_EQ(c->current.port, 29501);
  EXPECT_EQ(c->secret, "s");
  EXPECT_EQ(c->rendezvous_timeout.count(), 2500);
  EXPECT_EQ(c->restart_count, 2);
}

TEST(SchedulerContract, SrunErrorsNameTheVariable) {
  EnvMap env = srun_task(1);
  env.erase("SLURM_NTASKS");
  EXPECT_TRUE(contains(error_of(env), "SLURM_NTASKS is not set")) << error_of(env);

  env = srun_task(1);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2,1,1";
  EXPECT_TRUE(contains(error_of(env), "gives 3 nodes")) << error_of(env);

  env = srun_task(1);
  env["SLURMD_NODENAME"] = "n9";
  EXPECT_TRUE(contains(error_of(env), "SLURMD_NODENAME='n9' is not in SLURM_STEP_NODELIST"))
      << error_of(env);

  env = srun_task(1);
  env["SLURM_PROCID"] = "3";
  EXPECT_TRUE(contains(error_of(env), "rank 3 must be in [0, 3)")) << error_of(env);

  env = srun_task(1);
  env.erase("DDL_JOB_SECRET");
  EXPECT_TRUE(contains(error_of(env), "needs DDL_JOB_SECRET")) << error_of(env);

  env = srun_task(1);
  env["MASTER_PORT"] = "http";
  EXPECT_TRUE(contains(error_of(env), "MASTER_PORT")) << error_of(env);
}

EnvMap mpirun_process(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)},
          {"OMPI_MCA_ess_base_jobid", "3735879681"}};
}

TEST(SchedulerContract, MpirunOnOneNodeNeedsNoMaster) {
  const auto c = scheduler_contract(mpirun_process(1, 2, 1, 2));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->source, WorkerContract::Source::kMpi);
  EXPECT_EQ(c->rank, 1);
  EXPECT_EQ(c->world_size, 2);
  EXPECT_EQ(c->local_rank, 1);
  EXPECT_EQ(c->local_world_size, 2);
  EXPECT_EQ(c->endpoints[0].host, "127.0.0.1");
  EXPECT_EQ(c->endpoints[0].port, kMpiDefaultPort);
  EXPECT_EQ(c->current.host, "127.0.0.1");
  EXPECT_EQ(c->job_id, "mpi-3735879681");
}

TEST(SchedulerContract, MpirunAcrossNodesNeedsMasterAddr) {
  EnvMap env = mpirun_process(3, 4, 1, 2);
  const std::string err = error_of(env);
  EXPECT_TRUE(contains(err, "OMPI_COMM_WORLD_SIZE=4 spans nodes")) << err;
  EXPECT_TRUE(contains(err, "mpirun -x MASTER_ADDR=")) << err;
  env["MASTER_ADDR"] = "node0";
  env["MASTER_PORT"] = "6000";
  EXPECT_TRUE(contains(error_of(env), "mpirun -x DDL_JOB_SECRET")) << error_of(env);
  env["DDL_JOB_SECRET"] = "x";
  const auto c = scheduler_contract(env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->endpoints[0].host, "node0");
  EXPECT_EQ(c->endpoints[0].port, 6000);
  EXPECT_EQ(c->current.host, "") << "a rank off the store's node listens on its host name";
}

TEST(SchedulerContract, MpirunWinsInsideASlurmStep) {
  // mpirun inside an allocation launches its daemons through srun: both sets are present.
  EnvMap env = srun_task(0);
  for (const auto& [k, v] : mpirun_process(1, 2, 1, 2)) env[k] = v;
  const auto c = scheduler_contract(env);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->source, WorkerContract::Source::kMpi);
  EXPECT_EQ(c->rank, 1);
}

TEST(SchedulerContract, PartialMpiVariablesAreAnError) {
  EnvMap env = mpirun_process(0, 2, 0, 2);
  env.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_TRUE(contains(error_of(env), "partial Open MPI environment: OMPI_COMM_WORLD_LOCAL_SIZE"))
      << error_of(env);
}

TEST(SchedulerContract, CannotBeWrittenAsLaunchVariables) {
  const auto c = scheduler_contract(mpirun_process(0, 2, 0, 2));
  ASSERT_TRUE(c.has_value());
  EXPECT_THROW(to_env(*c), EnvError);
}

}  // namespace
}  // namespace ddl::env
