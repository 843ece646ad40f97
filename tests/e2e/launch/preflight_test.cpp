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

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

// A CPU cgroup giving its processes `percent` of one core: cgroup v1's cpu controller
// (cpu.cfs_quota_us) or v2's cpu.max. Processes enter it through prefix(); the destructor kills
// what is left in it and removes it.
class CpuQuota {
 public:
  explicit CpuQuota(int percent) {
    const std::string name = "ddl-preflight-" + std::to_string(::getpid());
    const fs::path v1 = "/sys/fs/cgroup/cpu";
    const fs::path v2 = "/sys/fs/cgroup";
    if (fs::exists(v1 / "cpu.cfs_quota_us")) {
      dir_ = v1 / name;
      fs::create_directories(dir_);
      write_text(dir_ / "cpu.cfs_period_us", "100000");
      write_text(dir_ / "cpu.cfs_quota_us", std::to_string(percent * 1000));
    } else if (contains(read_file(v2 / "cgroup.controllers"), "cpu")) {
      std::ofstream(v2 / "cgroup.subtree_control") << "+cpu";
      dir_ = v2 / name;
      fs::create_directories(dir_);
      write_text(dir_ / "cpu.max", std::to_string(percent * 1000) + " 100000");
    } else {
      throw std::runtime_error("no cgroup cpu controller at " + v1.string() + " or " + v2.string() +
                               ": cannot throttle a node");
    }
  }
  ~CpuQuota() {
    std::istringstream pids(read_file(dir_ / "cgroup.procs"));
    for (pid_t pid; pids >> pid;) ::kill(pid, SIGKILL);
    for (int i = 0; i < 50; ++i) {
      std::error_code ignored;
      if (fs::remove(dir_, ignored)) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  // In front of a launcher's argv: the shell enters the cgroup, then becomes the launcher.
  std::vector<std::string> prefix() const {
    return {"/bin/sh", "-c",
            "echo $$ > '" + (dir_ / "cgroup.procs").string() + "' && exec \"$0\" \"$@\""};
  }

 private:
  fs::path dir_;
};

const ddl::env::EnvMap kJobEnv{{ddl::env::kJobSecret, "preflight-test-secret"}};
constexpr int kNodes = 3;
constexpr milliseconds kJobTimeout{120'000};

struct Node {
  TempDir dir;
  fs::path logs = dir.path() / "logs";
  std::optional<LaunchRun> run;
};

std::vector<std::string> node_flags(int node, int port, const fs::path& logs,
                                    const std::string& nnodes,
                                    const std::vector<std::string>& more = {}) {
  std::vector<std::string> flags = {"--nnodes=" + nnodes,
                                    "--node_rank=" + std::to_string(node),
                                    "--master_addr=127.0.0.1",
                                    "--master_port=" + std::to_string(port),
                                    "--nproc_per_node=1",
                                    "--preflight=on",
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
           const std::vector<std::string>& more = {}) {
  const int port = free_loopback_port();
  for (int k = 0; k < kNodes; ++k) {
    nodes[k].run.emplace(nodes[k].dir, node_flags(k, port, nodes[k].logs, nnodes, more), kJobEnv,
                         k == 2 && quota ? quota->prefix() : std::vector<std::string>{});
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
