// Real PyTorch programs (Debian's python3-torch, 1.13) run by the built `launch` and, in the same
// test where it tells us something, by Debian's torchrun (`python3 -m torch.distributed.run`):
// DDP training on gloo gives the same parameters, a failing rank is named with its exception, the
// environment a library sees is torchrun's, and a restarted group can init_process_group again.
// Skipped when /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/ports.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using ddl::testing::ChildProcess;
using ddl::testing::contains;
using ddl::testing::read_file;
using ddl::testing::SpawnOptions;
using ddl::testing::TempDir;
using nlohmann::json;
using std::chrono::milliseconds;
using Env = std::map<std::string, std::string>;

// Debian installs torch for its own interpreter only; the first python3 on PATH may be another.
const std::string kPython = "/usr/bin/python3";
const std::string kLaunch = std::string(DDL_BIN_DIR) + "/launch";
const fs::path kPrograms = fs::path(DDL_SOURCE_DIR) / "tests" / "e2e" / "torch_programs";
// One run (import torch, two workers, a few dozen steps) takes seconds; this only bounds a hang.
constexpr milliseconds kRunTimeout{120'000};

// What torchrun 1.13 gives each worker on top of the caller's environment
// (torch/distributed/elastic/agent/server/local_elastic_agent.py::_start_workers,
// elastic/multiprocessing/__init__.py::start_processes for the error file, run.py for
// OMP_NUM_THREADS when more than one worker runs on the node and the caller has not set it).
const std::set<std::string> kTorchrunVars = {"RANK",
                                             "LOCAL_RANK",
                                             "WORLD_SIZE",
                                             "LOCAL_WORLD_SIZE",
                                             "GROUP_RANK",
                                             "GROUP_WORLD_SIZE",
                                             "ROLE_RANK",
                                             "ROLE_WORLD_SIZE",
                                             "ROLE_NAME",
                                             "MASTER_ADDR",
                                             "MASTER_PORT",
                                             "TORCHELASTIC_RESTART_COUNT",
                                             "TORCHELASTIC_MAX_RESTARTS",
                                             "TORCHELASTIC_RUN_ID",
                                             "TORCHELASTIC_USE_AGENT_STORE",
                                             "TORCHELASTIC_ERROR_FILE",
                                             "NCCL_ASYNC_ERROR_HANDLING",
                                             "OMP_NUM_THREADS"};

// True when /usr/bin/python3 imports torch with its distributed package (asked once).
bool torch_available() {
  static const bool available = [] {
    if (::access(kPython.c_str(), X_OK) != 0) return false;
    TempDir tmp("ddl_torch_probe");
    SpawnOptions o;
    o.argv = {kPython, "-c", "import torch, torch.distributed as d; assert d.is_available()"};
    o.stdout_path = tmp.path() / "probe";
    ChildProcess probe(std::move(o));
    return probe.wait(kRunTimeout) == 0;
  }();
  return available;
}

// The test's environment without what would steer either launcher or the job: launcher variables
// a caller's shell may have, and every variable torchrun sets (so that what a worker sees beyond
// this is what its launcher added).
Env clean_environment(const Env& overrides = {}) {
  Env env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& name : kTorchrunVars) env.erase(name);
  for (const char* name : {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "DDL_LOG_LEVEL", "DDL_JOB_ID",
                           "DDL_JOB_SECRET", "DDL_FAULT", "DDL_RESTART_COUNT"}) {
    env.erase(name);
  }
  for (auto it = env.begin(); it != env.end();) {
    const bool scheduler = it->first.rfind("SLURM_", 0) == 0 || it->first.rfind("PADDLE_", 0) == 0;
    it = scheduler ? env.erase(it) : std::next(it);
  }
  for (const auto& [k, v] : overrides) env[k] = v;
  return env;
}

// One finished (or timed-out) run of a launcher, output in DIR/NAME.out and DIR/NAME.err.
struct Outcome {
  std::optional<int> code;
  std::string out, err;
};

