// The fleet launcher's rank placement (--rank_mapping_file with --enable_auto_mapping) and
// --bind, run by the built `launch` on a standard library Python script that reads Paddle's
// variables the way Paddle's multi_process.py does: one node as Paddle's own
// test_fleet_launch_rank_mapping.sh runs it, an uneven mapping over two launchers on 127.0.0.1
// and 127.0.0.2, bad files, and each worker's CPU affinity under --bind.
#include <gtest/gtest.h>
#include <sched.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

constexpr milliseconds kTimeout{30'000};

// What Paddle's multi_process.py writes: one line per trainer, in a file named by its id.
const char* kPaddleScript = R"(import os, sys
line = "selected_gpus:{} worker_endpoints:{} trainers_num:{} current_endpoint:{} trainer_id:{}".format(
    os.getenv("FLAGS_selected_gpus"), os.getenv("PADDLE_TRAINER_ENDPOINTS"),
    os.getenv("PADDLE_TRAINERS_NUM"), os.getenv("PADDLE_CURRENT_ENDPOINT"),
    os.getenv("PADDLE_TRAINER_ID"))
with open(os.path.join(sys.argv[1], "check_" + os.getenv("PADDLE_TRAINER_ID") + ".log"), "w") as f:
    f.write(line + "\n")
print("RANK_IN_NODE", os.getenv("PADDLE_RANK_IN_NODE"), "AFFINITY", sorted(os.sched_getaffinity(0)))
)";

fs::path write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir.path() / name;
  std::ofstream(p) << text;
  return p;
}

// The CPUs this test (and so `launch`) may run on.
int allowed_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

std::string describe(LaunchRun& run) { return "stderr:\n" + run.err() + "\nstdout:\n" + run.out(); }

TEST(PaddleRankMapping, OneNodeAsPaddlesOwnTest) {
  TempDir tmp;
  const fs::path script = write_file(tmp, "multi_process.py", kPaddleScript);
  const fs::path map = write_file(
      tmp, "rank_mapping_file.json",
      R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [0,1]}]})");
  const int port = free_loopback_port();
  LaunchRun run(tmp, {"--rank_mapping_file", map.string(), "--enable_auto_mapping", "true",
                      "--started_port", std::to_string(port), "--log_dir",
                      (tmp.path() / "testlog").string(), script.string(), tmp.path().string()},
                {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string eps =
      "127.0.0.1:" + std::to_string(port) + ",127.0.0.1:" + std::to_string(port + 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(read_file(tmp.path() / ("check_" + std::to_string(r) + ".log")),
              "selected_gpus:" + std::to_string(r) + " worker_endpoints:" + eps +
                  " trainers_num:2 current_endpoint:127.0.0.1:" + std::to_string(port + r) +
                  " trainer_id:" + std::to_string(r) + "\n");
  }
}

TEST(PaddleRankMapping, RanksInFileOrderWithPickedPorts) {
  TempDir tmp;
  const fs::path script = write_file(tmp, "multi_process.py", kPaddleScript);
  const fs::path map =
      write_file(tmp, "map.json", R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [2, 0, 1]}]})");
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--rank_mapping_file=" + map.string(), "--enable_auto_mapping",
                      "--print_config=false", "--log_dir", logs.string(), script.string(),
                      tmp.path().string()});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  // Rank 2 is the node's first worker: device 0, the first local rank.
  const std::string check2 = read_file(tmp.path() / "check_2.log");
  EXPECT_TRUE(contains(check2, "selected_gpus:0 ")) << check2;
  EXPECT_TRUE(contains(worker_log(logs, 2), "RANK_IN_NODE 0 ")) << worker_log(logs, 2);
  EXPECT_TRUE(contains(worker_log(logs, 1), "RANK_IN_NODE 2 ")) << worker_log(logs, 1);
  // Endpoints in rank order: each rank's own endpoint is at its index.
  for (int r = 0; r < 3; ++r) {
    const std::string check = read_file(tmp.path() / ("check_" + std::to_string(r) + ".log"));
    const std::string eps = check.substr(check.find("worker_endpoints:") + 17);
    const auto list = ddl::env::parse_endpoint_list(eps.substr(0, eps.find(' ')), "endpoints");
    ASSERT_EQ(list.size(), 3u) << check;
    EXPECT_TRUE(contains(check, "current_endpoint:" + list[r].str() + " ")) << check;
  }
}

