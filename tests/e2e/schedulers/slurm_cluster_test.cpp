// `launch` under a real Slurm: the suite brings up the two-node cluster of
// scripts/slurm_cluster.sh (slurmctld + `slurmd -N n1` on 127.0.0.1 + `slurmd -N n2` on
// 127.0.0.2, all on this machine) and runs jobs through srun, sbatch and scancel:
//   - srun of one `launch` per node forms ONE 4-rank job (endpoints name n1 and n2; train_mnist
//     ends with one parameter checksum on every rank);
//   - a batch script succeeds (job COMPLETED, ExitCode 0:0, per-rank logs) and a failing one
//     carries the worker's exit code into the job (sbatch --wait's status, scontrol's ExitCode);
//   - scancel of a running job leaves no launcher or worker of it on either node;
//   - a worker failing on n2 fails the job with its code, and launch names rank 3 and node 1;
//   - `srun -N2 -n4 train_mnist` (no launch: one Slurm task per rank) trains the same job.
// Skipped (with the reason) when not root or Slurm/munge are not installed; training tests are
// skipped when the MNIST data is missing. A cluster that was already running before the suite
// is left running; one the suite started is stopped at its end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/poll.h"
#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace {

namespace fs = std::filesystem;
using ddl::testing::contains;
using ddl::testing::free_port_block_above_ephemeral;
using ddl::testing::read_file;
using ddl::testing::TempDir;
using ddl::testing::wait_until;
using std::chrono::milliseconds;

const std::string kBin = DDL_BIN_DIR;
const std::string kSource = DDL_SOURCE_DIR;
const std::string kLaunch = kBin + "/launch";
const std::string kTrain = kBin + "/train_mnist";
const std::string kHello = kBin + "/hello_worker";
const std::string kData = kSource + "/data/mnist";
const std::string kScript = kSource + "/scripts/slurm_cluster.sh";
constexpr const char* kSecret = "slurm-suite-secret";

std::string state_dir() {
  const char* d = std::getenv("DDL_SLURM_DIR");
  return d && *d ? d : "/tmp/ddl-slurm";
}

// `name` looked up in PATH and the sbin folders (ctest's PATH may lack them); empty if absent.
std::string find_program(const std::string& name) {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  path += ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  std::istringstream in(path);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    const fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// The environment every Slurm command of the suite gets: the test's own, without anything of an
// enclosing allocation or of the caller's job settings, plus this cluster's SLURM_CONF, the job
// secret and whatever the test adds.
std::map<std::string, std::string> command_env(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    if (k.rfind("SLURM_", 0) == 0 || k.rfind("SBATCH_", 0) == 0 || k.rfind("SRUN_", 0) == 0 ||
        k.rfind("SALLOC_", 0) == 0 || k.rfind("DDL_", 0) == 0 || k == "OMP_NUM_THREADS") {
      continue;
    }
    env[k] = kv.substr(eq + 1);
  }
  env["SLURM_CONF"] = state_dir() + "/slurm.conf";
  env["DDL_JOB_SECRET"] = kSecret;
  env["DDL_SLURM_DIR"] = state_dir();
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

struct Result {
  std::optional<int> code;  // nullopt: still running at the deadline (then killed)
  std::string out, err;
};

// Runs `argv` (argv[0] a program name, looked up) to its end or `timeout`, output captured.
Result run(const std::vector<std::string>& argv, milliseconds timeout,
           const std::map<std::string, std::string>& extra_env = {}) {
  TempDir io("ddl_slurm_io");
  ddl::testing::SpawnOptions o;
  o.argv = argv;
  const std::string exe = find_program(argv.at(0));
  if (!exe.empty()) o.argv[0] = exe;
  o.env = command_env(extra_env);
  o.stdout_path = io.path() / "out";
  o.stderr_path = io.path() / "err";
  ddl::testing::ChildProcess child(o);
  Result r;
  r.code = child.wait(timeout);
  r.out = child.out();
  r.err = child.err();
  return r;
}

std::string describe(const Result& r) {
  return "exit " + (r.code ? std::to_string(*r.code) : std::string("none (timed out)")) +
         "\n--- stdout:\n" + r.out + "\n--- stderr:\n" + r.err;
}

// `scontrol show job -o ID` as KEY -> value (empty when Slurm does not know the job).
std::map<std::string, std::string> job_info(const std::string& id) {
  const Result r = run({"scontrol", "show", "job", "-o", id}, milliseconds(15'000));
  std::map<std::string, std::string> info;
  std::istringstream in(r.out);
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq != std::string::npos) info[field.substr(0, eq)] = field.substr(eq + 1);
  }
  return info;
}

bool finished(const std::string& state) {
  static const std::set<std::string> done{"COMPLETED", "FAILED",    "CANCELLED",
                                          "TIMEOUT",   "NODE_FAIL", "OUT_OF_MEMORY",
                                          "BOOT_FAIL", "DEADLINE",  "PREEMPTED"};
  return done.count(state) > 0;
}

// Polls until job `id` has ended; its final scontrol record (empty map at the deadline).
std::map<std::string, std::string> wait_for_job(const std::string& id, milliseconds timeout) {
  std::map<std::string, std::string> info;
  const bool done = wait_until(
      [&] {
        info = job_info(id);
        return finished(info["JobState"]);
      },
      timeout, milliseconds(200));
  return done ? info : std::map<std::string, std::string>{};
}

struct JobProcess {
  pid_t pid;
  std::string comm;  // /proc/PID/comm
  std::string node;  // SLURMD_NODENAME in its environment
};

// Every live process whose environment says it belongs to Slurm job `id` (srun puts
// SLURM_JOB_ID in each task's environment; the launcher's workers inherit it). Both nodes run on
// this machine, so one /proc scan covers both.
std::vector<JobProcess> job_processes(const std::string& id) {
  std::vector<JobProcess> found;
  const std::string want = "SLURM_JOB_ID=" + id;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid() || !ddl::testing::alive(pid)) continue;
    std::ifstream env(entry.path() / "environ", std::ios::binary);
    bool mine = false;
    std::string node;
    for (std::string var; std::getline(env, var, '\0');) {
      if (var == want) mine = true;
      if (var.rfind("SLURMD_NODENAME=", 0) == 0) node = var.substr(16);
    }
    if (!mine) continue;
    std::string comm = read_file(entry.path() / "comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    found.push_back({pid, comm, node});
  }
  return found;
}

