// Paddle users' flags, run by the built `launch`: FLAGS_selected_gpus as Paddle's own
// test scripts print it (nproc_process.py) under each launcher's spelling; Paddle 2.x's log
// folder as its test_run.py counts it (the workers' logs and <job_id>.<pod>.log, the run report
// in LOG_DIR.launch); --sort_ip, appending to logs, the GPU log; --backend;
// --auto_parallel_config. The scripts use the standard library
// only and read Paddle's environment the way Paddle's scripts do.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

constexpr milliseconds kTimeout{30'000};

fs::path write_script(const TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir.path() / name;
  std::ofstream(p) << text;
  return p;
}

// As Paddle's nproc_process.py: one line of what the launcher gave this trainer, into
// PREFIX.check_<trainer id>.log, with FLAGS_selected_gpus printed as Python prints it (None when
// unset).
const char* kNprocScript = R"(import os, sys
selected = os.getenv("FLAGS_selected_gpus")
trainer_id = int(os.getenv("PADDLE_TRAINER_ID"))
endpoints = os.getenv("PADDLE_TRAINER_ENDPOINTS")
line = "selected_devices:{} trainers_num:{} current_endpoint:{} trainer_id:{} backend:{}".format(
    selected, len(endpoints.split(",")), os.getenv("PADDLE_CURRENT_ENDPOINT"), trainer_id,
    os.getenv("PADDLE_DISTRI_BACKEND"))
print(line)
with open("{}.check_{}.log".format(sys.argv[1], trainer_id), "w") as f:
    f.write(line)
)";

// As test_run.py's collective train.py: the variables Paddle 2.x's launcher gives every trainer.
const char* kCollectiveScript = R"(import os
env = os.environ.copy()
assert "PADDLE_MASTER" in env
assert "PADDLE_GLOBAL_RANK" in env
assert "PADDLE_LOCAL_RANK" in env
assert "PADDLE_GLOBAL_SIZE" in env
assert "PADDLE_LOCAL_SIZE" in env
print("trainer", env["PADDLE_GLOBAL_RANK"], "of", env["PADDLE_GLOBAL_SIZE"])
)";

// As test_run.py's parameter-server train.py.
const char* kPsScript = R"(import os
env = os.environ.copy()
assert "PADDLE_PSERVERS_IP_PORT_LIST" in env
assert "PADDLE_TRAINER_ENDPOINTS" in env
print("role", env.get("PADDLE_ROLE", env.get("TRAINING_ROLE")))
)";

std::string describe(LaunchRun& run) { return "stderr:\n" + run.err() + "\nstdout:\n" + run.out(); }

// The files of `dir` (not folders), as test_run.py's get_files lists them.
std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) names.insert(entry.path().filename().string());
  }
  return names;
}

