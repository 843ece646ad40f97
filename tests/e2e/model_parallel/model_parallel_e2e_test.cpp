// train_model_parallel end to end. The equivalence runs use a small IDX set this test writes (no
// real data needed): the 2-rank pipeline under `launch` against --single on the same batches,
// step by step. One short run on the real MNIST (DDL_SOURCE_DIR/data/mnist; skipped when missing)
// checks the logs and accuracy, and the error exits are checked without data; a stage that hangs
// makes the other give up at its deadline (exit 124) and `launch` dump the stuck stage's stack.
// Runs the built executables from DDL_BIN_DIR; links no LibTorch.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/train_log.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ddl::testing::read_file;
using ddl::testing::TempDir;

constexpr std::chrono::seconds kRunTimeout{120};
const std::string kBin = DDL_BIN_DIR;
const std::string kRealData = std::string(DDL_SOURCE_DIR) + "/data/mnist";
const std::string kTrainer = kBin + "/train_model_parallel";

using ddl::testing::RunResult;

RunResult run(const std::vector<std::string>& args, const std::string& log) {
  return ddl::testing::run_program(args, log, kRunTimeout);
}

// --- a small IDX set --------------------------------------------------------------------------

void put_be32(std::string& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<char>((v >> shift) & 0xff));
}

// Images whose pixels depend on the label, so the loss has something to learn.
void write_idx_pair(const std::string& images_path, const std::string& labels_path,
                    std::uint32_t n, std::uint32_t salt) {
  std::string images, labels;
  put_be32(images, 0x00000803);
  put_be32(images, n);
  put_be32(images, 28);
  put_be32(images, 28);
  put_be32(labels, 0x00000801);
  put_be32(labels, n);
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::uint32_t label = (k * 7 + salt) % 10;
    labels.push_back(static_cast<char>(label));
    for (std::uint32_t i = 0; i < 28 * 28; ++i) {
      const bool stripe = (i / 28) % 10 == label;
      images.push_back(static_cast<char>(stripe ? 200 + (k + i) % 50 : (k * 31 + i * 7) % 60));
    }
  }
  std::ofstream(images_path, std::ios::binary) << images;
  std::ofstream(labels_path, std::ios::binary) << labels;
}

// 1200 training and 500 test images.
std::string write_fixture(const TempDir& tmp) {
  const std::string dir = tmp.file("idx");
  fs::create_directory(dir);
  write_idx_pair(dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte", 1200, 0);
  write_idx_pair(dir + "/t10k-images-idx3-ubyte", dir + "/t10k-labels-idx1-ubyte", 500, 3);
  return dir;
}

// --- what a run printed -------------------------------------------------------------------------

using Log = ddl::testing::RankLog;
using ddl::testing::parse_rank_log;

std::vector<std::string> common_args(const std::string& data, int steps, int micro_batches) {
  return {"--data_dir",  data, "--max_steps", std::to_string(steps), "--log_interval", "1",
          "--batch_size", "50", "--micro_batches", std::to_string(micro_batches),
          "--optimizer", "momentum", "--seed", "4", "--threads", "1"};
}

// The unsplit net in one process.
Log run_single(const TempDir& tmp, const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), {kTrainer, "--single"});
  const RunResult r = run(args, tmp.file(name + ".out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  Log log = parse_rank_log(r.output);
  EXPECT_EQ(log.summaries.size(), 1u) << r.output;
  return log;
}

// The pipeline under `launch --nproc_per_node=2`; one Log per rank.
std::vector<Log> run_pipeline(const TempDir& tmp, const std::string& name,
                              const std::vector<std::string>& trainer_args) {
  const std::string log_dir = tmp.file(name + "_logs");
  std::vector<std::string> args = {kBin + "/launch", "--nproc_per_node=2", "--log_dir", log_dir,
                                   kTrainer};
  args.insert(args.end(), trainer_args.begin(), trainer_args.end());
  const RunResult r = run(args, tmp.file(name + "_launch.out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<Log> logs;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = log_dir + "/workerlog." + std::to_string(rank);
    logs.push_back(parse_rank_log(read_file(path)));
    EXPECT_EQ(logs.back().summaries.size(), 1u) << path << ":\n" << read_file(path)
                                                << "\nlauncher:\n" << r.output;
  }
  return logs;
}

void expect_losses_close(const std::vector<double>& got, const std::vector<double>& want,
                         double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::abs(want[i])) << what << ", step " << i;
  }
}

