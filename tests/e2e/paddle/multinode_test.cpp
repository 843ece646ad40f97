// Multi-node jobs without DDL_JOB_SECRET: two `launch` processes on 127.0.0.1 and
// 127.0.0.2 in Paddle's static spelling (--cluster_node_ips/--node_ip), PaddleCloud's variables
// (automatic and --use_paddlecloud, with node 0 alone as Paddle's own tests run it, the abort
// case included), FLAGS_START_PORT, torchrun's spelling without a secret, and the refusal a site
// asks for with DDL_REQUIRE_SECRET. The workers are a standard-library Python program that
// reports Paddle's variables the way Paddle's multi_process.py does.
#include <gtest/gtest.h>

#include <fstream>

#include "env/contract.h"
#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

const std::string kNode0 = "127.0.0.1";
const std::string kNode1 = "127.0.0.2";
constexpr milliseconds kJobTimeout{30'000};

// Writes OUT/check_<trainer id>.log with Paddle's variables; "abort": trainer 0 writes its line
// prefixed "abort>>> " and exits 1 at once, the others sleep 5 s first and then write.
const char* kScript = R"(import os, sys, time
out, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
info = "selected_gpus:{} worker_endpoints:{} trainers_num:{} current_endpoint:{} trainer_id:{}".format(
    os.getenv("FLAGS_selected_gpus"), os.getenv("PADDLE_TRAINER_ENDPOINTS"),
    os.getenv("PADDLE_TRAINERS_NUM"), os.getenv("PADDLE_CURRENT_ENDPOINT"),
    os.getenv("PADDLE_TRAINER_ID"))
tid = int(os.environ["PADDLE_TRAINER_ID"])
path = os.path.join(out, "check_%d.log" % tid)
if mode == "abort":
    if tid == 0:
        open(path, "w").write("abort>>> " + info + "\n")
        sys.exit(1)
    time.sleep(5)
open(path, "w").write(info + "\nJOB " + os.getenv("DDL_JOB_ID", "") +
                      "\nSECRET " + os.getenv("DDL_JOB_SECRET", "<unset>") + "\n")
)";

fs::path script_in(const TempDir& dir) {
  const fs::path p = dir.path() / "multi_process.py";
  std::ofstream(p) << kScript;
  return p;
}

std::string check(const fs::path& out, int rank) {
  return read_file(out / ("check_" + std::to_string(rank) + ".log"));
}

std::string line_of(const std::string& endpoints, const std::string& current, int rank,
                    int trainers = 4) {
  return "worker_endpoints:" + endpoints + " trainers_num:" + std::to_string(trainers) +
         " current_endpoint:" + current + " trainer_id:" + std::to_string(rank);
}

std::string endpoints4(int port) {
  const std::string p0 = std::to_string(port), p1 = std::to_string(port + 1);
  return kNode0 + ":" + p0 + "," + kNode0 + ":" + p1 + "," + kNode1 + ":" + p0 + "," + kNode1 +
         ":" + p1;
}

// The value of the line starting with `key ` in `text`.
std::string value_after(const std::string& text, const std::string& key) {
  const auto at = text.find("\n" + key + " ");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 2;
  return text.substr(start, text.find('\n', start) - start);
}

std::vector<std::string> paddle_static_args(const std::string& node_ip, const fs::path& script,
                                            const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> args{"--cluster_node_ips=" + kNode0 + "," + kNode1,
                                "--node_ip=" + node_ip, "--nproc_per_node=2",
                                "--print_config=false"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {script.string(), out.string()});
  return args;
}

// Both nodes of the static job: four trainers at Paddle's endpoints, one job id, no secret.
void expect_static_job(const fs::path& out, int port) {
  std::string job_id;
  for (int r = 0; r < 4; ++r) {
    const std::string text = check(out, r);
    SCOPED_TRACE("check_" + std::to_string(r) + ":\n" + text);
    const std::string host = r < 2 ? kNode0 : kNode1;
    EXPECT_TRUE(contains(text, line_of(endpoints4(port),
                                       host + ":" + std::to_string(port + r % 2), r)));
    EXPECT_EQ(value_after(text, "SECRET"), "<unset>");
    if (r == 0) job_id = value_after(text, "JOB");
    EXPECT_EQ(value_after(text, "JOB"), job_id) << "the same job id on both nodes";
  }
  EXPECT_EQ(job_id.rfind("static-", 0), 0u) << job_id;
}