std::string listing(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The one <job_id>.<pod>.log of `names` (pod: six lowercase letters), or "".
std::string pod_log(const std::set<std::string>& names, const std::string& job_id) {
  const std::regex pattern(job_id + R"(\.[a-z]{6}\.log)");
  std::string found;
  for (const auto& n : names) {
    if (std::regex_match(n, pattern)) found = n;
  }
  return found;
}

// ---- FLAGS_selected_gpus -----------------------------------------------------------------------

struct SelectedGpusCase {
  std::vector<std::string> flags;
  std::string cuda_visible_devices;
  std::vector<std::string> expected;  // per trainer: what the script prints
  std::string why;
};

TEST(PaddleFlags, SelectedGpusFollowsTheLauncherWhoseFlagsWereUsed) {
  const std::vector<SelectedGpusCase> cases = {
      {{"--nproc_per_node=2"}, "", {"", ""}, "shared spellings: launch's default, Paddle 1.8's"},
      {{"--cluster_node_ips=127.0.0.1", "--node_ip=127.0.0.1", "--nproc_per_node=2"},
       "",
       {"", ""},
       "Paddle 1.8: an empty device list on CPU"},
      {{"--backend=gloo", "--nproc_per_node=2"}, "", {"", ""}, "fleetrun: an empty device list"},
      {{"--job_id=cpu", "--nproc_per_node=2"}, "", {"None", "None"}, "Paddle 2.x: not set"},
      {{"--nproc-per-node=2"}, "", {"None", "None"}, "torchrun: not set"},
      {{"--gpus=4,5"}, "4,5", {"0", "1"}, "GPUs: the position in CUDA_VISIBLE_DEVICES"},
  };
  for (const SelectedGpusCase& c : cases) {
    SCOPED_TRACE(c.why);
    TempDir tmp;
    const fs::path script = write_script(tmp, "nproc_process.py", kNprocScript);
    const fs::path prefix = tmp.path() / "fleet_nproc";
    std::vector<std::string> args = c.flags;
    args.insert(args.end(), {"--log_dir", (tmp.path() / "testlog").string(), "--print_config=false",
                             script.string(), prefix.string()});
    LaunchRun run(tmp, args, {{"CUDA_VISIBLE_DEVICES", c.cuda_visible_devices}});
    ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
    for (std::size_t id = 0; id < c.expected.size(); ++id) {
      const std::string line =
          read_file(tmp.path() / ("fleet_nproc.check_" + std::to_string(id) + ".log"));
      EXPECT_TRUE(contains(line, "selected_devices:" + c.expected[id] + " trainers_num:2 "))
          << line;
      EXPECT_TRUE(contains(line, "trainer_id:" + std::to_string(id))) << line;
    }
  }
}

// ---- Paddle 2.x's log folder -------------------------------------------------------------------

TEST(PaddleFlags, Paddle2LogFolderHoldsWhatPaddlesDoesAndTheReportLivesBeside) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kCollectiveScript);
  const fs::path logs = tmp.path() / "log_dir";
  LaunchRun run(
      tmp, {"--job_id", "test2", "--devices", "0,1,2", "--log_dir", logs.string(), script.string()},
      {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);

  const std::set<std::string> names = files_in(logs);
  EXPECT_EQ(names.size(), 4u) << "test_run.py: 3 workers' logs and the launcher's, got "
                              << listing(names);
  for (const std::string w : {"workerlog.0", "workerlog.1", "workerlog.2"}) {
    EXPECT_EQ(names.count(w), 1u) << w << " in " << listing(names);
  }
  const std::string own = pod_log(names, "test2");
  ASSERT_FALSE(own.empty()) << "no test2.<pod>.log in " << listing(names);
  const std::string own_text = read_file(logs / own);
  EXPECT_TRUE(contains(own_text, "Paddle 2.x's log folder")) << own_text;
  EXPECT_TRUE(contains(own_text, "[info]")) << "the launcher's own log lines\n" << own_text;
  EXPECT_TRUE(contains(read_file(logs / "workerlog.2"), "trainer 2 of 3")) << "the script ran";

  const fs::path side = tmp.path() / "log_dir.launch";
  EXPECT_TRUE(fs::exists(side / "report.json")) << "the run report moves beside the folder";
  EXPECT_TRUE(fs::exists(side / "report.html"));
  EXPECT_TRUE(contains(run.err(), side.string())) << "one log line says where\n" << run.err();
}

TEST(PaddleFlags, Paddle2LogFolderInParameterServerMode) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kPsScript);
  const fs::path logs = tmp.path() / "log";
  LaunchRun run(tmp, {"--job_id", "ps2", "--server_num=2", "--trainer_num=2", "--log_dir",
                      logs.string(), script.string()});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::set<std::string> names = files_in(logs);
  EXPECT_EQ(names, (std::set<std::string>{"serverlog.0", "serverlog.1", "workerlog.0",
                                          "workerlog.1", pod_log(names, "ps2")}))
      << "test_run.py: 5 files, got " << listing(names);
  EXPECT_FALSE(pod_log(names, "ps2").empty()) << listing(names);
  EXPECT_TRUE(fs::exists(tmp.path() / "log.launch" / "report.json"));
}