Outcome run(const fs::path& dir, const std::string& name, std::vector<std::string> argv,
            const Env& env) {
  SpawnOptions o;
  o.argv = std::move(argv);
  o.env = env;
  o.stdout_path = dir / (name + ".out");
  o.stderr_path = dir / (name + ".err");
  o.own_process_group = true;  // torchrun's workers share its group: a timeout kills them all
  ChildProcess child(std::move(o));
  Outcome r;
  r.code = child.wait(kRunTimeout);
  r.out = child.out();
  r.err = child.err();
  return r;
}

std::string program(const std::string& file) { return (kPrograms / file).string(); }

// `launch LAUNCH_ARGS /usr/bin/python3 -u PROGRAM ARGS`
Outcome launch(const fs::path& dir, const std::vector<std::string>& launch_args,
               const std::string& file, const std::vector<std::string>& args, const Env& env) {
  std::vector<std::string> argv = {kLaunch};
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  argv.insert(argv.end(), {kPython, "-u", program(file)});
  argv.insert(argv.end(), args.begin(), args.end());
  return run(dir, "launch", argv, env);
}

// Debian's torchrun, single node (--standalone: a free port and a fresh run id, as users start it
// on one machine), checking its workers every 0.1 s instead of every 5.
//   --redirects 9:0 --tee 9:0: torch 1.13 on Python 3.11 cannot parse the default "0" (Std("0")
//   finds no member: iterating an IntFlag skips the zero member), and torchrun then fails in
//   to_map(); a mapping for a local rank that does not exist leaves every real rank at "none".
Outcome torchrun(const fs::path& dir, const std::vector<std::string>& torchrun_args,
                 const std::string& file, const std::vector<std::string>& args, const Env& env) {
  std::vector<std::string> argv = {
      kPython, "-m",  "torch.distributed.run", "--monitor_interval", "0.1", "--redirects", "9:0",
      "--tee", "9:0", "--standalone"};
  argv.insert(argv.end(), torchrun_args.begin(), torchrun_args.end());
  argv.push_back(program(file));
  argv.insert(argv.end(), args.begin(), args.end());
  return run(dir, "torchrun", argv, env);
}

json read_json(const fs::path& p) {
  const std::string text = read_file(p);
  if (text.empty()) return json();
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::string describe(const Outcome& r) {
  return "exit code " + (r.code ? std::to_string(*r.code) : std::string("none (timed out)")) +
         "\n--- stdout ---\n" + r.out + "\n--- stderr ---\n" + r.err;
}

// The line of `text` that starts a "job failed:" summary (empty if none).
std::string job_failed_line(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex("job failed[^\n]*")) ? m.str() : std::string();
}

// Everything launch printed from its "job failed:" summary on (the line and the failed rank's
// last log lines below it).
std::string job_failed_summary(const std::string& text) {
  const auto at = text.find("job failed");
  return at == std::string::npos ? std::string() : text.substr(at);
}

class TorchPrograms : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch_available()) {
      GTEST_SKIP() << kPython << " cannot import torch (Debian package python3-torch; "
                   << "scripts/setup.sh installs it): skipping the PyTorch programs";
    }
  }
  TempDir tmp_{"ddl_torch"};
  fs::path dir(const std::string& name) {
    const fs::path p = tmp_.path() / name;
    fs::create_directories(p);
    return p;
  }
};

// ---- 1. DDP training ---------------------------------------------------------------------------