TEST(PaddleMultiNode, StaticSpellingWithoutSecret) {
  TempDir tmp0, tmp1, out;
  const fs::path script = script_in(out);
  const int port = free_loopback_port();
  const std::vector<std::string> extra{"--started_port=" + std::to_string(port)};
  LaunchRun node1(tmp1, paddle_static_args(kNode1, script, out.path(), extra));
  LaunchRun node0(tmp0, paddle_static_args(kNode0, script, out.path(), extra));
  ASSERT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  expect_static_job(out.path(), port);
  for (const LaunchRun* run : {&node0, &node1}) {
    EXPECT_EQ(count(run->err(), "cross-node fail-fast, job-wide restarts and authenticated"), 1)
        << "the info line, once per launcher:\n" << run->err();
    EXPECT_FALSE(contains(run->err(), "control store at")) << run->err();
  }
}

TEST(PaddleMultiNode, FlagsStartPortIsTheFirstPort) {
  TempDir tmp0, tmp1, out;
  const fs::path script = script_in(out);
  const int port = free_loopback_port();
  const ddl::env::EnvMap env{{"FLAGS_START_PORT", std::to_string(port)}};
  LaunchRun node1(tmp1, paddle_static_args(kNode1, script, out.path(), {}), env);
  LaunchRun node0(tmp0, paddle_static_args(kNode0, script, out.path(), {}), env);
  ASSERT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  expect_static_job(out.path(), port);
}

TEST(PaddleMultiNode, FlagsStartPortOnOneNode) {
  TempDir tmp, out;
  const int port = free_loopback_port();
  LaunchRun run(tmp, {"--nproc_per_node=2", "--print_config=false", script_in(out).string(),
                      out.path().string()},
                {{"FLAGS_START_PORT", std::to_string(port)}});
  ASSERT_EQ(run.wait(kJobTimeout), 0) << run.err();
  const std::string eps =
      kNode0 + ":" + std::to_string(port) + "," + kNode0 + ":" + std::to_string(port + 1);
  EXPECT_TRUE(contains(check(out.path(), 1), line_of(eps, kNode0 + ":" + std::to_string(port + 1),
                                                     1, 2)))
      << check(out.path(), 1);
}

// PaddleCloud's variables as Paddle's tests set them (test_launch.sh, test_fleetrun.sh).
ddl::env::EnvMap cloud_env(int node_rank) {
  return {{"PADDLE_TRAINERS_NUM", "2"},
          {"POD_IP", node_rank == 0 ? kNode0 : kNode1},
          {"PADDLE_TRAINERS", kNode0 + "," + kNode1},
          {"PADDLE_TRAINER_ID", std::to_string(node_rank)}};
}

std::vector<std::string> cloud_args(const fs::path& script, const fs::path& out, bool flag,
                                    const std::string& mode = "") {
  // Paddle 1.8's test passes node flags that PaddleCloud's variables override.
  std::vector<std::string> args =
      flag ? std::vector<std::string>{"--use_paddlecloud", "--cluster_node_ips=10.0.0.1",
                                      "--node_ip=10.0.0.1"}
           : std::vector<std::string>{"--ips=" + kNode0 + "," + kNode1};
  args.insert(args.end(), {"--nproc_per_node=2", "--print_config=false", script.string(),
                           out.string()});
  if (!mode.empty()) args.push_back(mode);
  return args;
}

void run_two_cloud_nodes(bool flag, const ddl::env::EnvMap& extra, int port) {
  TempDir tmp0, tmp1, out;
  const fs::path script = script_in(out);
  ddl::env::EnvMap env0 = cloud_env(0), env1 = cloud_env(1);
  for (const auto& [k, v] : extra) env0[k] = env1[k] = v;
  LaunchRun node1(tmp1, cloud_args(script, out.path(), flag), env1);
  LaunchRun node0(tmp0, cloud_args(script, out.path(), flag), env0);
  ASSERT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  expect_static_job(out.path(), port);
  EXPECT_EQ(contains(node0.err(), "--cluster_node_ips=10.0.0.1 is ignored"), flag) << node0.err();
}

TEST(PaddleMultiNode, CloudPaddlePortAutomatic) {
  const int port = free_loopback_port();
  run_two_cloud_nodes(false, {{"PADDLE_PORT", std::to_string(port)}, {"TRAINER_PORTS_NUM", "2"}},
                      port);
}

TEST(PaddleMultiNode, CloudPaddlePortWithFlag) {
  const int port = free_loopback_port();
  run_two_cloud_nodes(true, {{"PADDLE_PORT", std::to_string(port)}, {"TRAINER_PORTS_NUM", "2"}},
                      port);
}