TEST(PaddleRankMapping, UnevenTwoNodes) {
  TempDir tmp0, tmp1;
  const std::string json =
      R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [2]}, {"ip": "127.0.0.2", "ranks": [0, 1]}]})";
  const int port = free_loopback_port();
  auto args = [&](const TempDir& tmp, const std::string& ip) {
    const fs::path script = write_file(tmp, "multi_process.py", kPaddleScript);
    const fs::path map = write_file(tmp, "map.json", json);
    return std::vector<std::string>{
        "--rank_mapping_file", map.string(), "--enable_auto_mapping", "true", "--node_ip=" + ip,
        "--started_port", std::to_string(port), "--print_config=false", "--rendezvous_timeout=20",
        "--log_dir", (tmp.path() / "logs").string(), script.string(), tmp.path().string()};
  };
  const ddl::env::EnvMap secret = {{ddl::env::kJobSecret, "mapping-test-secret"}};
  LaunchRun node0(tmp0, args(tmp0, "127.0.0.1"), secret);
  LaunchRun node1(tmp1, args(tmp1, "127.0.0.2"), secret);
  ASSERT_EQ(node0.wait(kTimeout), 0) << describe(node0);
  ASSERT_EQ(node1.wait(kTimeout), 0) << describe(node1);
  const std::string p = std::to_string(port), q = std::to_string(port + 1);
  const std::string eps = "127.0.0.2:" + p + ",127.0.0.2:" + q + ",127.0.0.1:" + p;
  EXPECT_EQ(read_file(tmp0.path() / "check_2.log"),
            "selected_gpus:0 worker_endpoints:" + eps +
                " trainers_num:3 current_endpoint:127.0.0.1:" + p + " trainer_id:2\n");
  EXPECT_EQ(read_file(tmp1.path() / "check_0.log"),
            "selected_gpus:0 worker_endpoints:" + eps +
                " trainers_num:3 current_endpoint:127.0.0.2:" + p + " trainer_id:0\n");
  EXPECT_EQ(read_file(tmp1.path() / "check_1.log"),
            "selected_gpus:1 worker_endpoints:" + eps +
                " trainers_num:3 current_endpoint:127.0.0.2:" + q + " trainer_id:1\n");
  EXPECT_FALSE(fs::exists(tmp0.path() / "check_0.log"));
}

TEST(PaddleRankMapping, BadFileIsOneLineAndExit2) {
  TempDir tmp;
  const fs::path map =
      write_file(tmp, "map.json", R"({"ip_ranks": [{"ip": "127.0.0.1", "ranks": [0, 0]}]})");
  LaunchRun run(tmp, {"--rank_mapping_file", map.string(), "--enable_auto_mapping", "true",
                      "worker.py"});
  ASSERT_EQ(run.wait(kTimeout), 2) << describe(run);
  EXPECT_TRUE(contains(run.err(), map.string() + ": rank 0 is mapped twice")) << run.err();
  EXPECT_EQ(count(run.err(), "\n"), 1) << run.err();
}

TEST(CpuBind, CoreGivesEachWorkerItsOwnCpus) {
  TempDir tmp;
  const fs::path script = write_file(tmp, "multi_process.py", kPaddleScript);
  const fs::path logs = tmp.path() / "logs";
  const int cpus = allowed_cpu_count();
  const int workers = std::min(cpus, 2);
  LaunchRun run(tmp, {"--nproc_per_node=" + std::to_string(workers), "--bind=core",
                      "--print_config=false", "--log_dir", logs.string(), script.string(),
                      tmp.path().string()});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  std::set<std::string> seen;
  for (int r = 0; r < workers; ++r) {
    const std::string log = worker_log(logs, r);
    const auto at = log.find("AFFINITY ");
    ASSERT_NE(at, std::string::npos) << log;
    const std::string affinity = log.substr(at + 9, log.find('\n', at) - at - 9);
    EXPECT_TRUE(seen.insert(affinity).second) << "two workers on " << affinity;
    if (cpus == 2) {
      EXPECT_EQ(affinity, "[" + std::to_string(r) + "]") << log;
    }
  }
  EXPECT_TRUE(contains(run.err(), "--bind=core: rank 0 on CPUs ")) << run.err();
}

TEST(CpuBind, BadModeIsOneLineAndExit2) {
  TempDir tmp;
  LaunchRun run(tmp, {"--bind=socket", "worker.py"});
  ASSERT_EQ(run.wait(kTimeout), 2) << describe(run);
  EXPECT_TRUE(contains(run.err(), "--bind='socket': expected none, core or numa")) << run.err();
}

}  // namespace
