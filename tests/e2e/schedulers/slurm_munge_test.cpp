// `srun -N2 launch ...` on the two-node Slurm cluster of scripts/slurm_cluster.sh WITHOUT
// DDL_JOB_SECRET: the launchers admit each other with credentials of the cluster's
// munged (found through slurm.conf's AuthInfo, as srun passes SLURM_CONF), every worker of both
// nodes gets node 0's secret, and a client presenting a credential for another job, or a plain
// secret, is refused by node 0's control store while the job runs. Torch-free (hello_worker), so
// it is built without LibTorch too. Skipped without root, Slurm or munge; a cluster already
// running is used and left running, one this suite started is stopped at its end. Shares the
// cluster (fixed ports, /tmp/ddl-slurm) with slurm_test: both hold the ddl_slurm_cluster lock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/coord/munge_auth.h"
#include "store/tcp_store.h"
#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ddl::testing::contains;
using ddl::testing::read_file;
using ddl::testing::TempDir;

const std::string kBin = DDL_BIN_DIR;
const std::string kLaunch = kBin + "/launch";
const std::string kHello = kBin + "/hello_worker";
const std::string kScript = std::string(DDL_SOURCE_DIR) + "/scripts/slurm_cluster.sh";

std::string state_dir() {
  const char* d = std::getenv("DDL_SLURM_DIR");
  return d && *d ? d : "/tmp/ddl-slurm";
}

// `name` in PATH or the sbin folders (ctest's PATH may lack them); empty if absent.
std::string find_program(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::istringstream in(path);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (!dir.empty() && ::access((fs::path(dir) / name).c_str(), X_OK) == 0) {
      return (fs::path(dir) / name).string();
    }
  }
  return "";
}

// The test's environment without anything of an enclosing allocation, a job secret or identity,
// plus the cluster's SLURM_CONF.
std::map<std::string, std::string> command_env() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (k.rfind("SLURM_", 0) == 0 || k.rfind("SRUN_", 0) == 0 || k.rfind("DDL_", 0) == 0) continue;
    env[k] = kv.substr(eq + 1);
  }
  env["SLURM_CONF"] = state_dir() + "/slurm.conf";
  env["DDL_SLURM_DIR"] = state_dir();
  return env;
}

// Starts `argv` (argv[0] looked up) with its output in `dir`.
ddl::testing::SpawnOptions spawn(const std::vector<std::string>& argv, const TempDir& dir) {
  ddl::testing::SpawnOptions o;
  o.argv = argv;
  if (const std::string exe = find_program(argv.at(0)); !exe.empty()) o.argv[0] = exe;
  o.env = command_env();
  o.stdout_path = dir.path() / "out";
  o.stderr_path = dir.path() / "err";
  return o;
}

std::string run_script(const std::string& verb, int& code) {
  TempDir io("ddl_slurm_io");
  ddl::testing::ChildProcess child(spawn({"/bin/bash", kScript, verb}, io));
  code = child.wait(milliseconds(120'000)).value_or(-1);
  return child.out() + child.err();
}

// The lines of srun --label output that task `task` printed.
std::string task_lines(const std::string& text, int task) {
  std::istringstream in(text);
  std::string out;
  const std::string prefix = std::to_string(task) + ": ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out += line.substr(prefix.size()) + "\n";
  }
  return out;
}

class SlurmMunge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      skip_reason_ = "not root: the local Slurm cluster (scripts/slurm_cluster.sh) needs root";
      return;
    }
    for (const char* tool : {"slurmctld", "slurmd", "srun", "sinfo", "munged", "munge"}) {
      if (find_program(tool).empty()) {
        skip_reason_ = std::string("'") + tool + "' not found (Debian: slurmctld slurmd " +
                       "slurm-client munge)";
        return;
      }
    }
    int code = 0;
    run_script("status", code);
    was_running_ = code == 0;
    const std::string out = run_script("start", code);
    if (code != 0) start_error_ = "scripts/slurm_cluster.sh start failed: " + out;
  }
  static void TearDownTestSuite() {
    if (!skip_reason_.empty() || was_running_) return;
    int code = 0;
    const std::string out = run_script("stop", code);
    if (code != 0) ADD_FAILURE() << "scripts/slurm_cluster.sh stop failed: " << out;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }

  static inline std::string skip_reason_, start_error_;
  static inline bool was_running_ = false;
};

