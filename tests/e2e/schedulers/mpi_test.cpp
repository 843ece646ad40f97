// Open MPI's real mpirun (Debian openmpi-bin) on this machine, as Horovod users run jobs:
//   - `mpirun -np 2 train_mnist` (no `launch`): the workers read OMPI_COMM_WORLD_* and train one
//     2-rank job whose parameters end bitwise equal to `launch --nproc_per_node=2 train_mnist`;
//   - `mpirun -np 2 launch --nproc_per_node=2 hello_worker`: one launcher per "node" (mpirun
//     process), one 4-rank job;
//   - a rank that fails under mpirun ends the whole job fast, with its code in mpirun's report.
// Skipped (with the reason) when mpirun is not installed; training tests skip without MNIST.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/support/train_log.h"

namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ddl::testing::contains;
using ddl::testing::read_file;
using ddl::testing::TempDir;

const std::string kBin = DDL_BIN_DIR;
const std::string kMpirun = "/usr/bin/mpirun";
const std::string kData = ddl::testing::mnist_data_dir();

struct Result {
  std::optional<int> code;
  std::string out;  // stdout and stderr together
  double seconds = 0;
};

// The test's environment without anything of an enclosing launcher, scheduler or MPI job.
std::map<std::string, std::string> clean_env(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    for (const char* prefix : {"OMPI_", "PMIX_", "SLURM_", "PADDLE_", "PET_", "DDL_"}) {
      if (k.rfind(prefix, 0) == 0) goto skip;
    }
    if (k == "MASTER_ADDR" || k == "MASTER_PORT" || k == "RANK" || k == "WORLD_SIZE" ||
        k == "LOCAL_RANK" || k == "OMP_NUM_THREADS") {
      continue;
    }
    env[k] = kv.substr(eq + 1);
  skip:;
  }
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

Result run(const std::vector<std::string>& argv, milliseconds timeout,
           const std::map<std::string, std::string>& extra_env = {}) {
  TempDir io("ddl_mpi_io");
  ddl::testing::SpawnOptions o;
  o.argv = argv;
  o.env = clean_env(extra_env);
  o.stdout_path = io.path() / "out";
  o.own_process_group = true;
  const auto start = std::chrono::steady_clock::now();
  ddl::testing::ChildProcess child(o);
  Result r;
  r.code = child.wait(timeout);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.out = read_file(io.path() / "out");
  return r;
}

std::string describe(const Result& r) {
  return "exit " + (r.code ? std::to_string(*r.code) : std::string("none (timed out)")) +
         " after " + std::to_string(r.seconds) + " s\n--- output:\n" + r.out;
}

// mpirun as root on one machine with more ranks than cores, every rank's line tagged "[1,R]".
std::vector<std::string> mpirun(int np, const std::vector<std::string>& program) {
  std::vector<std::string> argv{kMpirun,      "--allow-run-as-root", "--oversubscribe",
                                "--tag-output", "--bind-to",         "none",
                                "-np",        std::to_string(np)};
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

// The lines mpirun tagged as rank `rank`'s stdout, without the tag.
std::string rank_output(const std::string& out, int rank) {
  std::istringstream in(out);
  std::string text;
  const std::regex tag("^\\[\\d+," + std::to_string(rank) + "\\]<std(out|err)>: ?");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, tag)) text += m.suffix().str() + "\n";
  }
  return text;
}

std::vector<std::string> train_args(int steps) {
  return {kBin + "/train_mnist", "--data_dir", kData,  "--max_steps", std::to_string(steps),
          "--epochs",            "1",          "--save", "",          "--threads",
          "1",                   "--log_interval", "10"};
}

class Mpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kMpirun)) {
      GTEST_SKIP() << kMpirun << " is missing (Debian package openmpi-bin; scripts/setup.sh)";
    }
  }
};

#define SKIP_WITHOUT_DATA()                     \
  if (!ddl::testing::have_mnist_data())         \
  GTEST_SKIP() << kData << " is missing: run scripts/fetch_mnist.sh (or scripts/setup.sh)"

