// A real training job that recovers as one and explains a hang: `launch` running `train_mnist` on
// the real MNIST, as two or three nodes on loopback addresses (127.0.0.1, .2, .3) or as one.
// - a rank on node 1 fails once: both nodes restart together, resume from rank 0's checkpoint and
//   end with the checksum of an undisturbed run;
// - an elastic job of 3 nodes loses one mid-training: the other 2 finish from the checkpoint;
// - a rank hangs: the launcher writes every rank's stack to LOG_DIR/stacks.0.txt and its summary
//   points at the hung rank, whether the hang guard fired or a peer gave up at its deadline;
// - the run report (report.json) holds every rank's epochs.
// Links no LibTorch: it drives the built executables.
#include <signal.h>

#include <nlohmann/json.hpp>

#include "tests/e2e/faults/train_job.h"

namespace {

using namespace ddl::launch_test;
using nlohmann::json;

constexpr milliseconds kJobTimeout{300'000};

// A short deterministic run that checkpoints every 10 steps to `save` (shared by the nodes).
std::vector<std::string> train_args(int max_steps, const fs::path& save) {
  return {kTrain,     "--data_dir", kData,         "--max_steps",  std::to_string(max_steps),
          "--epochs", "1",          "--seed",      "7",            "--log_interval",
          "5",        "--save",     save.string(), "--save_every", "10",
          "--threads", "1"};
}

std::string node_ip(int node) { return "127.0.0." + std::to_string(node + 1); }

std::vector<std::string> node_flags(int node, const std::string& nnodes, int port,
                                    const fs::path& logs) {
  return {"--nnodes=" + nnodes, "--node_rank=" + std::to_string(node),
          "--master_addr=" + node_ip(0), "--master_port=" + std::to_string(port),
          "--node_ip=" + node_ip(node), "--nproc_per_node=2", "--log_dir", logs.string(),
          "--log_level=debug", "--print_config=false", "--rendezvous_timeout=60",
          "--kill_timeout=5"};
}

ddl::env::EnvMap job_env(const std::string& fault = "") {
  ddl::env::EnvMap env{{ddl::env::kJobSecret, "recovery-test-secret"}};
  if (!fault.empty()) env[ddl::env::kFault] = fault;
  return env;
}

// Two nodes, 2 ranks each, 60 steps; returns rank 0's summary.
json two_node_run(const std::string& fault, const fs::path& save, std::string* err0 = nullptr) {
  TempDir tmp0, tmp1;
  const int port = free_loopback_port();
  const fs::path logs0 = tmp0.path() / "logs", logs1 = tmp1.path() / "logs";
  const std::vector<std::string> restarts{"--max_restarts=1"};
  LaunchRun node0(tmp0, concat(concat(node_flags(0, "2", port, logs0), restarts),
                               train_args(60, save)),
                  job_env(fault));
  LaunchRun node1(tmp1, concat(concat(node_flags(1, "2", port, logs1), restarts),
                               train_args(60, save)),
                  job_env(fault));
  EXPECT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  EXPECT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  if (err0) *err0 = node0.err() + node1.err();
  const json s0 = summary_of(logs0, 0);
  for (int r = 1; r < 4; ++r) {
    const json s = summary_of(r < 2 ? logs0 : logs1, r);
    EXPECT_EQ(s.value("param_checksum", ""), s0.value("param_checksum", "x")) << "rank " << r;
  }
  return s0;
}

TEST(Recovery, AFailureOnNode1RestartsBothNodesAndEndsLikeAnUndisturbedRun) {
  SKIP_WITHOUT_DATA();
  TempDir clean_dir, dir;
  const json clean = two_node_run("", clean_dir.path() / "ck");
  ASSERT_TRUE(clean.is_object());
  std::string err;
  const json s0 = two_node_run("rank=3,step=25,exit=3,restart=0", dir.path() / "ck", &err);
  ASSERT_TRUE(s0.is_object()) << err;
  EXPECT_TRUE(contains(err, "generation 0 failed on node 1: rank 3 exited with code 3")) << err;
  EXPECT_EQ(s0["resumed"], true);
  EXPECT_EQ(s0["world"], 4);
  EXPECT_EQ(s0["global_step"], 60);
  EXPECT_EQ(s0["param_checksum"], clean["param_checksum"]);
  EXPECT_EQ(s0["test_accuracy"], clean["test_accuracy"]);
}

TEST(Recovery, ElasticJobOfThreeNodesLosesOneAndTheOtherTwoFinish) {
  SKIP_WITHOUT_DATA();
  TempDir tmp0, tmp1, tmp2, shared;
  const int port = free_loopback_port();
  const fs::path logs[3] = {tmp0.path() / "logs", tmp1.path() / "logs", tmp2.path() / "logs"};
  const fs::path save = shared.path() / "ck";
  auto args = [&](int node) {
    return concat(concat(node_flags(node, "2:3", port, logs[node]),
                         {"--max_restarts=1", "--rdzv_conf=last_call_timeout=30"}),
                  train_args(120, save));
  };
  LaunchRun node0(tmp0, args(0), job_env());
  LaunchRun node1(tmp1, args(1), job_env());
  LaunchRun node2(tmp2, args(2), job_env());
  // Past the first checkpoint (step 10 of the 6-rank world), then node 2's launcher dies.
  ASSERT_TRUE(wait_until([&] { return contains(worker_log(logs[2], 4), "batch: 15,"); },
                         milliseconds(120'000)))
      << node0.err() << node2.err();
  const auto pids2 = node2.worker_pids();
  ::kill(node2.pid(), SIGKILL);
  ASSERT_EQ(node2.wait(milliseconds(5000)), 128 + SIGKILL);
  ASSERT_EQ(node0.wait(kJobTimeout), 0) << node0.err();
  ASSERT_EQ(node1.wait(kJobTimeout), 0) << node1.err();
  expect_nothing_left(pids2);

  EXPECT_TRUE(contains(node0.err(), "generation 1: nodes 0, 1")) << node0.err();
  const json s0 = summary_of(logs[0], 0);
  ASSERT_TRUE(s0.is_object()) << worker_log(logs[0], 0);
  EXPECT_EQ(s0["world"], 4);
  EXPECT_EQ(s0["resumed"], true);
  EXPECT_EQ(s0["global_step"], 120);
  EXPECT_TRUE(contains(worker_log(logs[0], 0), "(written by a world of 6)"))
      << worker_log(logs[0], 0);
  EXPECT_EQ(summary_of(logs[1], 3)["param_checksum"], s0["param_checksum"]);
  EXPECT_GT(s0["test_accuracy"].get<double>(), 0.5);
}

// A single-node job whose rank 1 hangs at step 12; `flags` decide who notices.
struct HangRun {
  TempDir dir;
  fs::path logs = dir.path() / "logs";
  int code = -1;
  std::string err;
};

void run_hang(HangRun& h, const std::vector<std::string>& flags,
              const std::vector<std::string>& train_flags = {}) {
  LaunchRun run(h.dir,
                concat(concat(concat({"--nproc_per_node=2", "--log_dir", h.logs.string(),
                                      "--print_config=false"},
                                     flags),
                              train_args(200, "")),
                       train_flags),
                {{ddl::env::kFault, "rank=1,step=12,hang"}});
  h.code = run.wait(milliseconds(120'000)).value_or(-1);
  h.err = run.err();
  expect_nothing_left(run.worker_pids());
}

// Rank 0 is in the dump unless it is the rank that gave up (it has exited then; the dump's reason
// names it).
void expect_stacks_point_at_rank1(const HangRun& h, bool rank0_running) {
  const fs::path stacks = h.logs / "stacks.0.txt";
  ASSERT_TRUE(fs::exists(stacks)) << h.err;
  const std::string text = read_file(stacks);
  EXPECT_EQ(contains(text, "==== rank 0 (pid"), rank0_running) << text;
  if (!rank0_running) {
    EXPECT_TRUE(contains(text, "stack dump: rank 0 exited with code 124")) << text;
  }
  EXPECT_TRUE(contains(text, "==== rank 1 (pid")) << text;
  EXPECT_TRUE(contains(text, "rank 1: ddl::FaultInjector::at_step")) << text;
  EXPECT_TRUE(contains(h.err, "rank 1: ddl::FaultInjector::at_step")) << h.err;
  EXPECT_TRUE(contains(h.err, "stacks of 2 process(es) in " + stacks.string()) ||
              contains(h.err, "stacks of 1 process(es) in " + stacks.string()))
      << h.err;
}

TEST(Recovery, TheHangGuardDumpsEveryRanksStackAndPointsAtTheHungRank) {
  SKIP_WITHOUT_DATA();
  HangRun h;
  run_hang(h, {"--hang_timeout=4"});
  EXPECT_EQ(h.code, kExitDeadline) << h.err;
  expect_stacks_point_at_rank1(h, true);
  const std::string text = read_file(h.logs / "stacks.0.txt");
  EXPECT_TRUE(contains(text, "rank 0: ddl::GlooMesh::")) << text;
}

TEST(Recovery, APeerThatGivesUpAtItsDeadlineGetsTheStuckRankDumped) {
  SKIP_WITHOUT_DATA();
  HangRun h;
  // No hang guard: rank 0's all-reduce gives up after its 5 s deadline (exit 124).
  run_hang(h, {}, {"--collective_timeout", "5"});
  EXPECT_EQ(h.code, 124) << h.err;
  EXPECT_TRUE(contains(h.err, "rank 0 exited with code 124 (a rendezvous or collective deadline"))
      << h.err;
  expect_stacks_point_at_rank1(h, false);
}

TEST(Recovery, TheRunReportHoldsEveryRanksEpochs) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path logs = dir.path() / "logs";
  LaunchRun run(dir,
                concat({"--nproc_per_node=2", "--log_dir", logs.string(), "--print_config=false"},
                       {kTrain, "--data_dir", kData, "--epochs", "2", "--batch_size", "500", "--log_interval", "10", "--threads", "1"}));
  ASSERT_EQ(run.wait(kJobTimeout), 0) << run.err();
  const json report = json::parse(read_file(logs / "report.json"));
  ASSERT_EQ(report["processes"].size(), 2u) << report.dump(1);
  for (const json& p : report["processes"]) {
    SCOPED_TRACE(p.dump(1));
    EXPECT_EQ(p["exit"]["code"], 0);
    EXPECT_GT(p["peak_rss_kib"].get<long>(), 10'000);
    EXPECT_GT(p["cpu_seconds"].get<double>(), 0.1);
    ASSERT_EQ(p["epochs"].size(), 2u);
    for (const json& e : p["epochs"]) {
      EXPECT_GT(e["accuracy"].get<double>(), 0.5);
      EXPECT_GT(e["images_per_sec"].get<double>(), 0.0);
      EXPECT_GT(e["mean_loss"].get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(fs::exists(logs / "report.html"));

  TempDir off;
  const fs::path logs_off = off.path() / "logs";
  LaunchRun quiet(off, {"--nproc_per_node=1", "--log_dir", logs_off.string(),
                        "--print_config=false", "--report=false", kTrain, "--data_dir", kData,
                        "--max_steps", "5", "--threads", "1"});
  ASSERT_EQ(quiet.wait(kJobTimeout), 0) << quiet.err();
  EXPECT_FALSE(fs::exists(logs_off / "report.json"));
  EXPECT_FALSE(fs::exists(logs_off / "report.html"));
}

}  // namespace
