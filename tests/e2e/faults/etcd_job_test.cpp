// Multi-node jobs whose control plane is a real 3-member etcd cluster (started by the test on
// loopback): `launch` with torchrun's --rdzv_backend=etcd and Paddle's --master=etcd://, nodes on
// 127.0.0.1, .2, .3.
// - two nodes form the job through etcd and leave no key behind;
// - an elastic job of 3 nodes survives SIGKILL of node 0's launcher: nodes 1 and 2 form the next
//   generation and finish from the checkpoint (node 0 hosts nothing any more);
// - SIGKILL of one etcd member in the middle of training does not disturb the job;
// - etcd unreachable at start: one line naming every endpoint tried, within the deadline;
// - Paddle's elastic variables (PADDLE_ELASTIC_SERVER, _JOB_ID, _NP): the nodes register and wait
//   saying so, the workers see the host list, a lost node is replaced or left behind.
#include <signal.h>

#include <nlohmann/json.hpp>

#include "launcher/coord/etcd_client.h"
#include "tests/e2e/faults/train_job.h"
#include "tests/support/etcd_cluster.h"

namespace {

using namespace ddl::launch_test;
using nlohmann::json;

constexpr milliseconds kJobTimeout{300'000};

std::vector<std::string> train_args(int max_steps, const fs::path& save) {
  return {kTrain,     "--data_dir", kData,         "--max_steps",  std::to_string(max_steps),
          "--epochs", "1",          "--seed",      "7",            "--log_interval",
          "5",        "--save",     save.string(), "--save_every", "10",
          "--threads", "1"};
}

std::string node_ip(int node) { return "127.0.0." + std::to_string(node + 1); }

std::vector<std::string> etcd_flags(const ddl::testing::EtcdCluster& etcd, const std::string& id,
                                    int node, const std::string& nnodes, const fs::path& logs) {
  return {"--rdzv_backend=etcd", "--rdzv_endpoint=" + etcd.endpoints_text(),
          "--rdzv_id=" + id, "--nnodes=" + nnodes, "--node_rank=" + std::to_string(node),
          "--node_ip=" + node_ip(node), "--nproc_per_node=2", "--log_dir", logs.string(),
          "--log_level=debug", "--print_config=false", "--rendezvous_timeout=60",
          "--kill_timeout=5"};
}

ddl::env::EnvMap job_env() { return {{ddl::env::kJobSecret, "etcd-job-test-secret"}}; }

std::size_t keys_under(const ddl::testing::EtcdCluster& etcd, const std::string& prefix) {
  ddl::etcd::ClientOptions o;
  o.endpoints = etcd.endpoints();
  ddl::etcd::Client client(o);
  return client.get_prefix(prefix).kvs.size();
}

TEST(EtcdJob, TwoNodesFormTheJobThroughEtcdAndLeaveNoKeys) {
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp0, tmp1;
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  // Paddle 2.x's spelling on one node, torchrun's on the other: the same control plane.
  LaunchRun node0(tmp0,
                  {"--master=etcd://" + etcd.endpoints_text(), "--nnodes=2", "--rank=0",
                   "--job_id=two-nodes", "--node_ip=" + node_ip(0), "--nproc_per_node=2",
                   "--log_dir", logs0.string(), "--print_config=false", "hello_worker"},
                  job_env());
  LaunchRun node1(tmp1,
                  {"--rdzv_backend=etcd-v2", "--rdzv_endpoint=" + etcd.endpoints_text(),
                   "--rdzv_id=two-nodes", "--nnodes=2", "--node_rank=1", "--node_ip=" + node_ip(1),
                   "--nproc_per_node=2", "--log_dir", logs1.string(), "--print_config=false",
                   "hello_worker"},
                  job_env());
  ASSERT_EQ(node0.wait(milliseconds(60'000)), 0) << node0.err() << node1.err();
  ASSERT_EQ(node1.wait(milliseconds(60'000)), 0) << node1.err();
  for (int r = 0; r < 4; ++r) {
    const std::string log = worker_log(r < 2 ? logs0 : logs1, r);
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(r) + " of 4")) << log;
  }
  EXPECT_EQ(keys_under(etcd, "/ddl/"), 0u) << "every key of the job is removed at its end";
}

TEST(EtcdJob, AnElasticJobSurvivesNodeZerosLauncherBeingKilled) {
  SKIP_WITHOUT_DATA();
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp0, tmp1, tmp2, shared;
  const fs::path logs[3] = {tmp0.path() / "logs", tmp1.path() / "logs", tmp2.path() / "logs"};
  const fs::path save = shared.path() / "ck";
  auto args = [&](int node) {
    return concat(concat(etcd_flags(etcd, "survive-node0", node, "2:3", logs[node]),
                         {"--max_restarts=2", "--rdzv_conf=last_call_timeout=5"}),
                  train_args(120, save));
  };
  LaunchRun node0(tmp0, args(0), job_env());
  LaunchRun node1(tmp1, args(1), job_env());
  LaunchRun node2(tmp2, args(2), job_env());
  // Past the first checkpoint (step 10 of the 6-rank world), then node 0's launcher dies.
  ASSERT_TRUE(wait_until([&] { return contains(worker_log(logs[0], 0), "batch: 15,"); },
                         milliseconds(120'000)))
      << node0.err() << node1.err();
  const auto pids0 = node0.worker_pids();
  ::kill(node0.pid(), SIGKILL);
  ASSERT_EQ(node0.wait(milliseconds(5000)), 128 + SIGKILL);
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  ASSERT_EQ(node2.wait(kJobTimeout), 0) << node2.err();
  expect_nothing_left(pids0);

  // Node 0's workers die with its launcher, so the survivors' collectives usually fail first;
  // either way generation 0 fails and generation 1 forms without node 0.
  EXPECT_TRUE(contains(node1.err(), "restarting the job (restart 1 of 2)")) << node1.err();
  EXPECT_TRUE(contains(node1.err(), "generation 1: nodes 1, 2")) << node1.err();
  const json s0 = summary_of(logs[1], 0);
  ASSERT_TRUE(s0.is_object()) << worker_log(logs[1], 0);
  EXPECT_EQ(s0["world"], 4);
  EXPECT_EQ(s0["resumed"], true);
  EXPECT_EQ(s0["global_step"], 120);
  EXPECT_EQ(summary_of(logs[2], 3)["param_checksum"], s0["param_checksum"]);
  EXPECT_EQ(keys_under(etcd, "/ddl/"), 0u);
}

// Paddle's fleet elastic variables, as Paddle's operator gives them to its pods: no node flag,
// the etcd server, a job id, a node count, each pod's POD_IP.
ddl::env::EnvMap paddle_elastic_env(const ddl::testing::EtcdCluster& etcd, const std::string& job,
                                    const std::string& np, int node) {
  ddl::env::EnvMap env = job_env();
  env["PADDLE_ELASTIC_SERVER"] = etcd.endpoints().front().str();
  env["PADDLE_ELASTIC_JOB_ID"] = job;
  env["PADDLE_ELASTIC_NP"] = np;
  env["PADDLE_ELASTIC_TIMEOUT"] = "1";
  env["POD_IP"] = node_ip(node);
  return env;
}

std::vector<std::string> paddle_elastic_args(const fs::path& logs, int sleep_ms) {
  return {"--nproc_per_node=1", "--log_dir",       logs.string(), "--print_config=false",
          "--kill_timeout=5",   "hello_worker",    "--sleep_ms",  std::to_string(sleep_ms),
          "--show_env",         "PADDLE_TRAINERS", "--show_env",  "DISTRIBUTED_TRAINER_ENDPOINTS"};
}

// Every worker log in `logs` (the fleet launcher names them by global rank), read together.
std::string worker_logs(const fs::path& logs) {
  std::string all;
  if (!fs::exists(logs)) return all;
  for (const auto& entry : fs::directory_iterator(logs)) {
    if (entry.path().filename().string().rfind("workerlog.", 0) == 0) {
      all += read_file(entry.path());
    }
  }
  return all;
}

// A node count N: the first node waits, saying so as Paddle's elastic manager does, until the
// second registers; the workers see the host list and every endpoint as Paddle exports them.
TEST(PaddleElastic, NodesRegisterThroughEtcdAndTheWorkersSeeTheHostList) {
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp0, tmp1;
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  LaunchRun node0(tmp0, paddle_elastic_args(logs0, 0),
                  paddle_elastic_env(etcd, "paddle-ft", "2", 0));
  ASSERT_TRUE(wait_until([&] { return contains(node0.err(), "not ready for np 2 with hosts ['"); },
                         milliseconds(30'000)))
      << node0.err();
  std::this_thread::sleep_for(milliseconds(2500));  // a second line, 2 s later
  LaunchRun node1(tmp1, paddle_elastic_args(logs1, 0),
                  paddle_elastic_env(etcd, "paddle-ft", "2", 1));
  ASSERT_EQ(node0.wait(milliseconds(60'000)), 0) << node0.err() << node1.err();
  ASSERT_EQ(node1.wait(milliseconds(60'000)), 0) << node1.err();
  const std::string err0 = node0.err();
  EXPECT_TRUE(contains(err0, "start job with np=2, ElasticLevel.FAULT_TOLERANCE")) << err0;
  EXPECT_TRUE(contains(err0, "not ready for np 2 with hosts ['127.0.0.1:")) << err0;
  std::size_t waits = 0;
  for (std::size_t at = err0.find("not ready for np 2"); at != std::string::npos;
       at = err0.find("not ready for np 2", at + 1)) {
    ++waits;
  }
  EXPECT_GE(waits, 2u) << "every 2 s while it waits: " << err0;
  EXPECT_TRUE(contains(err0, "ready with hosts ['127.0.0.1:")) << err0;
  EXPECT_TRUE(contains(err0, "', '127.0.0.2:")) << err0;
  const std::string logs = worker_logs(logs0) + worker_logs(logs1);
  EXPECT_TRUE(contains(logs, "ENV PADDLE_TRAINERS=127.0.0.1,127.0.0.2\n")) << logs;
  EXPECT_TRUE(contains(logs, "ENV DISTRIBUTED_TRAINER_ENDPOINTS=127.0.0.1:")) << logs;
  EXPECT_TRUE(contains(logs, "hello from rank 1 of 2")) << logs;
  EXPECT_EQ(keys_under(etcd, "/ddl/"), 0u);
}

// MIN:MAX: a node of three is lost; the other two restart their workers with the new host list
// and endpoints, as Paddle's elastic manager does when a host leaves.
TEST(PaddleElastic, ALostNodeRestartsTheOthersWithTheNewHostList) {
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp[3];
  fs::path logs[3];
  std::vector<std::unique_ptr<LaunchRun>> nodes;
  for (int n = 0; n < 3; ++n) {
    logs[n] = tmp[n].path() / "logs";
    nodes.push_back(std::make_unique<LaunchRun>(tmp[n], paddle_elastic_args(logs[n], 8000),
                                                paddle_elastic_env(etcd, "paddle-el", "2:3", n)));
  }
  ASSERT_TRUE(wait_until(
      [&] {
        return contains(worker_logs(logs[0]) + worker_logs(logs[1]) + worker_logs(logs[2]),
                        "hello from rank 2 of 3");
      },
      milliseconds(60'000)))
      << nodes[0]->err() << nodes[1]->err() << nodes[2]->err();
  const std::string first = nodes[0]->err();
  EXPECT_TRUE(contains(first, "start job with np=2:3, ElasticLevel.ELASTIC")) << first;
  // The node that came last is lost (its workers die with it).
  int last = 0;
  for (int n = 0; n < 3; ++n) {
    if (contains(worker_logs(logs[n]), "hello from rank 2 of 3")) last = n;
  }
  ::kill(nodes[last]->pid(), SIGKILL);
  ASSERT_EQ(nodes[last]->wait(milliseconds(5000)), 128 + SIGKILL);
  std::vector<std::string> ips;
  for (int n = 0; n < 3; ++n) {
    if (n == last) continue;
    ASSERT_EQ(nodes[n]->wait(milliseconds(90'000)), 0) << nodes[n]->err();
    ips.push_back(node_ip(n));
  }
  std::string survivors;
  for (int n = 0; n < 3; ++n) {
    if (n != last) survivors += worker_logs(logs[n]);
  }
  // The workers were started again with two hosts.
  EXPECT_TRUE(contains(survivors, "hello from rank 1 of 2")) << survivors;
  // In the order of the survivors' node ranks, which follow their arrival.
  EXPECT_TRUE(contains(survivors, "ENV PADDLE_TRAINERS=" + ips[0] + "," + ips[1] + "\n") ||
              contains(survivors, "ENV PADDLE_TRAINERS=" + ips[1] + "," + ips[0] + "\n"))
      << survivors;
  const int witness = last == 0 ? 1 : 0;
  const std::string err = nodes[witness]->err();
  EXPECT_TRUE(contains(err, "restarting the job (restart 1 of 3)")) << err;
  std::size_t ready = 0;
  for (std::size_t at = err.find("ready with hosts"); at != std::string::npos;
       at = err.find("ready with hosts", at + 1)) {
    if (at < 4 || err.compare(at - 4, 4, "not ") != 0) ++ready;
  }
  EXPECT_EQ(ready, 2u) << "three hosts, then two: " << err;
  EXPECT_EQ(keys_under(etcd, "/ddl/"), 0u);
}

// MIN:MAX: a third host arrives while two run; the job re-forms with three, the workers start
// again with the longer host list, as Paddle's manager restarts them when a host registers.
TEST(PaddleElastic, ANewHostJoinsARunningElasticJob) {
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp[3];
  fs::path logs[3];
  for (int n = 0; n < 3; ++n) logs[n] = tmp[n].path() / "logs";
  LaunchRun node0(tmp[0], paddle_elastic_args(logs[0], 6000),
                  paddle_elastic_env(etcd, "paddle-grow", "2:3", 0));
  ASSERT_TRUE(
      wait_until([&] { return contains(node0.err(), "not ready for np 3"); }, milliseconds(30'000)))
      << node0.err();
  LaunchRun node1(tmp[1], paddle_elastic_args(logs[1], 6000),
                  paddle_elastic_env(etcd, "paddle-grow", "2:3", 1));
  ASSERT_TRUE(wait_until([&] { return contains(worker_logs(logs[1]), "hello from rank 1 of 2"); },
                         milliseconds(60'000)))
      << node0.err() << node1.err();
  LaunchRun node2(tmp[2], paddle_elastic_args(logs[2], 0),
                  paddle_elastic_env(etcd, "paddle-grow", "2:3", 2));
  ASSERT_EQ(node0.wait(milliseconds(90'000)), 0) << node0.err();
  ASSERT_EQ(node1.wait(milliseconds(30'000)), 0) << node1.err();
  ASSERT_EQ(node2.wait(milliseconds(30'000)), 0) << node2.err();
  const std::string err = node0.err();
  EXPECT_TRUE(contains(err, "ready with hosts ['127.0.0.1:")) << err;
  EXPECT_TRUE(contains(err, "', '127.0.0.3:")) << "the second start has three hosts: " << err;
  const std::string logs_all = worker_logs(logs[0]) + worker_logs(logs[1]) + worker_logs(logs[2]);
  EXPECT_TRUE(contains(logs_all, "hello from rank 2 of 3")) << logs_all;
  EXPECT_TRUE(contains(logs_all, "ENV PADDLE_TRAINERS=127.0.0.1,127.0.0.2,127.0.0.3\n"))
      << logs_all;
  EXPECT_EQ(keys_under(etcd, "/ddl/"), 0u);
}

// A node count N (Paddle's fault tolerance): a lost node is waited for, as Paddle's manager holds
// until its platform starts the pod again; a new launcher on another host takes its place and the
// workers start again with the new host list.
TEST(PaddleElastic, ALostNodeOfAFixedCountIsReplacedByANewHost) {
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp[3];
  fs::path logs[3];
  for (int n = 0; n < 3; ++n) logs[n] = tmp[n].path() / "logs";
  LaunchRun node0(tmp[0], paddle_elastic_args(logs[0], 6000),
                  paddle_elastic_env(etcd, "paddle-replace", "2", 0));
  // Node ranks follow the order of arrival: node 0 first.
  ASSERT_TRUE(
      wait_until([&] { return contains(node0.err(), "not ready for np 2"); }, milliseconds(30'000)))
      << node0.err();
  auto node1 = std::make_unique<LaunchRun>(tmp[1], paddle_elastic_args(logs[1], 6000),
                                           paddle_elastic_env(etcd, "paddle-replace", "2", 1));
  ASSERT_TRUE(wait_until([&] { return contains(worker_logs(logs[1]), "hello from rank 1 of 2"); },
                         milliseconds(60'000)))
      << node0.err() << node1->err();
  ::kill(node1->pid(), SIGKILL);
  ASSERT_EQ(node1->wait(milliseconds(5000)), 128 + SIGKILL);
  // Node 0 holds, saying it waits, until the new host comes.
  ASSERT_TRUE(
      wait_until([&] { return contains(node0.err(), "restarting the job (restart 1 of 3)"); },
                 milliseconds(30'000)))
      << node0.err();
  std::this_thread::sleep_for(milliseconds(2500));
  LaunchRun node2(tmp[2], paddle_elastic_args(logs[2], 0),
                  paddle_elastic_env(etcd, "paddle-replace", "2", 2));
  ASSERT_EQ(node0.wait(milliseconds(90'000)), 0) << node0.err() << node2.err();
  ASSERT_EQ(node2.wait(milliseconds(30'000)), 0) << node2.err();
  const std::string err = node0.err();
  EXPECT_TRUE(contains(err, "node 1's launcher stopped answering")) << err;
  const std::size_t restart = err.find("restarting the job (restart 1 of 3)");
  EXPECT_NE(err.find("not ready for np 2 with hosts", restart), std::string::npos) << err;
  EXPECT_TRUE(contains(err, "', '127.0.0.3:")) << err;
  const std::string survivors = worker_logs(logs[0]) + worker_logs(logs[2]);
  EXPECT_TRUE(contains(survivors, "ENV PADDLE_TRAINERS=127.0.0.1,127.0.0.3\n")) << survivors;
  EXPECT_EQ(keys_under(etcd, "/ddl/"), 0u);
}

TEST(EtcdJob, KillingOneEtcdMemberDoesNotDisturbTheJob) {
  SKIP_WITHOUT_DATA();
  ddl::testing::EtcdCluster etcd(3);
  TempDir tmp0, tmp1, shared;
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const fs::path save = shared.path() / "ck";
  LaunchRun node0(tmp0, concat(etcd_flags(etcd, "member-dies", 0, "2", logs0), train_args(60, save)),
                  job_env());
  LaunchRun node1(tmp1, concat(etcd_flags(etcd, "member-dies", 1, "2", logs1), train_args(60, save)),
                  job_env());
  ASSERT_TRUE(wait_until([&] { return contains(worker_log(logs0, 0), "batch: 10,"); },
                         milliseconds(120'000)))
      << node0.err() << node1.err();
  etcd.kill(0);  // the first endpoint: the one every launcher talks to
  ASSERT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  EXPECT_FALSE(contains(node0.err() + node1.err(), "generation 0 failed")) << node0.err();
  const json s0 = summary_of(logs0, 0);
  ASSERT_TRUE(s0.is_object());
  EXPECT_EQ(s0["resumed"], false) << "no restart";
  EXPECT_EQ(s0["global_step"], 60);
}

TEST(EtcdJob, UnreachableEtcdIsOneLineNamingEveryEndpoint) {
  TempDir tmp;
  std::string endpoints;
  for (int i = 0; i < 3; ++i) {
    endpoints += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(free_loopback_port());
  }
  LaunchRun node(tmp,
                 {"--rdzv_backend=etcd", "--rdzv_endpoint=" + endpoints, "--nnodes=2",
                  "--rendezvous_timeout=3", "--nproc_per_node=1", "--print_config=false",
                  "hello_worker"},
                 job_env());
  ASSERT_EQ(node.wait(milliseconds(20'000)), 2) << node.err();
  EXPECT_LT(node.elapsed(), milliseconds(12'000));
  const std::string err = node.err();
  std::size_t lines = 0;
  std::string error_line;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (contains(line, "no etcd member answered")) {
      ++lines;
      error_line = line;
    }
  }
  EXPECT_EQ(lines, 1u) << err;
  std::istringstream list(endpoints);
  for (std::string ep; std::getline(list, ep, ',');) {
    EXPECT_TRUE(contains(error_line, ep)) << error_line;
  }
}

// `launch` loads its etcd store as a module (launcher/CMakeLists.txt): a copy of launch without
// it refuses an etcd job in one line naming the module and where it looked, and exits non-zero.
TEST(EtcdJob, AMissingEtcdModuleIsOneLineNamingIt) {
  TempDir tmp;
  const fs::path alone = tmp.path() / "alone";
  fs::create_directories(alone);
  fs::copy_file(kLaunch, alone / "launch");
  // The wrapper drops the launch it is given and runs the copy with the same arguments.
  const std::vector<std::string> copy = {
      "/bin/sh", "-c", "shift; exec \"" + (alone / "launch").string() + "\" \"$@\"", "sh"};
  LaunchRun node(
      tmp,
      {"--rdzv_backend=etcd", "--rdzv_endpoint=127.0.0.1:" + std::to_string(free_loopback_port()),
       "--nnodes=2", "--rendezvous_timeout=3", "--print_config=false", kHello},
      job_env(), copy);
  const std::optional<int> code = node.wait(milliseconds(20'000));
  ASSERT_TRUE(code) << node.err();
  EXPECT_NE(*code, 0);
  const std::string err = node.err();
  EXPECT_EQ(count(err, "ddl_etcd_store.so, which could not be loaded"), 1) << err;
  EXPECT_TRUE(contains(err, (alone / "ddl_etcd_store.so").string())) << err;
}

}  // namespace