TEST(PaddleFlags, Paddle2LogNamesCountPerNode) {
  // test_run.py's two-node case: each node's folder has its own workerlog.0 and workerlog.1.
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kCollectiveScript);
  const int port = free_loopback_port();
  const ddl::env::EnvMap identity = {{"DDL_JOB_SECRET", "flags-test-secret"},
                                     {"CUDA_VISIBLE_DEVICES", "0,1"}};
  auto node = [&](const std::string& folder) {
    return std::vector<std::string>{"--job_id",
                                    "test3",
                                    "--devices",
                                    "0,1",
                                    "--log_dir",
                                    (tmp.path() / folder).string(),
                                    "--master",
                                    "127.0.0.1:" + std::to_string(port),
                                    "--nnodes",
                                    "2",
                                    "--print_config=false",
                                    script.string()};
  };
  TempDir out1;
  TempDir out2;
  LaunchRun first(out1, node("1"), identity);
  LaunchRun second(out2, node("2"), identity);
  ASSERT_EQ(first.wait(kTimeout), 0) << describe(first);
  ASSERT_EQ(second.wait(kTimeout), 0) << describe(second);
  for (const std::string folder : {"1", "2"}) {
    const std::set<std::string> names = files_in(tmp.path() / folder);
    EXPECT_EQ(names, (std::set<std::string>{"workerlog.0", "workerlog.1", pod_log(names, "test3")}))
        << "node folder " << folder << ": " << listing(names);
    EXPECT_FALSE(pod_log(names, "test3").empty()) << listing(names);
  }
  const std::string logs =
      read_file(tmp.path() / "1" / "workerlog.0") + read_file(tmp.path() / "2" / "workerlog.0");
  EXPECT_TRUE(contains(logs, "trainer 0 of 4")) << logs;
  EXPECT_TRUE(contains(logs, "trainer 2 of 4")) << "node 1's local 0 is rank 2\n" << logs;
}

TEST(PaddleFlags, Paddle2WritesItsLogFolderByDefault) {
  // Paddle 2.x always writes ./log; so does launch given its flags (run from `tmp`).
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kCollectiveScript);
  ddl::testing::SpawnOptions o;
  o.argv = {"/bin/sh", "-c",
            "cd '" + tmp.path().string() + "' && exec '" + kLaunch +
                "' --job_id test1 --print_config=false '" + script.string() + "'"};
  ddl::env::EnvMap env = ddl::env::current_environment();
  env.erase(ddl::env::kJobId);
  env.erase(ddl::env::kJobSecret);
  o.env = env;
  o.stdout_path = tmp.path() / "stdout";
  o.stderr_path = tmp.path() / "stderr";
  ddl::testing::ChildProcess child(o);
  ASSERT_EQ(child.wait(kTimeout), 0) << child.err();
  const std::set<std::string> names = files_in(tmp.path() / "log");
  EXPECT_EQ(names.size(), 2u) << listing(names);
  EXPECT_EQ(names.count("workerlog.0"), 1u) << listing(names);
  EXPECT_FALSE(pod_log(names, "test1").empty()) << listing(names);
}

// ---- The rest of Paddle 2.x's launcher: --sort_ip, appending logs, the GPU log -----------------

TEST(PaddleFlags, SortIpRanksTheNodesByAddress) {
  // Node 0 (the master's address, first to start) is 127.0.0.5; the other is 127.0.0.2, which
  // --sort_ip puts first, as Paddle 2.x's master sorts its peers.
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kCollectiveScript);
  const int port = free_loopback_port();
  const ddl::env::EnvMap identity = {{"DDL_JOB_SECRET", "flags-test-secret"}};
  auto node = [&](const std::string& host) {
    return std::vector<std::string>{"--job_id",
                                    "sorted",
                                    "--nproc_per_node",
                                    "2",
                                    "--host",
                                    host,
                                    "--log_dir",
                                    (tmp.path() / host).string(),
                                    "--master",
                                    "127.0.0.5:" + std::to_string(port),
                                    "--nnodes",
                                    "2",
                                    "--sort_ip",
                                    "True",
                                    "--print_config=false",
                                    script.string()};
  };
  TempDir out1;
  TempDir out2;
  LaunchRun first(out1, node("127.0.0.5"), identity);
  LaunchRun second(out2, node("127.0.0.2"), identity);
  ASSERT_EQ(first.wait(kTimeout), 0) << describe(first);
  ASSERT_EQ(second.wait(kTimeout), 0) << describe(second);
  const std::string low = read_file(tmp.path() / "127.0.0.2" / "workerlog.0");
  const std::string high = read_file(tmp.path() / "127.0.0.5" / "workerlog.0");
  EXPECT_TRUE(contains(low, "trainer 0 of 4")) << low;
  EXPECT_TRUE(contains(high, "trainer 2 of 4")) << high;
}

