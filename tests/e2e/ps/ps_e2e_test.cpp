// train_mnist through parameter servers, end to end: `launch --server_num=S --worker_num=W` on the
// real MNIST (skipped when scripts/fetch_mnist.sh has not run). Sync mode against the collective
// path with the same seed and global batch; async progress; a trainer or a server that dies; a
// restart that resumes from the servers' shards. Runs the built programs; links no LibTorch.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/e2e/launch/launch_helpers.h"
#include "tests/support/train_log.h"

namespace ddl::launch_test {
namespace {

using nlohmann::json;
using testing::have_mnist_data;
using testing::mnist_data_dir;
using testing::parse_rank_log;
using testing::RankLog;

constexpr milliseconds kJobTimeout{240'000};

#define SKIP_WITHOUT_DATA()                                                     \
  if (!have_mnist_data())                                                       \
  GTEST_SKIP() << mnist_data_dir() << " is missing: run scripts/fetch_mnist.sh first"

const std::string kTrainer = kBin + "/train_mnist";

std::vector<std::string> trainer_args(int max_steps, const std::string& save) {
  return {kTrainer,     "--data_dir", mnist_data_dir(), "--threads",  "1",
          "--max_steps", std::to_string(max_steps), "--log_interval", "10",
          "--optimizer", "momentum", "--save", save};
}

std::vector<std::string> with(std::vector<std::string> launch, const std::vector<std::string>& tail) {
  launch.insert(launch.end(), tail.begin(), tail.end());
  return launch;
}

// The one JSON summary of a log file.
json summary_of(const fs::path& path) {
  const RankLog log = parse_rank_log(read_file(path));
  EXPECT_EQ(log.summaries.size(), 1u) << path << ":\n" << read_file(path);
  return log.summaries.empty() ? json::object() : log.summaries.back();
}

// A job run to its end.
struct Finished {
  std::unique_ptr<LaunchRun> run;
  int code = -1;  // launch's exit code; -1 when it did not finish in time (the test fails)
};

Finished run_job(const TempDir& dir, const std::vector<std::string>& args,
                 ddl::env::EnvMap env = {}) {
  Finished f;
  f.run = std::make_unique<LaunchRun>(dir, args, std::move(env));
  const std::optional<int> code = f.run->wait(kJobTimeout);
  EXPECT_TRUE(code.has_value()) << "launch did not finish\n" << f.run->err();
  f.code = code.value_or(-1);
  return f;
}

TEST(PsTraining, SyncModeMatchesCollectiveDataParallel) {
  SKIP_WITHOUT_DATA();
  TempDir ps_dir("ps_sync"), coll_dir("ps_coll");
  const Finished ps = run_job(
      ps_dir, with({"--server_num=2", "--worker_num=2", "--log_dir", ps_dir.file("log")},
                   trainer_args(60, "")));
  ASSERT_EQ(ps.code, 0) << ps.run->err();
  const Finished coll = run_job(
      coll_dir, with({"--nproc_per_node=2", "--log_dir", coll_dir.file("log")},
                     trainer_args(60, "")));
  ASSERT_EQ(coll.code, 0) << coll.run->err();

  const json ps0 = summary_of(ps_dir.path() / "log" / "workerlog.0");
  const json ps1 = summary_of(ps_dir.path() / "log" / "workerlog.1");
  const json collective = summary_of(coll_dir.path() / "log" / "workerlog.0");
  EXPECT_EQ(ps0["mode"], "ps-sync");
  EXPECT_EQ(collective["mode"], "collective");
  EXPECT_EQ(ps0["param_checksum"], ps1["param_checksum"]) << "trainers hold the same parameters";
  EXPECT_EQ(ps0["global_step"], 60);
  EXPECT_NEAR(ps0["test_accuracy"].get<double>(), collective["test_accuracy"].get<double>(),
              0.002);
  const double ps_sum = ps0["param_sum"].get<double>();
  const double coll_sum = collective["param_sum"].get<double>();
  EXPECT_NEAR(ps_sum, coll_sum, 1e-4 * std::abs(coll_sum))
      << "ps " << ps0 << "\ncollective " << collective;
  for (int s = 0; s < 2; ++s) {
    const json server = summary_of(ps_dir.path() / "log" / ("serverlog." + std::to_string(s)));
    EXPECT_EQ(server["role"], "server");
    EXPECT_EQ(server["updates"], 60);
    EXPECT_EQ(server["pushes"], 120);
  }
}

TEST(PsTraining, AsyncModeConvergesAndReportsStaleness) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ps_async");
  const Finished job =
      run_job(dir, with({"--server_num=1", "--worker_num=2", "--log_dir", dir.file("log")},
                        with(trainer_args(150, ""), {"--async"})));
  ASSERT_EQ(job.code, 0) << job.run->err();
  const json t0 = summary_of(dir.path() / "log" / "workerlog.0");
  const json t1 = summary_of(dir.path() / "log" / "workerlog.1");
  const json server = summary_of(dir.path() / "log" / "serverlog.0");
  EXPECT_EQ(t0["mode"], "ps-async");
  EXPECT_EQ(server["updates"], 300) << "every push of both trainers is applied";
  EXPECT_TRUE(t0.contains("staleness_mean") && t0.contains("staleness_max")) << t0;
  EXPECT_EQ(t0["param_checksum"], t1["param_checksum"]) << "both end with the servers' state";
  EXPECT_GT(t0["test_accuracy"].get<double>(), 0.85) << t0;
}

TEST(PsTraining, DeadTrainerFailsTheJobFastAndLeavesNothing) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ps_trainer_dies");
  const Finished job = run_job(dir,
                               with({"--server_num=2", "--worker_num=2", "--log_level", "debug",
                                     "--log_dir", dir.file("log")},
                                    trainer_args(2000, "")),
                               {{"DDL_FAULT", "rank=1,step=15,exit=7"}});
  EXPECT_EQ(job.code, 7) << job.run->err();
  EXPECT_TRUE(contains(job.run->err(), "rank 1")) << job.run->err();
  std::set<pid_t> groups = groups_of(job.run->worker_pids());
  for (pid_t g : groups_of(job.run->server_pids())) groups.insert(g);
  EXPECT_EQ(groups.size(), 4u) << job.run->err();
  expect_nothing_left(groups);
}

TEST(PsTraining, DeadServerFailsTheJobFastNamingIt) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ps_server_dies");
  LaunchRun run(dir, with({"--server_num=2", "--worker_num=2", "--log_level", "debug",
                           "--log_dir", dir.file("log")},
                          trainer_args(100'000, "")));
  const fs::path server_log = dir.path() / "log" / "serverlog.1";
  ASSERT_TRUE(wait_until(
      [&] { return contains(read_file(server_log), "all 2 trainer(s) registered"); },
      milliseconds(60'000)))
      << run.err() << read_file(server_log);
  const std::map<int, pid_t> servers = run.server_pids();
  ASSERT_EQ(servers.count(1), 1u) << run.err();
  const auto killed = Clock::now();
  ::kill(servers.at(1), SIGKILL);
  const std::optional<int> code = run.wait(milliseconds(30'000));
  ASSERT_TRUE(code.has_value()) << run.err();
  EXPECT_NE(*code, 0);
  EXPECT_LT(Clock::now() - killed, milliseconds(10'000));
  EXPECT_TRUE(contains(run.err(), "server 1")) << run.err();
  std::set<pid_t> groups = groups_of(run.worker_pids());
  for (pid_t g : groups_of(servers)) groups.insert(g);
  expect_nothing_left(groups);
}

// A trainer fails once after step 25; --max_restarts=1 starts servers and trainers again, the
// servers load their shards (saved every 10 steps) and the trainers continue from the position the
// servers kept: the end is the undisturbed run's, to the bit.
TEST(PsTraining, RestartResumesFromTheServersShards) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ps_restart"), clean("ps_clean");
  const std::vector<std::string> flags{"--server_num=2", "--worker_num=2"};
  const Finished undisturbed_job =
      run_job(clean, with(with(flags, {"--log_dir", clean.file("log")}),
                          with(trainer_args(40, clean.file("ps")), {"--save_every", "10"})));
  ASSERT_EQ(undisturbed_job.code, 0) << undisturbed_job.run->err();
  const Finished job =
      run_job(dir, with(with(flags, {"--max_restarts=1", "--log_dir", dir.file("log")}),
                        with(trainer_args(40, dir.file("ps")), {"--save_every", "10"})),
              {{"DDL_FAULT", "rank=1,step=25,exit=3,restart=0"}});
  ASSERT_EQ(job.code, 0) << job.run->err();
  EXPECT_TRUE(fs::exists(dir.file("ps.server0.pt")));
  EXPECT_TRUE(fs::exists(dir.file("ps.server1.pt")));
  const json resumed = summary_of(dir.path() / "log" / "workerlog.0");
  const json undisturbed = summary_of(clean.path() / "log" / "workerlog.0");
  EXPECT_TRUE(resumed["resumed"].get<bool>()) << resumed;
  EXPECT_EQ(resumed["global_step"], 40);
  EXPECT_EQ(resumed["steps"], 20) << "steps 21..40 ran again after the restart";
  EXPECT_EQ(resumed["param_checksum"], undisturbed["param_checksum"]);
  EXPECT_TRUE(contains(read_file(dir.path() / "log" / "serverlog.0"), "resumed its shard"));
}

// A shard that fails its checksum: the server falls back to the shard's previous save, names
// both, and the job continues from there; with no good previous one the server stops with one
// line naming the file and the check (exit 4) instead of serving damaged parameters.
TEST(PsTraining, ADamagedShardFallsBackToItsPreviousOneOrStopsTheServerNamingIt) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ps_damaged");
  const std::vector<std::string> flags{"--server_num=1", "--worker_num=1"};
  const std::string shard = dir.file("ps.server0.pt"), prev = dir.file("ps.server0.prev.pt");
  // Saves at step 10 and at the end (step 15): the shard holds step 15, its previous one step 10.
  const Finished first = run_job(dir, with(with(flags, {"--log_dir", dir.file("log1")}),
                                           with(trainer_args(15, dir.file("ps")),
                                                {"--save_every", "10"})));
  ASSERT_EQ(first.code, 0) << first.run->err();
  ASSERT_TRUE(fs::exists(prev));
  auto flip_a_byte = [](const std::string& path) {
    std::string bytes = read_file(path);
    bytes[bytes.size() / 2] ^= 0x08;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };

  flip_a_byte(shard);
  const Finished resumed = run_job(dir, with(with(flags, {"--log_dir", dir.file("log2")}),
                                             with(trainer_args(20, dir.file("ps")), {"--resume"})));
  ASSERT_EQ(resumed.code, 0) << resumed.run->err();
  const std::string server_log = read_file(dir.path() / "log2" / "serverlog.0");
  EXPECT_TRUE(contains(server_log, "checkpoint '" + shard + "': content CRC-32 check failed"))
      << server_log;
  EXPECT_TRUE(contains(server_log, "resuming from the previous checkpoint '" + prev + "'"))
      << server_log;
  EXPECT_TRUE(contains(server_log, "resumed its shard at version 10")) << server_log;
  const json s = summary_of(dir.path() / "log2" / "workerlog.0");
  EXPECT_EQ(s["global_step"], 20);
  EXPECT_EQ(s["steps"], 10) << "steps 11..20 ran from the previous shard";

  // Now the shard the last run wrote is damaged and its previous one is gone.
  fs::remove(prev);
  flip_a_byte(shard);
  const Finished refused = run_job(dir, with(with(flags, {"--log_dir", dir.file("log3")}),
                                             with(trainer_args(30, dir.file("ps")), {"--resume"})));
  EXPECT_EQ(refused.code, ddl::kExitBadCheckpoint) << refused.run->err();
  const std::string refused_log = read_file(dir.path() / "log3" / "serverlog.0");
  EXPECT_TRUE(contains(refused_log, "train_mnist: error: checkpoint '" + shard +
                                        "': content CRC-32 check failed"))
      << refused_log;
  EXPECT_TRUE(contains(refused.run->err(), "job failed: server 0 (pid")) << refused.run->err();
}

TEST(PsTraining, ModeMustMatchTheJob) {
  TempDir dir("ps_mode");
  const std::string out = dir.file("out");
  testing::SpawnOptions o;
  o.argv = {kTrainer, "--mode", "ps"};
  o.stdout_path = out;
  testing::ChildProcess alone(o);
  EXPECT_EQ(alone.wait(milliseconds(30'000)), 2);
  EXPECT_TRUE(contains(read_file(out), "--mode ps needs a parameter-server job")) << read_file(out);
}

}  // namespace
}  // namespace ddl::launch_test
