// The pre-flight check (--preflight, launcher/preflight/) end to end, with real slowness: three
// launchers on loopback, one of them in a CPU cgroup that gives it a tenth of a core. Equal nodes
// pass; a fixed job stops naming the slow node before any worker starts; an elastic job goes on
// without it. The probes themselves are tested first, alone. (A throttled link, tc tbf between
// network namespaces, is in tests/e2e/netns/.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/preflight/check.h"
#include "launcher/preflight/probes.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;
using namespace ddl::launcher::preflight;
using nlohmann::json;
using std::chrono::milliseconds;

// --- the probes ------------------------------------------------------------------------------

TEST(PreflightProbes, AMatmulHasARate) { EXPECT_GT(measure_matmul(milliseconds(50)), 0.1); }

TEST(PreflightProbes, ALinkToAServerIsMeasured) {
  LinkServer server("127.0.0.1", "t0ken");
  const LinkCheck c =
      probe_link(1, "127.0.0.1", server.port(), "t0ken", milliseconds(50), milliseconds(5000));
  ASSERT_TRUE(c.megabytes_per_s) << c.error;
  EXPECT_GT(*c.megabytes_per_s, 1);
  EXPECT_GT(c.round_trip_ms, 0);
  EXPECT_EQ(c.peer, 1);
}

TEST(PreflightProbes, AWrongTokenOrNoServerIsAFailedLinkSayingWhy) {
  LinkServer server("127.0.0.1", "t0ken");
  const LinkCheck wrong =
      probe_link(1, "127.0.0.1", server.port(), "other", milliseconds(50), milliseconds(2000));
  EXPECT_FALSE(wrong.megabytes_per_s);
  EXPECT_TRUE(contains(wrong.error, "did not answer the probe")) << wrong.error;
  const int port = free_loopback_port();
  const LinkCheck none = probe_link(1, "127.0.0.1", static_cast<std::uint16_t>(port), "t0ken",
                                    milliseconds(50), milliseconds(2000));
  EXPECT_FALSE(none.megabytes_per_s);
  EXPECT_TRUE(contains(none.error, "cannot connect to 127.0.0.1:" + std::to_string(port)))
      << none.error;
}

// --- jobs ----------------------------------------------------------------------------------