// Both launchers run the same DDP program with the same seeds, world size and thread count; gloo's
// all-reduce of two ranks adds two numbers (a + b == b + a exactly), so training is bitwise
// reproducible and the final parameters must be identical, not merely close.
TEST_F(TorchPrograms, DdpTrainingEndsWithTorchrunsParameters) {
  // One intra-op thread under both: torchrun would choose 1, launch cores/2; the caller's value
  // wins in both, and more threads could change the order of a matmul's additions.
  const Env env = clean_environment({{"OMP_NUM_THREADS", "1"}});
  const fs::path ours = dir("launch"), theirs = dir("torchrun");

  const Outcome l = launch(ours, {"--nproc_per_node=2", "--log_dir", (ours / "logs").string()},
                           "ddp_train.py", {(ours / "result.json").string()}, env);
  ASSERT_EQ(l.code, 0) << describe(l);
  const Outcome t = torchrun(theirs, {"--nproc_per_node=2"}, "ddp_train.py",
                             {(theirs / "result.json").string()}, env);
  ASSERT_EQ(t.code, 0) << describe(t);

  json a = read_json(ours / "result.json"), b = read_json(theirs / "result.json");
  ASSERT_TRUE(a.is_object()) << "launch: rank 0 wrote no result\n" << describe(l);
  ASSERT_TRUE(b.is_object()) << "torchrun: rank 0 wrote no result\n" << describe(t);
  SCOPED_TRACE("launch: " + a.dump() + "\ntorchrun: " + b.dump());

  // The run under launch is a real two-rank training run...
  EXPECT_EQ(a["world_size"], 2);
  EXPECT_EQ(a["steps"], 40) << "5 epochs of 256 samples per rank in batches of 32";
  EXPECT_EQ(a["samples_seen"], 5 * 512) << "each epoch's shards cover the data set once";
  ASSERT_EQ(a["rank_sha256"].size(), 2u);
  EXPECT_EQ(a["rank_sha256"][0], a["rank_sha256"][1]) << "DDP replicas diverged";
  EXPECT_LT(std::stod(a["final_loss"].get<std::string>()),
            0.1 * std::stod(a["initial_loss"].get<std::string>()))
      << "training did not reduce the loss tenfold";
  // ...that ends exactly where torchrun's does.
  EXPECT_EQ(a["param_sha256"], b["param_sha256"]) << "final parameters differ from torchrun's";
  EXPECT_EQ(a["final_loss"], b["final_loss"]);
  EXPECT_EQ(a["initial_loss"], b["initial_loss"]);
}

// The command line a torchrun user types, unchanged: `launch --standalone --nproc-per-node=2
// ddp_train.py OUT` runs the script with the python3 first on PATH (here Debian's, as a user who
// installed python3-torch has it), and ends with the parameters torchrun's run ends with.
TEST_F(TorchPrograms, TorchrunsCommandLineRunsUnchanged) {
  Env env = clean_environment({{"OMP_NUM_THREADS", "1"}});
  env["PATH"] = "/usr/bin:" + env["PATH"];
  const fs::path ours = dir("launch"), theirs = dir("torchrun");
  // Debian's torchrun 1.13 knows only the underscore spellings; today's documents the dashes.
  const std::vector<std::string> common = {"--nproc_per_node=2"};

  std::vector<std::string> argv = {kLaunch, "--standalone", "--nproc-per-node=2",
                                   program("ddp_train.py"), (ours / "result.json").string()};
  const Outcome l = run(ours, "launch", argv, env);
  ASSERT_EQ(l.code, 0) << describe(l);
  const Outcome t = torchrun(theirs, common, "ddp_train.py", {(theirs / "result.json").string()}, env);
  ASSERT_EQ(t.code, 0) << describe(t);
  const json a = read_json(ours / "result.json"), b = read_json(theirs / "result.json");
  ASSERT_TRUE(a.is_object()) << describe(l);
  ASSERT_TRUE(b.is_object()) << describe(t);
  EXPECT_EQ(a["world_size"], 2);
  EXPECT_EQ(a["param_sha256"], b["param_sha256"]) << a.dump() << "\n" << b.dump();
}

