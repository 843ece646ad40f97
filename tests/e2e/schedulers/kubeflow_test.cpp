// Kubeflow's training operator: every pod of a PyTorchJob runs the same command, here plain
// `launch hello_worker`, and learns its place only from the variables the operator puts in the
// pod (pkg/controller.v1/pytorch: MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK for plain programs,
// PET_MASTER_ADDR/PET_MASTER_PORT/PET_NNODES/PET_NODE_RANK/PET_NPROC_PER_NODE for torchrun, which
// reads every PET_<FLAG> as the default of --<flag>). Two "pods" on this machine (master-0 and
// worker-0, the master service's address 127.0.0.1) must form one job; a flag on the command line
// wins over its variable.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace {

using ddl::testing::contains;
using ddl::testing::read_file;
using ddl::testing::TempDir;
using std::chrono::milliseconds;

const std::string kBin = DDL_BIN_DIR;

// The environment of pod `node_rank` of a PyTorchJob with one Master and one Worker replica and
// nprocPerNode `nproc` (what the operator sets), plus the job secret the pod spec adds.
std::map<std::string, std::string> pod_env(int node_rank, int port, int nproc) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    const std::string k = kv.substr(0, eq);
    bool theirs = false;
    for (const char* prefix : {"PET_", "PADDLE_", "SLURM_", "OMPI_", "DDL_", "TORCHELASTIC_"}) {
      theirs = theirs || k.rfind(prefix, 0) == 0;
    }
    if (eq == std::string::npos || theirs || k == "MASTER_ADDR" || k == "MASTER_PORT" ||
        k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK") {
      continue;
    }
    env[k] = kv.substr(eq + 1);
  }
  const std::map<std::string, std::string> operator_env{
      {"PYTHONUNBUFFERED", "0"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(port)},
      {"PET_MASTER_ADDR", "127.0.0.1"},
      {"PET_MASTER_PORT", std::to_string(port)},
      {"WORLD_SIZE", std::to_string(2 * nproc)},
      {"RANK", std::to_string(node_rank)},
      {"PET_NPROC_PER_NODE", std::to_string(nproc)},
      {"PET_NODE_RANK", std::to_string(node_rank)},
      {"PET_NNODES", "2"},
      {"DDL_JOB_SECRET", "kubeflow-test-secret"}};
  for (const auto& [k, v] : operator_env) env[k] = v;
  return env;
}

// The test's environment without launcher, scheduler or job variables, plus `pod`.
std::map<std::string, std::string> plain_env(const std::map<std::string, std::string>& pod) {
  std::map<std::string, std::string> env = pod_env(0, 1, 1);
  for (auto it = env.begin(); it != env.end();) {
    const bool operator_set = it->first.rfind("PET_", 0) == 0 || it->first == "MASTER_ADDR" ||
                              it->first == "MASTER_PORT" || it->first == "RANK" ||
                              it->first == "WORLD_SIZE";
    it = operator_set ? env.erase(it) : std::next(it);
  }
  for (const auto& [k, v] : pod) env[k] = v;
  return env;
}