// Each stage's parameters after the run against that stage's part of the single-process net.
void expect_stages_match(const std::vector<Log>& pipeline, const Log& single, double rel) {
  ASSERT_EQ(pipeline.size(), 2u);
  ASSERT_EQ(single.summaries.size(), 1u);
  const json& s = single.summaries[0];
  for (int stage = 0; stage < 2; ++stage) {
    ASSERT_EQ(pipeline[stage].summaries.size(), 1u);
    const json& p = pipeline[stage].summaries[0];
    EXPECT_EQ(p["stage"], stage);
    const double want = s["stage_param_sum"][stage].get<double>();
    EXPECT_NEAR(p["param_sum"].get<double>(), want, rel * std::abs(want)) << "stage " << stage;
  }
}

constexpr int kSteps = 20;

TEST(ModelParallelE2E, OneMicroBatchMatchesTheSingleProcessNetStepByStep) {
  TempDir tmp;
  const std::string data = write_fixture(tmp);
  const Log single = run_single(tmp, "single", common_args(data, kSteps, 1));
  const std::vector<Log> pipeline = run_pipeline(tmp, "m1", common_args(data, kSteps, 1));
  ASSERT_EQ(single.losses.size(), static_cast<std::size_t>(kSteps));
  EXPECT_TRUE(pipeline[0].losses.empty());  // stage 0 has no loss to print
  expect_losses_close(pipeline[1].losses, single.losses, 1e-5, "M=1 vs single");
  expect_stages_match(pipeline, single, 1e-6);
  // With one micro-batch the arithmetic is the same, so here the bits are too.
  for (int stage = 0; stage < 2; ++stage) {
    EXPECT_EQ(pipeline[stage].summaries[0]["param_checksum"],
              single.summaries[0]["stage_param_checksum"][stage])
        << "stage " << stage;
    EXPECT_EQ(pipeline[stage].summaries[0]["test_accuracy"],
              single.summaries[0]["test_accuracy"]);
    EXPECT_EQ(pipeline[stage].summaries[0]["steps"], kSteps);
  }
  // The loss fell on the fixture: something was trained, not just passed through.
  EXPECT_LT(single.losses.back(), single.losses.front());
}

TEST(ModelParallelE2E, FourMicroBatchesMatchWithinAccumulationRounding) {
  TempDir tmp;
  const std::string data = write_fixture(tmp);
  const Log whole = run_single(tmp, "single_m1", common_args(data, kSteps, 1));
  const Log accumulated = run_single(tmp, "single_m4", common_args(data, kSteps, 4));
  const std::vector<Log> pipeline = run_pipeline(tmp, "m4", common_args(data, kSteps, 4));
  ASSERT_EQ(pipeline.size(), 2u);
  EXPECT_EQ(pipeline[1].summaries[0]["micro_batches"], 4);
  // Against the whole-batch step: only the order of the float sums differs.
  expect_losses_close(pipeline[1].losses, whole.losses, 1e-4, "M=4 vs single M=1");
  expect_stages_match(pipeline, whole, 1e-4);
  // Against the same accumulation in one process: the transport adds nothing.
  expect_losses_close(pipeline[1].losses, accumulated.losses, 1e-6, "M=4 vs single M=4");
  expect_stages_match(pipeline, accumulated, 1e-6);
}

TEST(ModelParallelE2E, TwoRanksUnderLaunchOnTheRealData) {
  if (!fs::exists(kRealData + "/train-images-idx3-ubyte")) {
    GTEST_SKIP() << kRealData << " is missing: run scripts/fetch_mnist.sh first";
  }
  TempDir tmp;
  const std::vector<Log> logs =
      run_pipeline(tmp, "real", {"--data_dir", kRealData, "--max_steps", "60", "--log_interval",
                                 "20", "--optimizer", "momentum", "--threads", "1"});
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_TRUE(logs[0].losses.empty());
  ASSERT_EQ(logs[1].losses.size(), 3u);  // batches 0, 20, 40
  EXPECT_LT(logs[1].losses.back(), logs[1].losses.front() * 0.7);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(logs[rank].accuracy_lines, 1) << "rank " << rank;
    ASSERT_EQ(logs[rank].summaries.size(), 1u);
    const json& s = logs[rank].summaries[0];
    EXPECT_EQ(s["rank"], rank);
    EXPECT_EQ(s["stage"], rank);
    EXPECT_EQ(s["world"], 2);
    EXPECT_EQ(s["steps"], 60);
    EXPECT_EQ(s["micro_batches"], 4);
    EXPECT_GT(s["images_per_sec"].get<double>(), 0.0);
    EXPECT_GT(s["test_accuracy"].get<double>(), 0.5);  // 60 momentum steps: well past chance
  }
  EXPECT_EQ(logs[0].summaries[0]["test_accuracy"], logs[1].summaries[0]["test_accuracy"]);
}