std::string list(const std::vector<JobProcess>& ps) {
  std::string s;
  for (const auto& p : ps) s += " " + p.comm + "[" + std::to_string(p.pid) + "@" + p.node + "]";
  return s.empty() ? " none" : s;
}

// The value of "key":"..." or "key":N in rank `rank`'s last JSON summary line.
std::string summary_field(const fs::path& logs, int rank, const std::string& key) {
  std::istringstream in(read_file(logs / ("workerlog." + std::to_string(rank))));
  const std::regex re("\"" + key + "\":\"?([^\",}]*)");
  std::string value;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!line.empty() && line[0] == '{' && std::regex_search(line, m, re)) value = m[1];
  }
  return value;
}

std::string worker_log(const fs::path& logs, int rank) {
  return read_file(logs / ("workerlog." + std::to_string(rank)));
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

std::string job_id_in(const std::string& launch_err) {
  std::smatch m;
  return std::regex_search(launch_err, m, std::regex(R"(\(Slurm job (\d+) \()")) ? m[1].str() : "";
}

// `launch` with one node's worth of flags (the node layout comes from Slurm) and a short
// train_mnist, as the multi-node fault tests run it.
std::vector<std::string> launch_train(const fs::path& logs, int port, int steps) {
  return {kLaunch,
          "--nproc_per_node=2",
          "--master_port=" + std::to_string(port),
          "--log_dir",
          logs.string(),
          "--print_config=false",
          "--rendezvous_timeout=60",
          "--kill_timeout=5",
          kTrain,
          "--data_dir",
          kData,
          "--max_steps",
          std::to_string(steps),
          "--epochs",
          "1",
          "--log_interval",
          "10",
          "--save",
          "",
          "--threads",
          "1"};
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A batch script for two nodes running `launch_args` through srun.
fs::path write_batch_script(const TempDir& dir, const std::vector<std::string>& launch_args) {
  const fs::path script = dir.path() / "job.sh";
  std::ofstream out(script);
  out << "#!/bin/bash\n"
      << "#SBATCH --job-name=ddl-slurm-test\n"
      << "#SBATCH --nodes=2\n"
      << "#SBATCH --ntasks-per-node=1\n"
      << "#SBATCH --time=5\n"
      << "#SBATCH --output=" << (dir.path() / "slurm-%j.out").string() << "\n"
      << "echo \"batch script on $(hostname) for job $SLURM_JOB_ID, nodes $SLURM_JOB_NODELIST\"\n"
      << "srun --label";
  for (const auto& a : launch_args) out << " " << shell_quote(a);
  out << "\n";
  out.close();
  fs::permissions(script, fs::perms::owner_all, fs::perm_options::add);
  return script;
}

#define SKIP_WITHOUT_DATA()                                 \
  if (!fs::exists(kData + "/train-images-idx3-ubyte"))      \
  GTEST_SKIP() << kData << " is missing: run scripts/fetch_mnist.sh (or scripts/setup.sh)"

class SlurmCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_.clear();
    start_error_.clear();
    if (::geteuid() != 0) {
      skip_reason_ = "not root: the local Slurm cluster (scripts/slurm_cluster.sh) needs root";
      return;
    }
    for (const char* tool : {"slurmctld", "slurmd", "slurmstepd", "srun", "sbatch", "scancel",
                             "scontrol", "sinfo", "squeue", "munged", "munge"}) {
      if (find_program(tool).empty()) {
        skip_reason_ = std::string("Slurm is not installed: '") + tool +
                       "' not found (Debian packages: slurmctld slurmd slurm-client munge)";
        return;
      }
    }
    const Result status = run({"/bin/bash", kScript, "status"}, milliseconds(30'000));
    was_running_ = status.code && *status.code == 0;
    const Result start = run({"/bin/bash", kScript, "start"}, milliseconds(120'000));
    if (!start.code || *start.code != 0) {
      start_error_ = "scripts/slurm_cluster.sh start failed: " + describe(start);
    }
  }

  static void TearDownTestSuite() {
    if (!skip_reason_.empty() || was_running_) return;
    const Result stop = run({"/bin/bash", kScript, "stop"}, milliseconds(120'000));
    if (!stop.code || *stop.code != 0) {
      ADD_FAILURE() << "scripts/slurm_cluster.sh stop failed: " << describe(stop);
    }
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(start_error_.empty()) << start_error_;
  }

  void TearDown() override {
    // A failed test must not leave its job behind for the next one.
    for (const auto& id : jobs_) {
      if (!finished(job_info(id)["JobState"])) {
        run({"scancel", "--full", id}, milliseconds(15'000));
        wait_for_job(id, milliseconds(20'000));
      }
      EXPECT_TRUE(wait_until([&] { return job_processes(id).empty(); }, milliseconds(15'000)))
          << "processes of job " << id << " left:" << list(job_processes(id));
    }
  }

  std::vector<std::string> jobs_;  // Slurm jobs this test made, checked (and cancelled) at the end

  static inline std::string skip_reason_;
  static inline std::string start_error_;
  static inline bool was_running_ = false;
};

// The allocation srun makes is seen by every task as Slurm documents it.
TEST_F(SlurmCluster, SrunSeesTwoNodes) {
  const Result r = run({"srun", "-N2", "--ntasks-per-node=1", "--label", "/usr/bin/env"},
                       milliseconds(30'000));
  ASSERT_EQ(r.code, 0) << describe(r);
  for (int task = 0; task < 2; ++task) {
    const std::string lines = task_lines(r.out, task);
    EXPECT_TRUE(contains(lines, "SLURM_NODEID=" + std::to_string(task) + "\n")) << lines;
    EXPECT_TRUE(contains(lines, "SLURMD_NODENAME=n" + std::to_string(task + 1) + "\n")) << lines;
    EXPECT_TRUE(contains(lines, "SLURM_JOB_NODELIST=n[1-2]\n")) << lines;
    EXPECT_TRUE(contains(lines, "SLURM_NNODES=2\n")) << lines;
  }
}

// One launch per node: the endpoints every worker sees name the Slurm nodes n1 and n2, node-major.
TEST_F(SlurmCluster, SrunLaunchGivesEveryRankTheNodeNames) {
  TempDir dir("ddl_slurm");
  const fs::path logs = dir.path() / "logs";
  const Result r =
      run({"srun", "-N2", "--ntasks-per-node=1", "--label", kLaunch, "--nproc_per_node=2",
           "--master_port=" + std::to_string(free_port_block_above_ephemeral()), "--log_dir",
           logs.string(), "--print_config=false", "--rendezvous_timeout=30", kHello, "--show_env",
           "SLURMD_NODENAME"},
          milliseconds(60'000));
  if (const auto id = job_id_in(r.err); !id.empty()) jobs_.push_back(id);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(contains(task_lines(r.err, 1), "starting 2 worker(s) (ranks 2..3)")) << r.err;
  std::string endpoints;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string log = worker_log(logs, rank);
    const std::string node = rank < 2 ? "n1" : "n2";
    SCOPED_TRACE("workerlog." + std::to_string(rank) + ":\n" + log);
    EXPECT_TRUE(contains(log, "hello from rank " + std::to_string(rank) + " of 4"));
    EXPECT_TRUE(contains(log, "ENV SLURMD_NODENAME=" + node + "\n"));
    EXPECT_TRUE(contains(log, "ENV PADDLE_CURRENT_ENDPOINT=" + node + ":"));
    EXPECT_TRUE(contains(log, "ENV MASTER_ADDR=n1\n"));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("ENV PADDLE_TRAINER_ENDPOINTS=(\\S+)")));
    if (rank == 0) endpoints = m[1];
    EXPECT_EQ(m[1].str(), endpoints) << "every rank sees one endpoint list";
    EXPECT_TRUE(std::regex_match(m[1].str(), std::regex(R"(n1:\d+,n1:\d+,n2:\d+,n2:\d+)")))
        << m[1];
  }
}

// `srun -N2 --ntasks-per-node=1 launch --nproc_per_node=2 train_mnist`: one 4-rank job.
TEST_F(SlurmCluster, SrunTrainsOneFourRankJob) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ddl_slurm");
  const fs::path logs = dir.path() / "logs";
  std::vector<std::string> argv{"srun", "-N2", "--ntasks-per-node=1", "--label"};
  for (const auto& a : launch_train(logs, free_port_block_above_ephemeral(), 50)) argv.push_back(a);
  const Result r = run(argv, milliseconds(120'000));
  const std::string id = job_id_in(r.err);
  if (!id.empty()) jobs_.push_back(id);
  ASSERT_EQ(r.code, 0) << describe(r);
  for (int task = 0; task < 2; ++task) {
    const std::string lines = task_lines(r.err, task);
    EXPECT_TRUE(contains(lines, "node " + std::to_string(task) + " of 2 (Slurm job " + id))
        << lines;
    EXPECT_TRUE(contains(lines, "SLURM_JOB_NODELIST=n1,n2")) << lines;
    EXPECT_TRUE(contains(lines, "all 2 node(s) agree; world size 4")) << lines;
    EXPECT_TRUE(contains(lines, "all 2 worker(s) exited with code 0")) << lines;
  }
  const std::string sum = summary_field(logs, 0, "param_checksum");
  ASSERT_FALSE(sum.empty()) << worker_log(logs, 0);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("workerlog." + std::to_string(rank) + ":\n" + worker_log(logs, rank));
    EXPECT_TRUE(contains(worker_log(logs, rank), "rank " + std::to_string(rank) + " of 4"));
    EXPECT_EQ(summary_field(logs, rank, "world"), "4");
    EXPECT_EQ(summary_field(logs, rank, "steps"), "50");
    EXPECT_EQ(summary_field(logs, rank, "param_checksum"), sum);
  }
  const auto info = wait_for_job(id, milliseconds(20'000));
  EXPECT_EQ(info.count("JobState") ? info.at("JobState") : "", "COMPLETED");
  EXPECT_EQ(info.count("ExitCode") ? info.at("ExitCode") : "", "0:0");
}

// `srun -N2 -n4 train_mnist` without `launch`: Slurm starts the four ranks itself and the
// workers read SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; the job ends with the parameters of
// `launch --nproc_per_node=4 train_mnist` on one machine.
TEST_F(SlurmCluster, SrunTasksTrainWithoutLaunch) {
  SKIP_WITHOUT_DATA();
  std::vector<std::string> train{kTrain,   "--data_dir", kData, "--max_steps", "30", "--epochs",
                                 "1",      "--save",     "",    "--threads",   "1"};
  std::vector<std::string> argv{"srun", "-N2", "-n4", "--label"};
  argv.insert(argv.end(), train.begin(), train.end());
  const Result r = run(argv, milliseconds(120'000));
  ASSERT_EQ(r.code, 0) << describe(r);
  std::string sum;
  for (int task = 0; task < 4; ++task) {
    const std::string lines = task_lines(r.out, task);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(lines, m, std::regex(R"re("param_checksum":"([0-9a-f]+)")re")))
        << "task " << task << ":\n" << describe(r);
    if (task == 0) sum = m[1];
    EXPECT_EQ(m[1].str(), sum) << describe(r);
    EXPECT_TRUE(contains(lines, "\"world\":4")) << lines;
    EXPECT_TRUE(contains(task_lines(r.err, task), "rank " + std::to_string(task) + " of 4"))
        << r.err;
  }
  TempDir dir("ddl_slurm");
  std::vector<std::string> local{kLaunch, "--nproc_per_node=4", "--print_config=false",
                                 "--log_dir", dir.str()};
  local.insert(local.end(), train.begin(), train.end());
  const Result l = run(local, milliseconds(120'000));
  ASSERT_EQ(l.code, 0) << describe(l);
  EXPECT_EQ(summary_field(dir.path(), 0, "param_checksum"), sum)
      << "srun's ranks and launch's end with different parameters";
}

// The same job as a batch script: COMPLETED with ExitCode 0:0 and each rank's log in --log_dir.
TEST_F(SlurmCluster, SbatchScriptCompletes) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ddl_slurm");
  const fs::path logs = dir.path() / "logs";
  const fs::path script =
      write_batch_script(dir, launch_train(logs, free_port_block_above_ephemeral(), 50));
  const Result sub = run({"sbatch", "--parsable", "--chdir=" + dir.str(), script.string()},
                         milliseconds(30'000));
  ASSERT_EQ(sub.code, 0) << describe(sub);
  const std::string id = sub.out.substr(0, sub.out.find_first_of(";\n"));
  ASSERT_FALSE(id.empty()) << describe(sub);
  jobs_.push_back(id);
  const auto info = wait_for_job(id, milliseconds(120'000));
  const std::string output = read_file(dir.path() / ("slurm-" + id + ".out"));
  ASSERT_FALSE(info.empty()) << "job " << id << " did not end; its output:\n" << output;
  EXPECT_EQ(info.at("JobState"), "COMPLETED") << output;
  EXPECT_EQ(info.at("ExitCode"), "0:0") << output;
  EXPECT_TRUE(contains(output, "batch script on")) << output;
  EXPECT_TRUE(contains(output, "0: ")) << output;
  EXPECT_TRUE(contains(task_lines(output, 1), "all 2 node(s) agree; world size 4")) << output;
  const std::string sum = summary_field(logs, 0, "param_checksum");
  ASSERT_FALSE(sum.empty()) << worker_log(logs, 0) << "\n" << output;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("workerlog." + std::to_string(rank) + ":\n" + worker_log(logs, rank));
    EXPECT_EQ(summary_field(logs, rank, "world"), "4");
    EXPECT_EQ(summary_field(logs, rank, "param_checksum"), sum);
  }
}

// A batch job whose worker fails (rank 1 on n1 exits 3 at step 5): `sbatch --wait` exits with 3
// and the job is FAILED with ExitCode 3:0.
TEST_F(SlurmCluster, SbatchFailingJobCarriesTheWorkersExitCode) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ddl_slurm");
  const fs::path logs = dir.path() / "logs";
  const fs::path script =
      write_batch_script(dir, launch_train(logs, free_port_block_above_ephemeral(), 50));
  const Result sub = run({"sbatch", "--wait", "--parsable", "--chdir=" + dir.str(),
                          script.string()},
                         milliseconds(120'000), {{"DDL_FAULT", "rank=1,step=5,exit=3"}});
  const std::string id = sub.out.substr(0, sub.out.find_first_of(";\n"));
  if (!id.empty()) jobs_.push_back(id);
  const std::string output = read_file(dir.path() / ("slurm-" + id + ".out"));
  ASSERT_EQ(sub.code, 3) << describe(sub) << "\njob output:\n" << output;
  const auto info = wait_for_job(id, milliseconds(20'000));
  ASSERT_FALSE(info.empty()) << output;
  EXPECT_EQ(info.at("JobState"), "FAILED") << output;
  EXPECT_EQ(info.at("ExitCode"), "3:0") << output;
  EXPECT_TRUE(contains(task_lines(output, 0), "rank 1 (pid")) << output;
  EXPECT_TRUE(contains(output, "first failure: node 0 rank 1 exit 3")) << output;
  EXPECT_TRUE(contains(worker_log(logs, 1), "fault injection: rank 1 exits with code 3 at step 5"))
      << worker_log(logs, 1);
}

// scancel of a running batch job: every launcher and worker of it, on both nodes, is gone soon
// after (Slurm sends SIGTERM to every process of the steps, SIGKILL after KillWait=5 s).
TEST_F(SlurmCluster, ScancelLeavesNoProcessOfTheJob) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ddl_slurm");
  const fs::path logs = dir.path() / "logs";
  const fs::path script =
      write_batch_script(dir, launch_train(logs, free_port_block_above_ephemeral(), 100'000));
  const Result sub = run({"sbatch", "--parsable", "--chdir=" + dir.str(), script.string()},
                         milliseconds(30'000));
  ASSERT_EQ(sub.code, 0) << describe(sub);
  const std::string id = sub.out.substr(0, sub.out.find_first_of(";\n"));
  jobs_.push_back(id);
  const auto output = [&] { return read_file(dir.path() / ("slurm-" + id + ".out")); };
  // Training has started on all four ranks (train_mnist logs batch 0 at its first step).
  ASSERT_TRUE(wait_until(
      [&] {
        for (int rank = 0; rank < 4; ++rank) {
          if (!contains(worker_log(logs, rank), "epoch: 0, batch: 0")) return false;
        }
        return true;
      },
      milliseconds(90'000), milliseconds(100)))
      << "the job did not start training; its output:\n" << output();
  const auto before = job_processes(id);
  std::map<std::string, int> workers_on;
  int launchers = 0;
  for (const auto& p : before) {
    if (p.comm == "train_mnist") ++workers_on[p.node];
    if (p.comm == "launch") ++launchers;
  }
  EXPECT_EQ(workers_on["n1"], 2) << list(before);
  EXPECT_EQ(workers_on["n2"], 2) << list(before);
  EXPECT_GE(launchers, 2) << list(before);

  const auto cancelled_at = std::chrono::steady_clock::now();
  const Result cancel = run({"scancel", id}, milliseconds(15'000));
  ASSERT_EQ(cancel.code, 0) << describe(cancel);
  EXPECT_TRUE(wait_until([&] { return job_processes(id).empty(); }, milliseconds(20'000),
                         milliseconds(50)))
      << "still alive 20 s after scancel:" << list(job_processes(id));
  const double gone_ms = ddl::testing::elapsed_ms(cancelled_at);
  for (const auto& p : before) {
    EXPECT_FALSE(ddl::testing::alive(p.pid)) << p.comm << " " << p.pid << " on " << p.node;
  }
  const auto info = wait_for_job(id, milliseconds(20'000));
  ASSERT_FALSE(info.empty());
  EXPECT_EQ(info.at("JobState"), "CANCELLED");
  std::cout << "[          ] every process of job " << id << " gone " << gone_ms
            << " ms after scancel\n";
  EXPECT_TRUE(contains(output(), "received SIGTERM")) << output();
}

// A worker failing on n2 (rank 3 exits 7 at step 5) fails the job with 7 on both nodes; launch
// names rank 3 and node 1 (n2, Slurm's task 1), and the Slurm job carries ExitCode 7:0.
TEST_F(SlurmCluster, WorkerFailingOnSecondNodeFailsTheJob) {
  SKIP_WITHOUT_DATA();
  TempDir dir("ddl_slurm");
  const fs::path logs = dir.path() / "logs";
  std::vector<std::string> argv{"srun", "-N2", "--ntasks-per-node=1", "--label"};
  for (const auto& a : launch_train(logs, free_port_block_above_ephemeral(), 50)) argv.push_back(a);
  const Result r = run(argv, milliseconds(120'000), {{"DDL_FAULT", "rank=3,step=5,exit=7"}});
  const std::string id = job_id_in(r.err);
  if (!id.empty()) jobs_.push_back(id);
  ASSERT_EQ(r.code, 7) << describe(r);
  const std::string n2 = task_lines(r.err, 1), n1 = task_lines(r.err, 0);
  EXPECT_TRUE(contains(n2, "rank 3 (pid")) << n2;
  EXPECT_TRUE(contains(n2, "job failed: rank 3 (pid")) << n2;
  EXPECT_TRUE(contains(n2, "exited with code 7; launcher exit code 7; log: " +
                               (logs / "workerlog.3").string()))
      << n2;
  EXPECT_TRUE(contains(n1, "the job failed on node 1; first failure: node 1 rank 3 exit 7")) << n1;
  EXPECT_TRUE(contains(r.err, "n2: task 1: Exited with exit code 7")) << r.err;
  EXPECT_TRUE(contains(worker_log(logs, 3), "fault injection: rank 3 exits with code 7 at step 5"));
  const auto info = wait_for_job(id, milliseconds(20'000));
  ASSERT_FALSE(info.empty());
  EXPECT_EQ(info.at("JobState"), "FAILED");
  EXPECT_EQ(info.at("ExitCode"), "7:0");
}

}  // namespace