// --master-addr/--master-port reach the script as MASTER_ADDR/MASTER_PORT exactly as given, and
// init_process_group("env://") forms the group on them (under torchrun, too).
TEST_F(TorchPrograms, MasterAddrAndPortAsGivenFormTheGroup) {
  Env env = clean_environment({{"OMP_NUM_THREADS", "1"}});
  env["PATH"] = "/usr/bin:" + env["PATH"];
  const fs::path ours = dir("launch"), theirs = dir("torchrun_static");
  // A port free a moment ago (with the next one below 65535: a multi-node control store's).
  const int port = ddl::testing::free_port_block_above_ephemeral();
  const std::vector<std::string> flags = {"--nproc_per_node=2", "--master_addr=localhost",
                                          "--master_port=" + std::to_string(port)};
  std::vector<std::string> argv = {kLaunch, "--nproc-per-node=2", "--master-addr=localhost",
                                   "--master-port=" + std::to_string(port)};
  argv.insert(argv.end(), {program("restart.py"), ours.string()});
  const Outcome l = run(ours, "launch", argv, env);
  ASSERT_EQ(l.code, 1) << "restart.py fails rank 1 in attempt 0 (no restarts asked)\n" << describe(l);
  const json j = read_json(ours / "attempt0.rank0.json");
  ASSERT_TRUE(j.is_object()) << "rank 0 did not finish its all-reduce\n" << describe(l);
  EXPECT_EQ(j["all_reduce"], 3.0);
  EXPECT_EQ(j["master_port"], std::to_string(port)) << "MASTER_PORT as given";
  EXPECT_EQ(j.value("master_addr", ""), "localhost") << "MASTER_ADDR as given";

  // torchrun with the same flags (1.13's underscore spellings; static rendezvous on that address)
  // gives the script the same.
  argv = {kPython, "-m", "torch.distributed.run", "--monitor_interval", "0.1", "--redirects",
          "9:0", "--tee", "9:0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {program("restart.py"), theirs.string()});
  const Outcome t = run(theirs, "torchrun", argv, env);
  EXPECT_EQ(t.code, l.code) << describe(t);
  const json k = read_json(theirs / "attempt0.rank0.json");
  ASSERT_TRUE(k.is_object()) << describe(t);
  EXPECT_EQ(k["master_port"], j["master_port"]);
  EXPECT_EQ(k["master_addr"], j["master_addr"]);
}

// Two nodes (two launchers on two loopback addresses) in torchrun's static spelling: every rank
// sees MASTER_ADDR:MASTER_PORT as given, rank 0's torch store binds it, the group forms across the
// nodes with init_process_group("env://"), and again after a restart of the whole job.
TEST_F(TorchPrograms, TwoNodesFormTheGroupOnTheGivenMasterPort) {
  Env env = clean_environment({{"OMP_NUM_THREADS", "1"}, {"DDL_JOB_SECRET", "torch-two-nodes"}});
  const fs::path out = dir("out");
  const int port = ddl::testing::free_port_block_above_ephemeral();
  auto node = [&](int rank) {
    SpawnOptions o;
    o.argv = {kLaunch, "--nnodes=2", "--node-rank=" + std::to_string(rank),
              "--master-addr=127.0.0.1", "--master-port=" + std::to_string(port),
              "--nproc-per-node=1", "--max-restarts=1", "--rendezvous_timeout=60",
              "--log-dir", (out / ("logs" + std::to_string(rank))).string()};
    if (rank == 1) o.argv.push_back("--local-addr=127.0.0.2");
    o.argv.insert(o.argv.end(), {kPython, "-u", program("restart.py"), out.string()});
    o.env = env;
    o.stdout_path = out / ("node" + std::to_string(rank) + ".out");
    o.stderr_path = out / ("node" + std::to_string(rank) + ".err");
    o.own_process_group = true;
    return std::make_unique<ChildProcess>(std::move(o));
  };
  auto n0 = node(0);
  auto n1 = node(1);
  const auto c0 = n0->wait(kRunTimeout);
  const auto c1 = n1->wait(kRunTimeout);
  const std::string err = "node 0:\n" + n0->err() + "\nnode 1:\n" + n1->err();
  EXPECT_EQ(c0, 0) << err;
  EXPECT_EQ(c1, 0) << err;
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string name =
          "attempt" + std::to_string(attempt) + ".rank" + std::to_string(rank) + ".json";
      const json j = read_json(out / name);
      ASSERT_TRUE(j.is_object()) << name << " missing\n" << err;
      EXPECT_EQ(j["all_reduce"], 3.0) << name;
      EXPECT_EQ(j["master_addr"], "127.0.0.1") << name;
      EXPECT_EQ(j["master_port"], std::to_string(port)) << name;
    }
  }
}

// ---- 2. A failing rank -------------------------------------------------------------------------