const ddl::env::EnvMap kJobEnv{{ddl::env::kJobSecret, "preflight-test-secret"}};
constexpr int kNodes = 3;
constexpr milliseconds kJobTimeout{120'000};

struct Node {
  TempDir dir;
  fs::path logs = dir.path() / "logs";
  std::optional<LaunchRun> run;
};

std::vector<std::string> node_flags(int node, int port, const fs::path& logs,
                                    const std::string& nnodes, const std::vector<std::string>& more,
                                    const std::string& mode) {
  std::vector<std::string> flags = {"--nnodes=" + nnodes,
                                    "--node_rank=" + std::to_string(node),
                                    "--master_addr=127.0.0.1",
                                    "--master_port=" + std::to_string(port),
                                    "--nproc_per_node=1",
                                    "--preflight=" + mode,
                                    "--log_dir",
                                    logs.string(),
                                    "--print_config=false",
                                    "--rendezvous_timeout=60"};
  flags.insert(flags.end(), more.begin(), more.end());
  flags.push_back(kHello);
  return flags;
}

// Starts the three nodes, node 2 under `quota` when given.
void start(Node (&nodes)[kNodes], const std::string& nnodes, const CpuQuota* quota,
           const std::vector<std::string>& more = {}, const std::string& mode = "on") {
  const int port = free_loopback_port();
  for (int k = 0; k < kNodes; ++k) {
    nodes[k].run.emplace(nodes[k].dir, node_flags(k, port, nodes[k].logs, nnodes, more, mode),
                         kJobEnv, k == 2 && quota ? quota->prefix() : std::vector<std::string>{});
  }
}

json report_of(const fs::path& logs) { return json::parse(read_file(logs / "report.json")); }

TEST(Preflight, EqualNodesPassAndTheReportHasTheirNumbers) {
  Node nodes[kNodes];
  start(nodes, "3", nullptr);
  for (int k = 0; k < kNodes; ++k) {
    ASSERT_EQ(nodes[k].run->wait(kJobTimeout), 0) << "node " << k << ":\n" << nodes[k].run->err();
    EXPECT_TRUE(contains(nodes[k].run->err(), "pre-flight check of generation 0 (3 nodes, "))
        << nodes[k].run->err();
  }
  const json checks = report_of(nodes[0].logs)["preflight"];
  ASSERT_EQ(checks.size(), 1u) << checks.dump();
  EXPECT_EQ(checks[0]["outcome"], "passed");
  ASSERT_EQ(checks[0]["nodes"].size(), 3u);
  for (const json& n : checks[0]["nodes"]) {
    EXPECT_GT(n["gflops"].get<double>(), 0) << n.dump();
    // One machine: no link between the nodes to measure (tests/e2e/netns measures real ones).
    EXPECT_TRUE(n["best_out_mbs"].is_null()) << n.dump();
    EXPECT_TRUE(n["best_in_mbs"].is_null()) << n.dump();
    EXPECT_EQ(n["named"], "");
  }
  EXPECT_TRUE(contains(read_file(nodes[0].logs / "report.html"), "Pre-flight checks"));
}

// --preflight=auto (the default) checks nodes on several machines only: these three share one,
// so even the throttled one is not measured and the job runs.
TEST(Preflight, AutoLeavesNodesSharingAMachineUnchecked) {
  EXPECT_FALSE(spans_machines({"127.0.0.1", "127.0.0.2", "localhost"}));
  EXPECT_FALSE(spans_machines({"10.0.0.1", "10.0.0.1"}));
  EXPECT_TRUE(spans_machines({"10.0.0.1", "10.0.0.2"}));
  EXPECT_TRUE(spans_machines({"127.0.0.1", "10.0.0.2"}));
  CpuQuota quota(10);
  Node nodes[kNodes];
  start(nodes, "3", &quota, {}, "auto");
  for (int k = 0; k < kNodes; ++k) {
    ASSERT_EQ(nodes[k].run->wait(kJobTimeout), 0) << "node " << k << ":\n" << nodes[k].run->err();
    EXPECT_FALSE(contains(nodes[k].run->err(), "pre-flight check of")) << nodes[k].run->err();
  }
  EXPECT_TRUE(report_of(nodes[0].logs)["preflight"].empty());
}

TEST(Preflight, AThrottledNodeStopsAFixedJobBeforeAnyWorkerStarts) {
  CpuQuota quota(10);
  Node nodes[kNodes];
  start(nodes, "3", &quota);
  for (int k = 0; k < kNodes; ++k) {
    const std::optional<int> code = nodes[k].run->wait(kJobTimeout);
    ASSERT_TRUE(code) << "node " << k << " still runs:\n" << nodes[k].run->err();
    EXPECT_EQ(*code, ddl::kExitUsage) << "the job cannot form:\n" << nodes[k].run->err();
    const std::string err = nodes[k].run->err();
    EXPECT_TRUE(
        contains(err, "the pre-flight check of generation 0 named node 2: its matmul runs at"))
        << "node " << k << ":\n"
        << err;
    EXPECT_TRUE(contains(err, "a job with a fixed --nnodes cannot go on without it")) << err;
    EXPECT_FALSE(contains(err, "starting 1 worker(s)")) << err;
  }
}

TEST(Preflight, AnElasticJobGoesOnWithoutAThrottledNode) {
  CpuQuota quota(10);
  Node nodes[kNodes];
  start(nodes, "2:3", &quota, {"--max_restarts=1"});
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(nodes[k].run->wait(kJobTimeout), 0) << "node " << k << ":\n" << nodes[k].run->err();
    const std::string err = nodes[k].run->err();
    EXPECT_TRUE(contains(err, "named node 2: its matmul runs at")) << err;
    EXPECT_TRUE(contains(err, "the job goes on without it in the next generation")) << err;
    EXPECT_TRUE(contains(err, "pre-flight check of generation 1 (2 nodes, ")) << err;
    // Generation 1 ran on the two healthy nodes.
    EXPECT_TRUE(
        contains(worker_log(nodes[k].logs, k), "hello from rank " + std::to_string(k) + " of 2"))
        << worker_log(nodes[k].logs, k);
    // It did not wait out the last call (30 s) for the node that left.
    EXPECT_LT(nodes[k].run->elapsed(), milliseconds(20'000));
  }
  const std::optional<int> code = nodes[2].run->wait(kJobTimeout);
  ASSERT_TRUE(code) << nodes[2].run->err();
  EXPECT_EQ(*code, ddl::kExitUsage) << nodes[2].run->err();
  EXPECT_TRUE(contains(nodes[2].run->err(), "named this node (node 2): its matmul runs at"))
      << nodes[2].run->err();
  const json checks = report_of(nodes[0].logs)["preflight"];
  ASSERT_EQ(checks.size(), 2u) << checks.dump();
  EXPECT_EQ(checks[0]["nodes"][2]["named"].get<std::string>().rfind("its matmul runs at", 0), 0u)
      << checks.dump();
  EXPECT_EQ(checks[1]["outcome"], "passed");
  EXPECT_EQ(checks[1]["nodes"].size(), 2u);
}

}  // namespace