TEST(PaddleFlags, Paddle2AppendsToTheLogsItFinds) {
  // Two runs in one folder: the second adds to workerlog.0, as every Paddle launcher opens it.
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kCollectiveScript);
  const fs::path logs = tmp.path() / "log";
  for (int run_index = 0; run_index < 2; ++run_index) {
    TempDir out;
    LaunchRun run(out, {"--job_id", "twice", "--log_dir", logs.string(), "--print_config=false",
                        script.string()});
    ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  }
  const std::string log = read_file(logs / "workerlog.0");
  EXPECT_NE(log.find("trainer 0 of 1"), log.rfind("trainer 0 of 1")) << "both runs' lines\n" << log;
  // --log_overwrite=True truncates.
  TempDir out;
  LaunchRun run(out, {"--job_id", "twice", "--log_dir", logs.string(), "--log_overwrite", "True",
                      "--print_config=false", script.string()});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string fresh = read_file(logs / "workerlog.0");
  EXPECT_EQ(fresh.find("trainer 0 of 1"), fresh.rfind("trainer 0 of 1")) << fresh;
}

// nvidia-smi as the test's own program on PATH: it answers each query with fixed CSV lines and
// records its arguments, so the GPU log's contents and the GPU ids asked for can be checked on a
// machine without GPUs.
const char* kFakeNvidiaSmi = R"(#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
case "$*" in
  *--query-gpu=index,uuid*) echo "5, GPU-fake-5, 550.54, Fake GPU, 1234, Disabled, Disabled" ;;
  *--query-compute-apps*) echo "4242, python3, GPU-fake-5, Fake GPU, 100 MiB" ;;
  *utilization.gpu*) echo "5, 37, 81559, 1024, 80535, 2026/12/07 12:00:00.000" ;;
  *) echo "unknown query" >&2; exit 6 ;;
esac
)";