// With @record the failed rank writes its exception to TORCHELASTIC_ERROR_FILE; launch reads it and
// puts the message in the "job failed:" line itself, as torchrun names it as the root cause.
TEST_F(TorchPrograms, FailureWithRecordNamesRankAndException) {
  const Env env = clean_environment();
  const fs::path ours = dir("launch"), theirs = dir("torchrun");
  const fs::path logs = ours / "logs";

  const Outcome t = torchrun(theirs, {"--nproc_per_node=2"}, "fail_record.py", {}, env);
  ASSERT_TRUE(t.code.has_value()) << describe(t);
  EXPECT_EQ(*t.code, 1) << describe(t);
  EXPECT_TRUE(std::regex_search(t.err, std::regex(R"(rank\s*:\s*1 \(local_rank: 1\))")))
      << "torchrun names rank 1 as the root cause\n"
      << t.err;
  EXPECT_TRUE(contains(t.err, "RuntimeError: rank 1 fails on purpose")) << t.err;

  const Outcome l =
      launch(ours, {"--nproc_per_node=2", "--log_dir", logs.string()}, "fail_record.py", {}, env);
  ASSERT_TRUE(l.code.has_value()) << describe(l);
  EXPECT_EQ(*l.code, *t.code) << "launch's exit code is torchrun's\n" << describe(l);
  const std::string line = job_failed_line(l.err);
  ASSERT_FALSE(line.empty()) << "no \"job failed:\" summary\n" << l.err;
  EXPECT_TRUE(
      std::regex_search(line, std::regex(R"(^job failed: rank 1 \(pid \d+\) exited with code 1 )"
                                         R"(\(RuntimeError: rank 1 fails on purpose\))")))
      << "the summary line names rank 1 and carries the message of its error file\n"
      << line;
  EXPECT_TRUE(contains(job_failed_summary(l.err), "RuntimeError: rank 1 fails on purpose"))
      << l.err;
  // What @record wrote stays in the log folder with the logs.
  json recorded = read_json(logs / "error.1.json");
  ASSERT_TRUE(recorded.is_object()) << "no JSON error file in " << logs;
  EXPECT_TRUE(contains(recorded.dump(), "rank 1 fails on purpose")) << recorded.dump();
}

// Without @record there is no error file; the exit code is the same and launch's summary still
// names rank 1, with the traceback's last line among the rank's last log lines under it.
TEST_F(TorchPrograms, FailureWithoutRecordNamesRankAndTraceback) {
  const Env env = clean_environment();
  const fs::path ours = dir("launch"), theirs = dir("torchrun");

  const Outcome t = torchrun(theirs, {"--nproc_per_node=2"}, "fail_plain.py", {}, env);
  ASSERT_TRUE(t.code.has_value()) << describe(t);
  EXPECT_EQ(*t.code, 1) << describe(t);
  EXPECT_TRUE(std::regex_search(t.err, std::regex(R"(rank\s*:\s*1 \(local_rank: 1\))"))) << t.err;
  EXPECT_TRUE(std::regex_search(t.err, std::regex(R"(error_file\s*:\s*<N/A>)")))
      << "torchrun found no error file either\n"
      << t.err;

  const Outcome l = launch(ours, {"--nproc_per_node=2", "--log_dir", (ours / "logs").string()},
                           "fail_plain.py", {}, env);
  ASSERT_TRUE(l.code.has_value()) << describe(l);
  EXPECT_EQ(*l.code, *t.code) << describe(l);
  const std::string line = job_failed_line(l.err);
  EXPECT_TRUE(
      std::regex_search(line, std::regex(R"(^job failed: rank 1 \(pid \d+\) exited with code 1)")))
      << line << "\n"
      << l.err;
  EXPECT_TRUE(contains(job_failed_summary(l.err), "RuntimeError: rank 1 fails on purpose"))
      << "the summary shows the traceback's last line\n"
      << l.err;
}

// ---- 3. The environment a library sees ---------------------------------------------------------

struct Dump {
  bool launched = false;
  Env env;
};

// OUT/env.<rank>.json of env_dump.py for ranks 0 and 1.
std::vector<Dump> read_dumps(const fs::path& out) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 2; ++r) {
    json j = read_json(out / ("env." + std::to_string(r) + ".json"));
    Dump d;
    if (j.is_object() && j["env"].is_object()) {
      d.launched = j.value("is_torchelastic_launched", false);
      for (const auto& [k, v] : j["env"].items()) d.env[k] = v.get<std::string>();
    }
    dumps.push_back(std::move(d));
  }
  return dumps;
}