// The StoreError of connecting to node 0's control store presenting `credential()`; "" if admitted.
std::string refusal_of(int port, std::function<std::string()> credential) {
  ddl::TcpStoreOptions o;
  o.endpoint = ddl::env::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)};
  o.job_id = "ddl-control";
  o.rank = 1;
  o.credential = std::move(credential);
  o.connect_timeout = milliseconds(5'000);
  o.io_timeout = milliseconds(5'000);
  try {
    ddl::TcpStore client(o);
  } catch (const ddl::StoreError& e) {
    return e.what();
  }
  return "";
}

TEST_F(SlurmMunge, SrunTwoNodesWithoutSecretAuthenticatedByMunge) {
  TempDir dir("ddl_slurm_munge");
  const fs::path logs = dir.path() / "logs";
  const int port = ddl::testing::free_port_block_above_ephemeral();
  // The workers stay up a few seconds: long enough for the intruders below.
  ddl::testing::ChildProcess srun(spawn(
      {"srun", "-N2", "--ntasks-per-node=1", "--label", kLaunch, "--nproc_per_node=2",
       "--master_port=" + std::to_string(port), "--log_dir", logs.string(),
       "--print_config=false", "--rendezvous_timeout=30", kHello, "--show_env", "DDL_JOB_SECRET",
       "--show_env", "SLURM_JOB_ID", "--sleep_ms", "3000"},
      dir));
  ASSERT_TRUE(ddl::testing::wait_until(
      [&] { return contains(srun.err(), "admit each other with munge credentials"); },
      milliseconds(30'000)))
      << srun.err();
  std::smatch m;
  const std::string err = srun.err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(launchers of Slurm job (\d+) admit)")))
      << err;
  const std::string job = m[1];

  // While the job runs: a credential of the cluster's munge for another job, and a plain secret.
  const ddl::launcher::MungeClient munge({state_dir() + "/munge/munge.socket", "test"});
  const ddl::launcher::MungeAdmission other(munge, "slurm job 999999, control store 'ddl-control'");
  std::string why = refusal_of(port, [&] { return other.credential(1); });
  EXPECT_TRUE(contains(why, "munge credential for another job or node refused")) << why;
  why = refusal_of(port, [] { return std::string("guessed-secret"); });
  EXPECT_TRUE(contains(why, "munge credential refused")) << why;

  ASSERT_EQ(srun.wait(milliseconds(60'000)), 0) << srun.out() << srun.err();
  const std::string all = srun.err();
  for (int task = 0; task < 2; ++task) {
    const std::string lines = task_lines(all, task);
    EXPECT_TRUE(contains(lines, "(from AuthInfo in " + state_dir() + "/slurm.conf)")) << lines;
    EXPECT_TRUE(contains(lines, "all 2 node(s) agree; world size 4")) << lines;
  }
  std::set<std::string> secrets;
  const std::regex secret_line(R"(ENV DDL_JOB_SECRET=(\S+))");
  for (int rank = 0; rank < 4; ++rank) {
    const std::string log = read_file(logs / ("workerlog." + std::to_string(rank)));
    SCOPED_TRACE("workerlog." + std::to_string(rank) + ":\n" + log);
    EXPECT_TRUE(contains(log, "ENV SLURM_JOB_ID=" + job + "\n"));
    ASSERT_TRUE(std::regex_search(log, m, secret_line));
    EXPECT_GE(m[1].length(), 32);
    secrets.insert(m[1]);
  }
  EXPECT_EQ(secrets.size(), 1u) << "both nodes' workers got the same secret";
}

}  // namespace