TEST(PaddleMultiNode, CloudEndpointList) {
  const int port = free_loopback_port();
  const std::string p = std::to_string(port), q = std::to_string(port + 1);
  const std::string list = kNode0 + ":" + p + "," + kNode0 + ":" + q + "," + kNode1 + ":" + p +
                           "," + kNode1 + ":" + q;
  run_two_cloud_nodes(false, {{"DISTRIBUTED_TRAINER_ENDPOINTS", list}, {"TRAINER_PORTS_NUM", "2"}},
                      port);
}

// The default port (6170) is fixed: this test holds the ctest RESOURCE_LOCK paddle_cloud_port.
TEST(PaddleMultiNode, CloudDefaultPortNodeZeroAlone) {
  TempDir tmp, out;
  LaunchRun run(tmp, cloud_args(script_in(out), out.path(), true), cloud_env(0));
  ASSERT_EQ(run.wait(kJobTimeout), 0) << run.err();
  EXPECT_TRUE(contains(check(out.path(), 1), line_of(endpoints4(6170), kNode0 + ":6171", 1)))
      << check(out.path(), 1);
  EXPECT_FALSE(fs::exists(out.path() / "check_2.log")) << "node 1's trainers are not started here";
}

// Paddle's abort case: node 0 alone, rank 0 fails at once; rank 1 is stopped before it writes.
TEST(PaddleMultiNode, CloudAbortStopsTheOtherTrainer) {
  for (const bool flag : {false, true}) {
    SCOPED_TRACE(flag ? "--use_paddlecloud" : "automatic");
    TempDir tmp, out;
    LaunchRun run(tmp, cloud_args(script_in(out), out.path(), flag, "abort"), cloud_env(0));
    const auto code = run.wait(kJobTimeout);
    ASSERT_TRUE(code.has_value());
    EXPECT_NE(*code, 0) << run.err();
    EXPECT_LT(run.elapsed(), milliseconds(4000)) << "fails fast, before rank 1 would write";
    // Both spellings are the fleet/1.8 launchers': FLAGS_selected_gpus is set, empty on CPUs.
    EXPECT_TRUE(contains(check(out.path(), 0),
                         "abort>>> selected_gpus: " +
                             line_of(endpoints4(6170), kNode0 + ":6170", 0)))
        << check(out.path(), 0);
    std::this_thread::sleep_for(milliseconds(5500));
    EXPECT_FALSE(fs::exists(out.path() / "check_1.log")) << "rank 1 was stopped";
  }
}

TEST(PaddleMultiNode, TorchrunSpellingWithoutSecretWarnsOnce) {
  TempDir tmp0, tmp1, out;
  const fs::path script = script_in(out);
  const int port = free_loopback_port();
  auto args = [&](int rank, const std::string& ip) {
    return std::vector<std::string>{"--nnodes=2", "--node_rank=" + std::to_string(rank),
                                    "--master_addr=" + kNode0,
                                    "--master_port=" + std::to_string(port), "--node_ip=" + ip,
                                    "--nproc_per_node=2", "--print_config=false",
                                    "--rendezvous_timeout=20", script.string(),
                                    out.path().string()};
  };
  LaunchRun node0(tmp0, args(0, kNode0));
  LaunchRun node1(tmp1, args(1, kNode1));
  ASSERT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(value_after(check(out.path(), r), "SECRET"), "<unset>");
  for (const LaunchRun* run : {&node0, &node1}) {
    EXPECT_EQ(count(run->err(), "admit anyone who can reach their ports"), 1) << run->err();
    EXPECT_TRUE(contains(run->err(), "control store (" + kNode0 + ":" + std::to_string(port + 1)))
        << "names the port exposed:\n" << run->err();
  }
}

TEST(PaddleMultiNode, RequiredSecretIsRefused) {
  for (const auto& [args, env] :
       std::vector<std::pair<std::vector<std::string>, ddl::env::EnvMap>>{
           {{"--require_secret", "--ips=" + kNode0 + "," + kNode1, "hello_worker"}, {}},
           {{"--nnodes=2", "--master_addr=" + kNode0, "hello_worker"},
            {{ddl::env::kRequireSecret, "1"}}}}) {
    TempDir tmp;
    LaunchRun run(tmp, args, env);
    ASSERT_EQ(run.wait(milliseconds(10'000)), 2) << run.err();
    EXPECT_TRUE(contains(run.err(), "needs the same DDL_JOB_SECRET")) << run.err();
  }
}

TEST(PaddleMultiNode, StaticJobRefusesRestarts) {
  TempDir tmp, out;
  LaunchRun run(tmp, paddle_static_args(kNode0, script_in(out), out.path(), {"--max_restarts=1"}));
  ASSERT_EQ(run.wait(milliseconds(10'000)), 2) << run.err();
  EXPECT_TRUE(contains(run.err(), "cannot restart together")) << run.err();
}

}  // namespace