// Names whose value in `env` is not the one the launcher was given in `base`.
std::set<std::string> added_by_launcher(const Env& env, const Env& base) {
  std::set<std::string> names;
  for (const auto& [k, v] : env) {
    const auto it = base.find(k);
    if (it == base.end() || it->second != v) names.insert(k);
  }
  return names;
}

// torchrun 1.13 sets NCCL_ASYNC_ERROR_HANDLING; torch 2.x renamed it TORCH_NCCL_ASYNC_ERROR_HANDLING
// (and warns when the old name is set), and launch, like today's torchrun, sets only the new one.
std::string current_name(const std::string& torchrun_113_name) {
  return torchrun_113_name == "NCCL_ASYNC_ERROR_HANDLING" ? "TORCH_NCCL_ASYNC_ERROR_HANDLING"
                                                           : torchrun_113_name;
}

bool is_port(const std::string& s) {
  return std::regex_match(s, std::regex("[1-9][0-9]{0,4}")) && std::stoi(s) <= 65535;
}

// Runs env_dump.py under both launchers with EXTRA options for both, and compares per rank.
void compare_environments(const fs::path& ours, const fs::path& theirs,
                          const std::vector<std::string>& extra) {
  const Env base = clean_environment();
  std::vector<std::string> common = {"--nproc_per_node=2"};
  common.insert(common.end(), extra.begin(), extra.end());

  const Outcome t = torchrun(theirs, common, "env_dump.py", {theirs.string()}, base);
  ASSERT_EQ(t.code, 0) << describe(t);
  std::vector<std::string> launch_args = common;
  launch_args.insert(launch_args.end(), {"--log_dir", (ours / "logs").string()});
  const Outcome l = launch(ours, launch_args, "env_dump.py", {ours.string()}, base);
  ASSERT_EQ(l.code, 0) << describe(l);

  auto tr = read_dumps(theirs), us = read_dumps(ours);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Env& te = tr[r].env;
    const Env& ue = us[r].env;
    ASSERT_FALSE(te.empty()) << "torchrun's rank wrote no dump\n" << describe(t);
    ASSERT_FALSE(ue.empty()) << "launch's rank wrote no dump\n" << describe(l);
    EXPECT_TRUE(tr[r].launched) << "torchrun: is_torchelastic_launched()";
    EXPECT_TRUE(us[r].launched) << "launch: is_torchelastic_launched() must be true too";

    // Our reading of torchrun 1.13 is what it does (else this list, and the report, are stale).
    const std::set<std::string> theirs_added = added_by_launcher(te, base);
    EXPECT_EQ(theirs_added, kTorchrunVars) << "torchrun 1.13 set other variables than we list";

    // Every variable torchrun sets, launch sets too (under today's name where torch renamed it).
    std::string missing;
    for (const auto& name : kTorchrunVars) {
      if (!ue.count(current_name(name))) missing += " " + current_name(name);
    }
    EXPECT_EQ(missing, "") << "launch does not set torchrun's:" << missing;
    EXPECT_EQ(ue.count("NCCL_ASYNC_ERROR_HANDLING"), 0u)
        << "the deprecated spelling makes torch 2.x warn on every rank";

    for (const auto& name : kTorchrunVars) {
      if (!te.count(name) || !ue.count(current_name(name))) continue;
      const std::string& tv = te.at(name);
      const std::string& uv = ue.at(current_name(name));
      SCOPED_TRACE(name + ": torchrun " + tv + ", launch " + uv);
      if (name == "MASTER_PORT") {
        // Each run picks its own free port.
        EXPECT_TRUE(is_port(tv) && is_port(uv));
        EXPECT_EQ(uv, us[0].env["MASTER_PORT"]) << "every rank has the same master port";
      } else if (name == "TORCHELASTIC_RUN_ID") {
        // --standalone makes a fresh uuid; launch uses its job id. Same for all ranks.
        EXPECT_FALSE(uv.empty());
        EXPECT_EQ(uv, us[0].env["TORCHELASTIC_RUN_ID"]);
      } else if (name == "TORCHELASTIC_ERROR_FILE") {
        // torchrun: <tmp>/torchelastic_*/<run>/attempt_<n>/<local rank>/error.json; ours: one
        // file per rank. Both absolute .json paths, one per rank.
        EXPECT_TRUE(fs::path(uv).is_absolute() && fs::path(uv).extension() == ".json");
        if (r == 1) {
          EXPECT_NE(uv, us[0].env["TORCHELASTIC_ERROR_FILE"]);
        }
      } else if (name == "MASTER_ADDR") {
        // The same loopback host: torchrun --standalone says "localhost", launch the address.
        EXPECT_TRUE(tv == "localhost" || tv == "127.0.0.1");
        EXPECT_TRUE(uv == "localhost" || uv == "127.0.0.1");
      } else if (name == "OMP_NUM_THREADS") {
        // torchrun: 1 whenever 2+ workers share a node; launch: max(1, cores / workers).
        EXPECT_EQ(tv, "1");
        EXPECT_TRUE(std::regex_match(uv, std::regex("[1-9][0-9]*")));
      } else {
        EXPECT_EQ(uv, tv) << "launch gives " << name << " another value than torchrun";
      }
    }
  }
}

