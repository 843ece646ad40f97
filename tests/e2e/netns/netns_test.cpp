// Two-node training where each node is its own network namespace (tests/support/netns.h), over
// the TCP control plane, with real network faults: random packet loss (nftables), a slow link
// (tc tbf) and a partition (the link down); and the pre-flight check naming a throttled link. Needs
// root; without it the lab cannot be built and the tests fail saying why.
#include "tests/support/netns.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "env/exit_codes.h"
#include "tests/e2e/faults/train_job.h"
#include "tests/support/etcd_cluster.h"

namespace {

using namespace ddl::launch_test;
using ddl::testing::NetnsLab;
using nlohmann::json;

constexpr int kNodes = 2;
constexpr milliseconds kJobTimeout{240'000};
// The launcher's defaults and this test's flag: a node is declared lost after 4 s without a
// heartbeat, and a stopping worker group gets --kill_timeout=5 s before SIGKILL.
constexpr milliseconds kHeartbeatTimeout{4'000};
constexpr milliseconds kKillTimeout{5'000};
constexpr milliseconds kSlack{30'000};

// A short deterministic run: fixed seed, one thread, no checkpoint.
std::vector<std::string> train_args(int max_steps) {
  return {kTrain,     "--data_dir", kData,    "--max_steps", std::to_string(max_steps),
          "--epochs", "1",          "--seed", "7",           "--log_interval",
          "5",        "--save",     "",       "--threads",   "1"};
}

// torchrun's spelling, node 0's lab address as the master.
std::vector<std::string> node_flags(const NetnsLab& lab, int node, int port, const fs::path& logs) {
  return {"--nnodes=" + std::to_string(kNodes),
          "--node_rank=" + std::to_string(node),
          "--master_addr=" + lab.node_address(0),
          "--master_port=" + std::to_string(port),
          "--nproc_per_node=1",
          "--log_dir",
          logs.string(),
          "--log_level=debug",
          "--print_config=false",
          "--rendezvous_timeout=60",
          "--kill_timeout=5"};
}

const ddl::env::EnvMap kJobEnv{{ddl::env::kJobSecret, "netns-test-secret"}};

// Any port: each node has its own namespace, so nothing else in the lab holds it.
constexpr int kPort = 29500;

std::string first_line_with(const std::string& text, const std::string& part) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (contains(line, part)) return line;
  }
  return "(no line with '" + part + "')";
}

struct NodeRun {
  TempDir dir;
  fs::path logs = dir.path() / "logs";
  std::optional<LaunchRun> launch;
};

// Starts launch on every node of `lab`, waits for both, returns rank 0's summary; every rank's
// summary must agree on the parameters. `dropped` (if given) gets the packets the lab's random
// drops took from the job. `preflight`: the --preflight mode (auto: the check runs, the nodes
// have addresses of their own).
json two_node_training(NetnsLab& lab, int max_steps, long* dropped = nullptr,
                       const std::string& preflight = "auto") {
  NodeRun nodes[kNodes];
  for (int k = 0; k < kNodes; ++k) {
    nodes[k].launch.emplace(
        nodes[k].dir,
        concat(concat(node_flags(lab, k, kPort, nodes[k].logs), {"--preflight=" + preflight}),
               train_args(max_steps)),
        kJobEnv, lab.exec_prefix(k));
  }
  for (int k = 0; k < kNodes; ++k) {
    EXPECT_EQ(nodes[k].launch->wait(kJobTimeout), 0) << "node " << k << ":\n"
                                                     << nodes[k].launch->err();
  }
  const json s0 = summary_of(nodes[0].logs, 0);
  EXPECT_TRUE(s0.is_object()) << worker_log(nodes[0].logs, 0);
  const json s1 = summary_of(nodes[1].logs, 1);
  EXPECT_EQ(s1.value("param_checksum", ""), s0.value("param_checksum", "x"))
      << worker_log(nodes[1].logs, 1);
  for (int k = 0; k < kNodes; ++k) {
    EXPECT_TRUE(lab.pids_in(k).empty())
        << lab.pids_in(k).size() << " process(es) left on node " << k;
    if (dropped) *dropped += lab.dropped_packets(k);
  }
  return s0;
}

TEST(NetnsTraining, CleanVersusFaultyNetwork) {
  json clean, faulty;
  long dropped = 0;
  {
    NetnsLab lab(kNodes);
    clean = two_node_training(lab, 20);
  }
  ASSERT_TRUE(clean.is_object());
  {
    NetnsLab lab(kNodes);
    lab.drop_random(0, 1);
    lab.drop_random(1, 1);
    lab.limit(1, "20mbit", "50ms");
    // Training through the faults is the point here: the pre-flight check would name node 1's
    // throttled link and stop the job before it started (NetnsPreflight tests that).
    faulty = two_node_training(lab, 20, &dropped, "off");
  }
  // The faults were real: the job's traffic lost packets and still got through.
  EXPECT_GT(dropped, 0);
  std::cout << "packets dropped during the faulty run: " << dropped << "\n";
  ASSERT_TRUE(faulty.is_object());
  EXPECT_EQ(clean["world"], 2);
  EXPECT_EQ(faulty["world"], 2);
  EXPECT_EQ(faulty["global_step"], clean["global_step"]);
  EXPECT_EQ(faulty["param_checksum"], clean["param_checksum"]);
  EXPECT_EQ(faulty["param_sum"], clean["param_sum"]);
}

TEST(NetnsTraining, PartitionedNodeIsDetected) {
  NetnsLab lab(kNodes);
  NodeRun nodes[kNodes];
  for (int k = 0; k < kNodes; ++k) {
    nodes[k].launch.emplace(nodes[k].dir,
                            concat(node_flags(lab, k, kPort, nodes[k].logs), train_args(100'000)),
                            kJobEnv, lab.exec_prefix(k));
  }
  // Training is under way on node 1 (its rank printed a step), then its link goes down.
  ASSERT_TRUE(
      wait_until([&] { return contains(worker_log(nodes[1].logs, 1), "batch: 10,"); }, kJobTimeout))
      << nodes[0].launch->err() << nodes[1].launch->err() << worker_log(nodes[1].logs, 1);
  lab.partition(1);
  const auto cut = Clock::now();
  const auto bound = kHeartbeatTimeout + kKillTimeout + kSlack;

  const std::optional<int> code0 = nodes[0].launch->wait(bound);
  ASSERT_TRUE(code0.has_value()) << "node 0's launcher still runs " << bound.count()
                                 << " ms after the partition:\n"
                                 << nodes[0].launch->err();
  const auto took0 = std::chrono::duration_cast<milliseconds>(Clock::now() - cut);
  EXPECT_NE(*code0, 0) << nodes[0].launch->err();
  EXPECT_TRUE(contains(nodes[0].launch->err(), "node 1's launcher stopped answering"))
      << nodes[0].launch->err();

  const std::optional<int> code1 = nodes[1].launch->wait(bound);
  ASSERT_TRUE(code1.has_value()) << "node 1's launcher still runs " << bound.count()
                                 << " ms after the partition:\n"
                                 << nodes[1].launch->err();
  const auto took1 = std::chrono::duration_cast<milliseconds>(Clock::now() - cut);
  std::cout << "after the partition: node 0's launcher exited " << *code0 << " within "
            << took0.count() << " ms, node 1's exited " << *code1 << " within " << took1.count()
            << " ms\n"
            << "node 0: " << first_line_with(nodes[0].launch->err(), "stopped answering") << "\n"
            << "node 1: " << first_line_with(nodes[1].launch->err(), "lost the job: ") << "\n";
  EXPECT_NE(*code1, 0) << nodes[1].launch->err();
  EXPECT_TRUE(contains(nodes[1].launch->err(), "lost the job: ")) << nodes[1].launch->err();

  // Nothing of the job is left in either namespace (workers included).
  for (int k = 0; k < kNodes; ++k) {
    EXPECT_TRUE(wait_until([&] { return lab.pids_in(k).empty(); }, milliseconds(5000)))
        << lab.pids_in(k).size() << " process(es) left on node " << k;
  }
}

// The etcd control plane with every node its own host: a 3-member etcd cluster in the hub
// namespace, an elastic 2:3 job on three node namespaces; node 2's link goes down mid-training.
// Nodes 0 and 1 take it for lost when its lease expires and finish the job from the checkpoint as
// generation 1; node 2's launcher cannot reach etcd, says it lost the job and exits non-zero;
// nothing is left running in any namespace.
TEST(NetnsTraining, EtcdPlaneRecoversFromAPartitionedNode) {
  NetnsLab lab(3);
  ddl::testing::EtcdCluster etcd(3, lab.hub_address(), lab.hub_exec_prefix());
  TempDir shared;
  const std::string save = (shared.path() / "ck").string();
  NodeRun nodes[3];
  for (int k = 0; k < 3; ++k) {
    std::vector<std::string> args = {"--rdzv_backend=etcd", "--rdzv_endpoint=" + etcd.endpoints_text(),
                                     "--rdzv_id=netns-partition", "--nnodes=2:3",
                                     "--node_rank=" + std::to_string(k), "--nproc_per_node=1",
                                     "--max_restarts=2", "--rdzv_conf=last_call_timeout=3",
                                     "--log_dir", nodes[k].logs.string(), "--log_level=debug",
                                     "--print_config=false", "--rendezvous_timeout=60",
                                     "--kill_timeout=5"};
    args = concat(args, {kTrain, "--data_dir", kData, "--max_steps", "80", "--epochs", "1",
                         "--seed", "7", "--log_interval", "5", "--save", save, "--save_every",
                         "10", "--threads", "1"});
    nodes[k].launch.emplace(nodes[k].dir, args, kJobEnv, lab.exec_prefix(k));
  }
  ASSERT_TRUE(
      wait_until([&] { return contains(worker_log(nodes[2].logs, 2), "batch: 15,"); }, kJobTimeout))
      << nodes[0].launch->err() << nodes[2].launch->err();
  lab.partition(2);
  const auto bound = kHeartbeatTimeout + kKillTimeout + kSlack;
  const std::optional<int> code2 = nodes[2].launch->wait(bound);
  ASSERT_TRUE(code2.has_value()) << "node 2's launcher still runs after the partition:\n"
                                 << nodes[2].launch->err();
  EXPECT_NE(*code2, 0) << nodes[2].launch->err();
  EXPECT_TRUE(contains(nodes[2].launch->err(), "lost the job: ")) << nodes[2].launch->err();
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(nodes[k].launch->wait(kJobTimeout), 0) << "node " << k << ":\n"
                                                     << nodes[k].launch->err();
  }
  EXPECT_TRUE(contains(nodes[0].launch->err(), "generation 1: nodes 0, 1"))
      << nodes[0].launch->err();
  const json s0 = summary_of(nodes[0].logs, 0);
  ASSERT_TRUE(s0.is_object()) << worker_log(nodes[0].logs, 0);
  EXPECT_EQ(s0["world"], 2);
  EXPECT_EQ(s0["resumed"], true);
  EXPECT_EQ(s0["global_step"], 80);
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(wait_until([&] { return lab.pids_in(k).empty(); }, milliseconds(5000)))
        << lab.pids_in(k).size() << " process(es) left on node " << k;
  }
}

// The pre-flight check (--preflight) finds a throttled link: three node namespaces, node 2's
// outgoing rate limited by tc tbf to 20 Mbit/s. Its links out are the slow ones (the probes send
// 4 MiB each), so node 2 is named and the fixed job stops before any worker starts, on every
// node, with the same line; nothing is left in any namespace.
// Starts hello_worker on three node namespaces with --preflight=`mode` (auto: on, the nodes have
// addresses of their own).
void start_checked(NetnsLab& lab, NodeRun (&nodes)[3], const std::string& mode) {
  const std::string hello = kBin + "/hello_worker";
  for (int k = 0; k < 3; ++k) {
    nodes[k].launch.emplace(
        nodes[k].dir,
        std::vector<std::string>{"--nnodes=3", "--node_rank=" + std::to_string(k),
                                 "--master_addr=" + lab.node_address(0),
                                 "--master_port=" + std::to_string(kPort), "--nproc_per_node=1",
                                 "--preflight=" + mode, "--log_dir", nodes[k].logs.string(),
                                 "--print_config=false", "--rendezvous_timeout=60", hello},
        kJobEnv, lab.exec_prefix(k));
  }
}

TEST(NetnsPreflight, EqualNodesPass) {
  NetnsLab lab(3);
  NodeRun nodes[3];
  start_checked(lab, nodes, "auto");
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(nodes[k].launch->wait(kJobTimeout), 0) << nodes[k].launch->err();
    EXPECT_TRUE(contains(nodes[k].launch->err(), "best link out median")) << nodes[k].launch->err();
  }
  std::cout << "node 0: " << first_line_with(nodes[0].launch->err(), "pre-flight check of") << "\n";
}

TEST(NetnsPreflight, AThrottledLinkIsNamed) {
  NetnsLab lab(3);
  lab.limit(2, "20mbit", "50ms");
  NodeRun nodes[3];
  start_checked(lab, nodes, "on");
  for (int k = 0; k < 3; ++k) {
    const std::optional<int> code = nodes[k].launch->wait(kJobTimeout);
    ASSERT_TRUE(code.has_value()) << nodes[k].launch->err();
    EXPECT_EQ(*code, ddl::kExitUsage) << nodes[k].launch->err();
    const std::string err = nodes[k].launch->err();
    EXPECT_TRUE(contains(err,
                         "the pre-flight check of generation 0 named node 2: its best link "
                         "out runs at"))
        << "node " << k << ":\n"
        << err;
    EXPECT_FALSE(contains(err, "named node 0")) << err;
    EXPECT_FALSE(contains(err, "starting 1 worker(s)")) << err;
  }
  std::cout << "node 0: " << first_line_with(nodes[0].launch->err(), "pre-flight check of") << "\n";
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(wait_until([&] { return lab.pids_in(k).empty(); }, milliseconds(5000)))
        << lab.pids_in(k).size() << " process(es) left on node " << k;
  }
}

// The lab itself: addresses reachable inside it, faults applied and undone, nothing outside.
TEST(NetnsLab, LinksFaultsAndTeardown) {
  std::string hub, node0;
  pid_t left = -1;
  {
    NetnsLab lab(kNodes);
    hub = lab.hub_ns_name();
    node0 = lab.ns_name(0);
    // Reachable = a TCP connection attempt to a closed port is refused (the peer answered);
    // a dropped or cut link times out instead.
    auto reachable = [&](int from, const std::string& to) {
      std::vector<std::string> cmd = lab.exec_prefix(from);
      cmd.insert(cmd.end(), {"timeout", "2", "bash", "-c", "exec 3<>/dev/tcp/" + to + "/9"});
      return contains(ddl::testing::run_command(cmd).output, "Connection refused");
    };
    EXPECT_TRUE(reachable(0, lab.node_address(1)));
    EXPECT_TRUE(reachable(1, lab.hub_address()));
    lab.partition(1);
    EXPECT_FALSE(reachable(0, lab.node_address(1)));
    lab.heal(1);
    EXPECT_TRUE(
        wait_until([&] { return reachable(0, lab.node_address(1)); }, milliseconds(10'000)));
    lab.drop_random(1, 100);
    EXPECT_FALSE(reachable(0, lab.node_address(1)));
    lab.limit(1, "1mbit", "50ms");
    lab.clear_faults(1);
    EXPECT_TRUE(reachable(0, lab.node_address(1)));
    // A process left running in a namespace (an orphan: its shell exited) is the teardown's.
    std::vector<std::string> orphan = lab.exec_prefix(0);
    orphan.insert(orphan.end(), {"sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"});
    const auto r = ddl::testing::run_command(orphan);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    left = std::stoi(r.output);
    ASSERT_TRUE(ddl::testing::alive(left));
    EXPECT_EQ(lab.pids_in(0), std::vector<pid_t>{left});
  }
  EXPECT_TRUE(wait_until([&] { return !ddl::testing::alive(left); }, milliseconds(5000)));
  const std::string list = ddl::testing::must_run({"ip", "netns", "list"});
  EXPECT_FALSE(contains(list, hub)) << list;
  EXPECT_FALSE(contains(list, node0)) << list;
}

}  // namespace