TEST_F(Mpirun, TrainsTheSameJobAsLaunch) {
  SKIP_WITHOUT_DATA();
  const int port = ddl::testing::free_port_block_above_ephemeral();
  const Result m = run(mpirun(2, train_args(20)), milliseconds(180'000),
                       {{"MASTER_PORT", std::to_string(port)}});
  ASSERT_EQ(m.code, 0) << describe(m);
  std::vector<std::string> sums;
  for (int rank = 0; rank < 2; ++rank) {
    const auto log = ddl::testing::parse_rank_log(rank_output(m.out, rank));
    ASSERT_EQ(log.summaries.size(), 1u) << "rank " << rank << "\n" << describe(m);
    EXPECT_EQ(log.summaries[0]["world"], 2) << describe(m);
    EXPECT_EQ(log.summaries[0]["rank"], rank);
    EXPECT_EQ(log.summaries[0]["steps"], 20);
    sums.push_back(log.summaries[0]["param_checksum"].get<std::string>());
  }
  EXPECT_EQ(sums[0], sums[1]) << "the ranks' parameters differ";
  EXPECT_TRUE(contains(rank_output(m.out, 1), "rank 1 of 2")) << describe(m);

  TempDir dir("ddl_mpi");
  std::vector<std::string> l{kBin + "/launch", "--nproc_per_node=2", "--print_config=false",
                             "--log_dir", dir.str()};
  const auto args = train_args(20);
  l.insert(l.end(), args.begin(), args.end());
  const Result launched = run(l, milliseconds(180'000));
  ASSERT_EQ(launched.code, 0) << describe(launched);
  const auto log = ddl::testing::parse_rank_log(read_file(dir.path() / "workerlog.0"));
  ASSERT_EQ(log.summaries.size(), 1u) << read_file(dir.path() / "workerlog.0");
  EXPECT_EQ(log.summaries[0]["param_checksum"].get<std::string>(), sums[0])
      << "mpirun's job and launch's job end with different parameters";
}

TEST_F(Mpirun, OneLauncherPerProcessFormsOneJob) {
  TempDir dir("ddl_mpi");
  const int port = ddl::testing::free_port_block_above_ephemeral();
  const Result m = run(mpirun(2, {kBin + "/launch", "--nproc_per_node=2", "--print_config=false",
                                  "--log_dir", dir.str(), "--rendezvous_timeout=60",
                                  kBin + "/hello_worker"}),
                       milliseconds(120'000),
                       {{"MASTER_PORT", std::to_string(port)}, {"DDL_JOB_SECRET", "mpi-test"}});
  ASSERT_EQ(m.code, 0) << describe(m);
  EXPECT_TRUE(contains(rank_output(m.out, 0), "node 0 of 2 (Open MPI (OMPI_COMM_WORLD_SIZE=2"))
      << describe(m);
  EXPECT_TRUE(contains(rank_output(m.out, 1), "starting 2 worker(s) (ranks 2..3)")) << describe(m);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string log = read_file(dir.path() / ("workerlog." + std::to_string(rank)));
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(rank) + " of 4")) << log;
  }
}

TEST_F(Mpirun, FailingRankEndsTheJobWithItsCode) {
  SKIP_WITHOUT_DATA();
  const Result m =
      run(mpirun(2, train_args(1000)), milliseconds(120'000),
          {{"MASTER_PORT", std::to_string(ddl::testing::free_port_block_above_ephemeral())},
           {"DDL_FAULT", "rank=1,step=5,exit=3"}});
  ASSERT_TRUE(m.code.has_value()) << describe(m);
  EXPECT_EQ(*m.code, 3) << "mpirun exits with the first failed process's code\n" << describe(m);
  EXPECT_LT(m.seconds, 60) << "the surviving rank must not wait out its collective timeout";
  EXPECT_TRUE(contains(rank_output(m.out, 1), "fault injection: rank 1 exits with code 3 at step 5"))
      << describe(m);
  // mpirun names the process that failed first, and its code.
  EXPECT_TRUE(std::regex_search(m.out, std::regex(R"(Process name: \[\[\d+,1\],1\]\s+Exit code: +3)")))
      << describe(m);
}

TEST_F(Mpirun, AcrossNodesWithoutMasterAddrIsAClearError) {
  // Two "nodes" of one rank each (Open MPI's local size 1): the store's host cannot be guessed.
  const Result m = run(train_args(1), milliseconds(30'000),
                       {{"OMPI_COMM_WORLD_RANK", "1"},
                        {"OMPI_COMM_WORLD_SIZE", "2"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  ASSERT_TRUE(m.code.has_value()) << describe(m);
  EXPECT_NE(*m.code, 0);
  EXPECT_TRUE(contains(m.out, "MASTER_ADDR is not set")) << describe(m);
}

}  // namespace