TEST_F(TorchPrograms, EnvironmentIsTorchruns) {
  compare_environments(dir("launch"), dir("torchrun"), {});
}

TEST_F(TorchPrograms, EnvironmentIsTorchrunsWithMaxRestarts) {
  const fs::path ours = dir("launch");
  compare_environments(ours, dir("torchrun"), {"--max_restarts", "2"});
  EXPECT_EQ(read_dumps(ours)[1].env["TORCHELASTIC_MAX_RESTARTS"], "2");
}

// ---- 4. Restart --------------------------------------------------------------------------------

// restart.py: every attempt joins the group and all-reduces; rank 1 fails in attempt 0 only.
void expect_two_attempts(const fs::path& out, const std::string& who, bool same_port) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string name =
          "attempt" + std::to_string(attempt) + ".rank" + std::to_string(rank) + ".json";
      SCOPED_TRACE(who + ": " + name);
      json j = read_json(out / name);
      ASSERT_TRUE(j.is_object()) << "missing: that rank did not finish its all-reduce";
      EXPECT_EQ(j["all_reduce"], 3.0) << "1 + 2 over the two ranks";
      EXPECT_EQ(j["restart_count"], std::to_string(attempt));
      EXPECT_EQ(j["max_restarts"], "1");
    }
  }
  if (same_port) {
    EXPECT_EQ(read_json(out / "attempt1.rank0.json")["master_port"],
              read_json(out / "attempt0.rank0.json")["master_port"])
        << who << ": rank 0 binds the same MASTER_PORT again after the restart";
  }
  EXPECT_FALSE(fs::exists(out / "attempt2.rank0.json")) << who << ": one restart only";
}

TEST_F(TorchPrograms, RestartedGroupInitializesAgain) {
  const Env env = clean_environment();
  const fs::path ours = dir("launch"), theirs = dir("torchrun");

  const Outcome l = launch(
      ours, {"--nproc_per_node=2", "--max_restarts=1", "--log_dir", (ours / "logs").string()},
      "restart.py", {ours.string()}, env);
  EXPECT_EQ(l.code, 0) << describe(l);
  EXPECT_TRUE(contains(l.err, "restart 1 of 1")) << l.err;
  EXPECT_TRUE(contains(l.err, "after 1 restart(s)")) << l.err;
  // launch keeps MASTER_PORT across restarts (rank 0's endpoint), so this checks that the new rank
  // 0's TCPStore can bind it right after the old one exited.
  expect_two_attempts(ours, "launch", /*same_port=*/true);

  const Outcome t = torchrun(theirs, {"--nproc_per_node=2", "--max_restarts=1"}, "restart.py",
                             {theirs.string()}, env);
  EXPECT_EQ(t.code, 0) << describe(t);
  // torchrun --standalone picks a fresh port for every rendezvous round.
  expect_two_attempts(theirs, "torchrun", /*same_port=*/false);
}

}  // namespace