// Starts one launch per entry of `envs` (same flags), waits for all; outputs and exit codes.
std::vector<std::string> run_launchers(const TempDir& dir, const std::vector<std::string>& flags,
                                       const std::vector<std::map<std::string, std::string>>& envs,
                                       std::vector<std::optional<int>>& codes) {
  std::vector<std::unique_ptr<ddl::testing::ChildProcess>> pods;
  for (std::size_t node = 0; node < envs.size(); ++node) {
    ddl::testing::SpawnOptions o;
    // Each pod has its own log folder, as pods have their own file systems (Paddle 2.x names
    // the logs by local index, so pods sharing one folder would overwrite each other's).
    o.argv = {kBin + "/launch", "--print_config=false", "--rendezvous_timeout=60", "--log_dir",
              (dir.path() / ("pod" + std::to_string(node)) / "logs").string()};
    o.argv.insert(o.argv.end(), flags.begin(), flags.end());
    o.argv.insert(o.argv.end(), {kBin + "/hello_worker", "--show_env", "PADDLE_JOB_ID"});
    o.env = envs[node];
    o.stdout_path = dir.path() / ("pod" + std::to_string(node) + ".out");
    o.own_process_group = true;
    pods.push_back(std::make_unique<ddl::testing::ChildProcess>(o));
  }
  std::vector<std::string> outs;
  codes.clear();
  for (std::size_t node = 0; node < envs.size(); ++node) {
    codes.push_back(pods[node]->wait(milliseconds(90'000)));
    outs.push_back(read_file(dir.path() / ("pod" + std::to_string(node) + ".out")));
  }
  return outs;
}

struct Pod {
  std::unique_ptr<ddl::testing::ChildProcess> launch;
  std::string out;
};

// Starts both pods with `flags` before WORKER, waits for both, returns their output.
std::vector<std::string> run_pods(const TempDir& dir, const std::vector<std::string>& flags,
                                  int nproc, std::vector<std::optional<int>>& codes) {
  const int port = ddl::testing::free_port_block_above_ephemeral();
  std::vector<std::unique_ptr<ddl::testing::ChildProcess>> pods;
  for (int node = 0; node < 2; ++node) {
    ddl::testing::SpawnOptions o;
    o.argv = {kBin + "/launch", "--print_config=false", "--rendezvous_timeout=60", "--log_dir",
              (dir.path() / ("pod" + std::to_string(node))).string()};
    o.argv.insert(o.argv.end(), flags.begin(), flags.end());
    o.argv.insert(o.argv.end(), {kBin + "/hello_worker", "--show_env", "RANK"});
    o.env = pod_env(node, port, nproc);
    o.stdout_path = dir.path() / ("pod" + std::to_string(node) + ".out");
    o.own_process_group = true;
    pods.push_back(std::make_unique<ddl::testing::ChildProcess>(o));
  }
  std::vector<std::string> outs;
  codes.clear();
  for (int node = 0; node < 2; ++node) {
    codes.push_back(pods[node]->wait(milliseconds(90'000)));
    outs.push_back(read_file(dir.path() / ("pod" + std::to_string(node) + ".out")));
  }
  return outs;
}

std::string worker_log(const TempDir& dir, int node, int rank) {
  return read_file(dir.path() / ("pod" + std::to_string(node)) /
                   ("workerlog." + std::to_string(rank)));
}

TEST(KubeflowPyTorchJob, PodsFormOneJobFromTheOperatorsVariables) {
  TempDir dir("ddl_kubeflow");
  std::vector<std::optional<int>> codes;
  const auto outs = run_pods(dir, {}, 2, codes);
  for (int node = 0; node < 2; ++node) {
    SCOPED_TRACE("pod " + std::to_string(node) + ":\n" + outs[node]);
    ASSERT_EQ(codes[node], 0);
    EXPECT_TRUE(contains(outs[node],
                         "flag defaults from the environment (torchrun's PET_<FLAG>, "
                         "Paddle's PADDLE_<FLAG>): PET_NNODES=2, PET_NODE_RANK=" +
                             std::to_string(node)));
    EXPECT_TRUE(contains(outs[node], "node " + std::to_string(node) + " of 2"));
  }
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    const std::string log = worker_log(dir, node, rank);
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(rank) + " of 4")) << log;
    // The pod's RANK (its node rank) is replaced by the worker's global rank.
    EXPECT_TRUE(contains(log, "ENV RANK=" + std::to_string(rank) + "\n")) << log;
  }
}

TEST(KubeflowPyTorchJob, CommandLineFlagWinsOverItsVariable) {
  TempDir dir("ddl_kubeflow");
  std::vector<std::optional<int>> codes;
  const auto outs = run_pods(dir, {"--nproc_per_node=1"}, 2, codes);
  for (int node = 0; node < 2; ++node) {
    SCOPED_TRACE("pod " + std::to_string(node) + ":\n" + outs[node]);
    ASSERT_EQ(codes[node], 0);
    EXPECT_FALSE(contains(outs[node], "PET_NPROC_PER_NODE"));
    const std::string log = worker_log(dir, node, node);
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(node) + " of 2")) << log;
  }
}

// Kubeflow's PaddleJob (pkg/controller.v1/paddlepaddle/envvar.go) gives its pods PADDLE_MASTER,
// PADDLE_NNODES and PADDLE_JOB_ID but no node rank: as Paddle's own master does, node 0 is the
// launcher at the master's address and hands the other node ranks out.
TEST(KubeflowPaddleJob, PodsWithoutNodeRanksFormOneJob) {
  TempDir dir("ddl_paddlejob");
  const std::string master =
      "127.0.0.1:" + std::to_string(ddl::testing::free_port_block_above_ephemeral());
  std::vector<std::map<std::string, std::string>> envs;
  for (int pod = 0; pod < 2; ++pod) {
    envs.push_back(plain_env({{"PADDLE_MASTER", master},
                              {"PADDLE_NNODES", "2"},
                              {"PADDLE_JOB_ID", "mnist-paddle"},
                              {"PYTHONUNBUFFERED", "1"},
                              {"DDL_JOB_SECRET", "paddlejob-secret"}}));
  }
  std::vector<std::optional<int>> codes;
  const auto outs = run_launchers(dir, {"--nproc_per_node=2"}, envs, codes);
  SCOPED_TRACE("pod 0:\n" + outs[0] + "\npod 1:\n" + outs[1]);
  ASSERT_EQ(codes[0], 0);
  ASSERT_EQ(codes[1], 0);
  int hosts = 0;
  for (int pod = 0; pod < 2; ++pod) {
    EXPECT_TRUE(contains(outs[pod], "PADDLE_MASTER=" + master + ", PADDLE_NNODES=2"));
    hosts += contains(outs[pod], "node rank 0: this launcher hosts the control store") ? 1 : 0;
  }
  EXPECT_EQ(hosts, 1) << "exactly one launcher is node 0";
  EXPECT_TRUE(contains(outs[0] + outs[1], "node rank 1 assigned by node 0's control store"));
  // PADDLE_MASTER is Paddle 2.x's spelling: each pod's log folder holds workerlog.0 and
  // workerlog.1 (local indexes); together the pods' logs show global ranks 0..3.
  std::set<int> ranks;
  for (int pod = 0; pod < 2; ++pod) {
    for (int local = 0; local < 2; ++local) {
      const std::string log = read_file(dir.path() / ("pod" + std::to_string(pod)) / "logs" /
                                        ("workerlog." + std::to_string(local)));
      EXPECT_TRUE(contains(log, "ENV PADDLE_JOB_ID=mnist-paddle\n")) << log;
      for (int rank = 0; rank < 4; ++rank) {
        if (contains(log, "hello from rank " + std::to_string(rank) + " of 4")) ranks.insert(rank);
      }
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
}

// An elastic PyTorchJob without a Master replica: PET_RDZV_BACKEND=c10d and PET_RDZV_ENDPOINT,
// no node rank (torchrun's c10d rendezvous hands them out; so does node 0 here).
TEST(KubeflowPyTorchJob, ElasticPodsWithoutNodeRanksFormOneJob) {
  TempDir dir("ddl_kubeflow_elastic");
  const std::string endpoint =
      "127.0.0.1:" + std::to_string(ddl::testing::free_port_block_above_ephemeral());
  std::vector<std::map<std::string, std::string>> envs;
  for (int pod = 0; pod < 2; ++pod) {
    envs.push_back(plain_env({{"PET_RDZV_BACKEND", "c10d"},
                              {"PET_RDZV_ENDPOINT", endpoint},
                              {"PET_RDZV_ID", "mnist"},
                              {"PET_NNODES", "2"},
                              {"PET_NPROC_PER_NODE", "1"},
                              {"PET_MAX_RESTARTS", "1"},
                              {"DDL_JOB_SECRET", "elastic-secret"}}));
  }
  std::vector<std::optional<int>> codes;
  const auto outs = run_launchers(dir, {}, envs, codes);
  // Both pods' output on a failure: which one hosted the store decides what the other saw.
  SCOPED_TRACE("pod 0:\n" + outs[0] + "\npod 1:\n" + outs[1]);
  ASSERT_EQ(codes[0], 0);
  ASSERT_EQ(codes[1], 0);
  // Node ranks are handed out in arrival order: rank R's log is in whichever pod got it.
  for (int rank = 0; rank < 2; ++rank) {
    std::string log;
    for (int pod = 0; pod < 2; ++pod) {
      const auto path = dir.path() / ("pod" + std::to_string(pod)) / "logs" /
                        ("workerlog." + std::to_string(rank));
      if (std::filesystem::exists(path)) log += read_file(path);
    }
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(rank) + " of 2")) << log;
  }
}

}  // namespace