TEST(ModelParallelE2E, AWorldOfThreeIsRefusedInOneLine) {
  TempDir tmp;
  const std::string log_dir = tmp.file("logs");
  const RunResult r = run({kBin + "/launch", "--nproc_per_node=3", "--log_dir", log_dir, kTrainer,
                           "--data_dir", tmp.file("unused")},
                          tmp.file("launch.out"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  // The first rank to fail makes the launcher stop the others, so not every rank may get to say
  // it; at least one does, in one line.
  const std::regex expected(
      "(^|\n)train_model_parallel: error: the pipeline has 2 stages, one per rank, so it needs a "
      "world of 2 \\(launch --nproc_per_node=2\\), got a world of 3 \\(this is rank [0-2]\\) "
      "\\(see --help\\)\n");
  std::string all;
  bool found = false;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string text = read_file(log_dir + "/workerlog." + std::to_string(rank));
    found = found || std::regex_search(text, expected);
    all += "workerlog." + std::to_string(rank) + ":\n" + text;
  }
  EXPECT_TRUE(found) << all << "\nlauncher:\n" << r.output;
}

TEST(ModelParallelE2E, BadOptionsExitTwo) {
  TempDir tmp;
  const RunResult zero = run({kTrainer, "--micro_batches", "0"}, tmp.file("a"));
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_NE(zero.output.find("--micro_batches must be between 1 and --batch_size"),
            std::string::npos)
      << zero.output;
  const RunResult many = run({kTrainer, "--batch_size", "8", "--micro_batches", "9"}, tmp.file("b"));
  EXPECT_EQ(many.exit_code, 2) << many.output;
  const RunResult optimizer = run({kTrainer, "--optimizer", "lbfgs"}, tmp.file("c"));
  EXPECT_EQ(optimizer.exit_code, 2) << optimizer.output;
}

// Stage 1 hangs after its 3rd step (DDL_FAULT): stage 0 gives up at its 5 s deadline with exit
// 124, as train_mnist does, so `launch` writes the stack of the stage still running to
// LOG_DIR/stacks.0.txt before it stops it, names the innermost frame of our code, and exits 124.
TEST(ModelParallelE2E, AStageThatGivesUpAtItsDeadlineGetsTheStuckStageDumped) {
  TempDir tmp;
  const std::string data = write_fixture(tmp);
  const std::string log_dir = tmp.file("logs");
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  env["DDL_FAULT"] = "rank=1,step=3,hang";
  std::vector<std::string> args = {kBin + "/launch", "--nproc_per_node=2", "--log_dir", log_dir,
                                   "--print_config=false", kTrainer, "--collective_timeout", "5"};
  const std::vector<std::string> trainer_args = common_args(data, 20, 2);
  args.insert(args.end(), trainer_args.begin(), trainer_args.end());
  ddl::testing::SpawnOptions options;
  options.argv = args;
  options.env = env;
  options.stdout_path = tmp.file("launch.out");
  options.own_process_group = true;
  ddl::testing::ChildProcess launch(std::move(options));
  const std::optional<int> code = launch.wait(kRunTimeout);
  const std::string out = read_file(tmp.file("launch.out"));
  ASSERT_TRUE(code.has_value()) << "launch still running after " << kRunTimeout.count() << " s\n"
                                << out;
  EXPECT_EQ(*code, 124) << out;
  const std::string rank0 = read_file(log_dir + "/workerlog.0");
  EXPECT_NE(rank0.find("train_model_parallel: error: communication: "), std::string::npos)
      << rank0;
  EXPECT_NE(out.find("rank 0 exited with code 124 (a rendezvous or collective deadline"),
            std::string::npos)
      << out;
  const fs::path stacks = fs::path(log_dir) / "stacks.0.txt";
  ASSERT_TRUE(fs::exists(stacks)) << out;
  const std::string text = read_file(stacks);
  EXPECT_NE(text.find("stack dump: rank 0 exited with code 124"), std::string::npos) << text;
  EXPECT_NE(text.find("==== rank 1 (pid"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1: ddl::FaultInjector::at_step"), std::string::npos) << text;
  EXPECT_NE(out.find("rank 1: ddl::FaultInjector::at_step"), std::string::npos) << out;
  EXPECT_NE(out.find("stacks of 1 process(es) in " + stacks.string()), std::string::npos) << out;
}

TEST(ModelParallelE2E, MissingDataIsExitCodeThree) {
  TempDir tmp;
  const RunResult r = run({kTrainer, "--single", "--data_dir", tmp.file("nope")}, tmp.file("out"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find(tmp.file("nope")), std::string::npos) << r.output;
}

}  // namespace