TEST(PaddleFlags, GpuLogFromNvidiaSmi) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kCollectiveScript);
  const fs::path bin = tmp.path() / "bin";
  fs::create_directories(bin);
  const fs::path smi = write_script(tmp, "bin/nvidia-smi", kFakeNvidiaSmi);
  fs::permissions(smi, fs::perms::owner_all);
  const fs::path logs = tmp.path() / "log";
  const std::string path =
      bin.string() + ":" +
      ddl::env::lookup(ddl::env::current_environment(), "PATH").value_or("/usr/bin:/bin");
  TempDir out;
  LaunchRun run(out,
                {"--job_id", "gpujob", "--devices", "5", "--log_dir", logs.string(),
                 "--print_config=false", script.string()},
                {{"CUDA_VISIBLE_DEVICES", "3,5"}, {"PATH", path}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string log = read_file(logs / "gpujob.gpu.log");
  EXPECT_EQ(log,
            "index,uuid,driver_version,name,gpu_serial,display_active,display_mode\n"
            "5, GPU-fake-5, 550.54, Fake GPU, 1234, Disabled, Disabled\n"
            "\npid,process_name,gpu_uuid,gpu_name,used_memory\n"
            "4242, python3, GPU-fake-5, Fake GPU, 100 MiB\n"
            "\nindex,utilization_gpu,memory_total,memory_used,memory_free,timestamp\n"
            "5, 37, 81559, 1024, 80535, 2026/12/07 12:00:00.000\n");
  const std::string calls = read_file(bin / "calls");
  EXPECT_TRUE(contains(calls, "--id=5")) << "the machine's GPU 5, CUDA_VISIBLE_DEVICES' entry 1\n"
                                         << calls;
  // --enable_gpu_log=False: none.
  TempDir out2;
  const fs::path logs2 = tmp.path() / "log2";
  LaunchRun off(out2,
                {"--job_id", "gpujob", "--devices", "5", "--log_dir", logs2.string(),
                 "--enable_gpu_log", "False", "--print_config=false", script.string()},
                {{"CUDA_VISIBLE_DEVICES", "3,5"}, {"PATH", path}});
  ASSERT_EQ(off.wait(kTimeout), 0) << describe(off);
  EXPECT_FALSE(fs::exists(logs2 / "gpujob.gpu.log"));
  // Without nvidia-smi: one warning, no file, the job runs.
  TempDir out3;
  const fs::path logs3 = tmp.path() / "log3";
  LaunchRun none(out3,
                 {"--job_id", "gpujob", "--devices", "0", "--log_dir", logs3.string(),
                  "--print_config=false", script.string()},
                 {{"PATH", "/usr/bin:/bin"}});
  ASSERT_EQ(none.wait(kTimeout), 0) << describe(none);
  EXPECT_FALSE(fs::exists(logs3 / "gpujob.gpu.log"));
  EXPECT_TRUE(contains(none.err(), "nvidia-smi is not on PATH")) << none.err();
}

// ---- --backend and --auto_parallel_config ------------------------------------------------------

TEST(PaddleFlags, BackendGlooAndAutoRun) {
  for (const std::string backend : {"gloo", "auto"}) {
    SCOPED_TRACE(backend);
    TempDir tmp;
    const fs::path script = write_script(tmp, "nproc_process.py", kNprocScript);
    LaunchRun run(
        tmp,
        {"--backend", backend, "--nproc_per_node=2", "--log_dir", (tmp.path() / "logs").string(),
         "--print_config=false", script.string(), (tmp.path() / "b").string()},
        {{"CUDA_VISIBLE_DEVICES", ""}});
    ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
    for (int id = 0; id < 2; ++id) {
      const std::string line = read_file(tmp.path() / ("b.check_" + std::to_string(id) + ".log"));
      EXPECT_TRUE(contains(line, "backend:gloo")) << line;
      EXPECT_TRUE(contains(line, "selected_devices: ")) << line;
    }
  }
  TempDir tmp;
  const fs::path script = write_script(tmp, "nproc_process.py", kNprocScript);
  LaunchRun run(tmp,
                {"--backend=nccl", "--gpus=0", "--log_dir", (tmp.path() / "logs").string(),
                 "--print_config=false", script.string(), (tmp.path() / "n").string()},
                {{"CUDA_VISIBLE_DEVICES", "0"}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string line = read_file(tmp.path() / "n.check_0.log");
  EXPECT_TRUE(contains(line, "backend:nccl")) << line;
  EXPECT_TRUE(contains(line, "selected_devices:0 ")) << line;
}

TEST(PaddleFlags, BadBackendsAndAutoParallelConfigAreOneLineErrors) {
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--backend=mpi"}, "--backend='mpi': ValueError: "},
      {{"--backend=bkcl"}, "Kunlun XPUs (BKCL), which launch cannot"},
      {{"--backend=gloo", "--server_num=1"}, "AssertionError: "},
      {{"--auto_parallel_config", "cfg.json", "--devices=0,1"},
       "--auto_parallel_config (Paddle 2.x's): needs Paddle's auto-parallel tuner"},
  };
  for (const Case& c : cases) {
    TempDir tmp;
    const fs::path script = write_script(tmp, "train.py", "raise SystemExit(9)\n");
    std::vector<std::string> args = c.flags;
    args.push_back(script.string());
    LaunchRun run(tmp, args);
    ASSERT_EQ(run.wait(kTimeout), 2) << describe(run);
    const std::string err = run.err();
    EXPECT_TRUE(contains(err, c.says)) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line\n" << err;
  }
}

}  // namespace
