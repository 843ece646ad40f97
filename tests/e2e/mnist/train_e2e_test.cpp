// train_mnist end to end: short runs under `launch` on the real MNIST (DDL_SOURCE_DIR/data/mnist,
// fetched by scripts/fetch_mnist.sh; the data tests skip when it is missing), plus the trainer's
// error exits. Runs the built executables from DDL_BIN_DIR and reads their logs; links no LibTorch.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/train_log.h"


namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr std::chrono::seconds kRunTimeout{240};

const std::string kBin = DDL_BIN_DIR;
const std::string kData = ddl::testing::mnist_data_dir();

using ddl::testing::TempDir;

using ddl::testing::read_file;

using ddl::testing::RunResult;

RunResult run(const std::vector<std::string>& args, const std::string& log,
              std::chrono::seconds timeout = kRunTimeout) {
  return ddl::testing::run_program(args, log, timeout);
}

bool have_data() { return ddl::testing::have_mnist_data(); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

#define SKIP_WITHOUT_DATA() \
  if (!have_data()) GTEST_SKIP() << kData << " is missing: run scripts/fetch_mnist.sh first"

using ddl::testing::parse_rank_log;
using ddl::testing::RankLog;

// Runs `launch --nproc_per_node=2 --log_dir <dir> train_mnist <args>`; returns each rank's log.
std::vector<RankLog> launch_two(const TempDir& tmp, const std::string& name,
                                const std::vector<std::string>& trainer_args) {
  const std::string log_dir = tmp.file(name + "_logs");
  std::vector<std::string> args = {kBin + "/launch", "--nproc_per_node=2", "--log_dir", log_dir,
                                   kBin + "/train_mnist"};
  args.insert(args.end(), trainer_args.begin(), trainer_args.end());
  const RunResult r = run(args, tmp.file(name + "_launch.out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<RankLog> logs;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = log_dir + "/workerlog." + std::to_string(rank);
    EXPECT_TRUE(fs::exists(path)) << path << "\nlauncher output:\n" << r.output;
    const std::string text = read_file(path);
    logs.push_back(parse_rank_log(text));
    EXPECT_EQ(logs.back().summaries.size(), 1u) << path << ":\n" << text;
    // A normal run prints no third-party warning (LibTorch's gradient layout warning came with
    // glog's "Logging before InitGoogleLogging()").
    for (const char* noise : {"Warning:", "InitGoogleLogging", "W20"}) {
      EXPECT_EQ(text.find(noise), std::string::npos) << noise << " in " << path << ":\n" << text;
    }
  }
  return logs;
}

std::vector<std::string> short_run(const std::string& save, int max_steps) {
  return {"--max_steps",    std::to_string(max_steps),
          "--log_interval", "10",
          "--optimizer",    "momentum",
          "--threads",      "1",
          "--save",         save,
          "--data_dir",     kData,
          "--seed",         "7"};
}

TEST(TrainMnistE2E, TwoRanksUnderLaunchAgreeOnParametersAndLossFalls) {
  SKIP_WITHOUT_DATA();
  TempDir tmp;
  const auto logs = launch_two(tmp, "run", short_run(tmp.file("mnist"), 60));
  ASSERT_EQ(logs.size(), 2u);
  ASSERT_EQ(logs[0].summaries.size(), 1u);
  ASSERT_EQ(logs[1].summaries.size(), 1u);
  const json& a = logs[0].summaries[0];
  const json& b = logs[1].summaries[0];
  EXPECT_EQ(a["rank"], 0);
  EXPECT_EQ(b["rank"], 1);
  for (const json* s : {&a, &b}) {
    EXPECT_EQ((*s)["world"], 2);
    EXPECT_EQ((*s)["steps"], 60);
    EXPECT_GT((*s)["images_per_sec"].get<double>(), 0.0);
    EXPECT_GT((*s)["train_seconds"].get<double>(), 0.0);
  }
  EXPECT_EQ(a["param_checksum"], b["param_checksum"]);
  EXPECT_EQ(a["param_sum"], b["param_sum"]);
  EXPECT_EQ(a["test_accuracy"], b["test_accuracy"]);
  EXPECT_GT(a["test_accuracy"].get<double>(), 0.5);  // 60 momentum steps: well past chance

  for (const RankLog& log : logs) {
    ASSERT_EQ(log.losses.size(), 6u);  // batches 0, 10, ..., 50
    const double first = log.losses.front();
    const double last = (log.losses[4] + log.losses[5]) / 2;
    EXPECT_LT(last, first * 0.6) << "loss did not fall: " << first << " -> " << last;
    EXPECT_EQ(log.accuracy_lines, 1);
  }
  EXPECT_TRUE(fs::exists(tmp.file("mnist.pt")));
  EXPECT_FALSE(fs::exists(tmp.file("mnist.pt.tmp")));
}

TEST(TrainMnistE2E, ResumeAfterACheckpointMatchesAnUninterruptedRun) {
  SKIP_WITHOUT_DATA();
  TempDir tmp;
  // 40 steps in one go, versus 20 steps, a checkpoint, and 20 more after --resume.
  const auto whole = launch_two(tmp, "whole", short_run(tmp.file("whole"), 40));
  const auto first = launch_two(tmp, "first", short_run(tmp.file("split"), 20));
  ASSERT_TRUE(fs::exists(tmp.file("split.pt")));
  auto resumed_args = short_run(tmp.file("split"), 40);
  resumed_args.push_back("--resume");
  const auto second = launch_two(tmp, "second", resumed_args);
  for (const auto* logs : {&whole, &first, &second}) {
    ASSERT_EQ(logs->size(), 2u);
    for (const RankLog& r : *logs) ASSERT_EQ(r.summaries.size(), 1u);
  }
  for (int rank = 0; rank < 2; ++rank) {
    const json& w = whole[rank].summaries[0];
    const json& f = first[rank].summaries[0];
    const json& s = second[rank].summaries[0];
    EXPECT_EQ(f["resumed"], false);
    EXPECT_EQ(s["resumed"], true);
    EXPECT_EQ(s["steps"], 20);
    EXPECT_EQ(s["global_step"], 40);
    // Same seed, same data order, same thread count: the resumed run lands on the same weights.
    EXPECT_EQ(s["param_checksum"], w["param_checksum"]) << "rank " << rank;
    EXPECT_EQ(s["test_accuracy"], w["test_accuracy"]) << "rank " << rank;
    EXPECT_NE(f["param_checksum"], w["param_checksum"]);
  }
  EXPECT_EQ(second[0].summaries[0]["param_checksum"], second[1].summaries[0]["param_checksum"]);
}

TEST(TrainMnistE2E, StandaloneRunIsAWorldOfOne) {
  SKIP_WITHOUT_DATA();
  TempDir tmp;
  const RunResult r = run({kBin + "/train_mnist", "--max_steps", "3", "--log_interval", "1",
                           "--threads", "1", "--save", "", "--data", kData},
                          tmp.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const RankLog log = parse_rank_log(r.output);
  ASSERT_EQ(log.summaries.size(), 1u) << r.output;
  EXPECT_EQ(log.summaries[0]["rank"], 0);
  EXPECT_EQ(log.summaries[0]["world"], 1);
  EXPECT_EQ(log.summaries[0]["steps"], 3);
  EXPECT_EQ(log.losses.size(), 3u);
}

// Which BLAS multiplies is this machine's choice (the libblas.so.3 alternative): the trainer says
// which, once, and warns when it is the reference BLAS. scripts/setup.sh installs OpenBLAS, which
// takes the alternative over, and keeps Debian's reference libblas3 beside it, chosen here
// through LD_LIBRARY_PATH.
TEST(TrainMnistE2E, SaysWhichBlasItRunsOnAndWarnsOfTheReferenceOne) {
  SKIP_WITHOUT_DATA();
  TempDir tmp;
  const std::vector<std::string> trainer = {
      kBin + "/train_mnist", "--max_steps", "2", "--save", "", "--data", kData};
  const RunResult optimised = run(trainer, tmp.file("openblas"));
  ASSERT_EQ(optimised.exit_code, 0) << optimised.output;
  EXPECT_TRUE(contains(optimised.output, "rank 0: BLAS: OpenBLAS ")) << optimised.output;
  EXPECT_TRUE(contains(optimised.output, " kernels, ")) << optimised.output;
  EXPECT_TRUE(contains(optimised.output, "; CPU: ")) << optimised.output;
  EXPECT_FALSE(contains(optimised.output, "reference BLAS")) << optimised.output;

  const std::string netlib = "/usr/lib/x86_64-linux-gnu/blas";
  std::vector<std::string> with_netlib = {"/usr/bin/env", "LD_LIBRARY_PATH=" + netlib};
  with_netlib.insert(with_netlib.end(), trainer.begin(), trainer.end());
  const RunResult reference = run(with_netlib, tmp.file("netlib"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_TRUE(contains(reference.output, "rank 0: BLAS: the reference BLAS (netlib) (" + netlib))
      << reference.output;
  EXPECT_TRUE(contains(reference.output,
                       "[warning] [vm rank 0] rank 0: the matrix products run on the reference "
                       "BLAS"))
      << reference.output;
}

// The course's command on a machine whose LibTorch sees no GPU: each rank trains on the CPU and
// says so once (and when a GPU is used, says nothing of the kind).
TEST(TrainMnistE2E, SelectedGpusWithoutCudaSayTheyTrainOnTheCpu) {
  SKIP_WITHOUT_DATA();
  TempDir tmp;
  const std::string log_dir = tmp.file("logs");
  const RunResult r = run({kBin + "/launch", "--selected_gpus=0,1", "--log_dir", log_dir,
                           kBin + "/train_mnist", "--max_steps", "2", "--threads", "1", "--save",
                           "", "--data_dir", kData},
                          tmp.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string text = read_file(log_dir + "/workerlog." + std::to_string(rank));
    const RankLog log = parse_rank_log(text);
    ASSERT_EQ(log.summaries.size(), 1u) << text;
    const std::string device = log.summaries[0]["device"];
    const std::string warning = "GPU " + std::to_string(rank) +
                                " selected (FLAGS_selected_gpus) but CUDA is not available";
    std::size_t seen = 0;
    for (auto at = text.find(warning); at != std::string::npos; at = text.find(warning, at + 1)) {
      ++seen;
    }
    EXPECT_EQ(seen, device == "cpu" ? 1u : 0u) << "device " << device << ":\n" << text;
  }
}

TEST(TrainMnistE2E, BadDataIsOneLineAndExitCodeThree) {
  TempDir tmp;
  const RunResult r =
      run({kBin + "/train_mnist", "--data", tmp.file("nope"), "--save", ""}, tmp.file("out"));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("train_mnist: error: MNIST data error (missing file)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(tmp.file("nope")), std::string::npos) << r.output;

  // A truncated IDX folder.
  fs::create_directory(tmp.file("cut"));
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    std::ofstream(tmp.file(std::string("cut/") + name)) << "short";
  }
  const RunResult cut =
      run({kBin + "/train_mnist", "--data_dir", tmp.file("cut"), "--save", ""}, tmp.file("out2"));
  EXPECT_EQ(cut.exit_code, 3) << cut.output;
}

TEST(TrainMnistE2E, BadOptionsExitTwo) {
  TempDir tmp;
  const RunResult bad = run({kBin + "/train_mnist", "--optimizer", "lbfgs"}, tmp.file("out"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("lbfgs"), std::string::npos) << bad.output;
  const RunResult resume = run({kBin + "/train_mnist", "--resume", "--save", ""}, tmp.file("out2"));
  EXPECT_EQ(resume.exit_code, 2) << resume.output;
  if (!fs::exists("/proc/driver/nvidia")) {
    const RunResult gpu = run({kBin + "/train_mnist", "--device", "gpu"}, tmp.file("out3"));
    EXPECT_EQ(gpu.exit_code, 2) << gpu.output;
    EXPECT_NE(gpu.output.find("CUDA is not available"), std::string::npos) << gpu.output;
  }
}

TEST(TrainMnistE2E, ResumeWithoutACheckpointIsACheckpointError) {
  SKIP_WITHOUT_DATA();
  TempDir tmp;
  const RunResult r =
      run({kBin + "/train_mnist", "--resume", "--save", tmp.file("none"), "--data", kData},
          tmp.file("out"));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find(tmp.file("none.pt")), std::string::npos) << r.output;
}

}  // namespace
