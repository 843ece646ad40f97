// Python programs run by the built `launch` with the command lines torchrun and Paddle users type:
// a plain .py (no exec bit, no shebang), -m with PYTHONPATH, --no_python, --run_path, --python; the
// environment a script sees (PYTHONUNBUFFERED, proxies, MASTER_ADDR/PORT as given,
// FLAGS_selected_gpus relative to CUDA_VISIBLE_DEVICES); what the console shows (--print_config
// False, --tee, --local_ranks_filter), appended logs, and a script's own exit code 2. The scripts
// use the standard library only and run with the python3 first on PATH, as launch runs them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/launch/launch_helpers.h"

namespace {

using namespace ddl::launch_test;

constexpr milliseconds kTimeout{30'000};

// Writes a script with mode 0644: neither executable nor (unless `text` has one) with a shebang.
fs::path write_script(const TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path p = dir.path() / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                         fs::perms::others_read);
  return p;
}

// Prints how it was started: the interpreter's argv, its own argv, and chosen variables.
const char* kShowScript = R"(import os, sys
print("ORIG_ARGV", " ".join(sys.orig_argv[1:2]))
print("ARGS", sys.argv[1:])
print("NAME", __name__)
for name in os.environ.get("SHOW", "").split(","):
    if name:
        print("ENV", name + "=" + os.environ.get(name, "<unset>"))
print("RANK", os.environ["PADDLE_TRAINER_ID"], "DONE")
)";

std::string describe(LaunchRun& run) { return "stderr:\n" + run.err() + "\nstdout:\n" + run.out(); }

// ---- How the script is started -----------------------------------------------------------------

TEST(PythonLaunch, PlainScriptRunsUnderPythonUnbuffered) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "train.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", logs.string(), script.string(), "--lr",
                      "0.1", "-m", "x"});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = worker_log(logs, rank);
    SCOPED_TRACE("workerlog." + std::to_string(rank) + ":\n" + log);
    EXPECT_TRUE(contains(log, "ORIG_ARGV -u\n")) << "python3 -u SCRIPT, as torchrun runs it";
    EXPECT_TRUE(contains(log, "ARGS ['--lr', '0.1', '-m', 'x']\n")) << "script args untouched";
    EXPECT_TRUE(contains(log, "NAME __main__\n"));
    EXPECT_TRUE(contains(log, "RANK " + std::to_string(rank) + " DONE"));
  }
}

TEST(PythonLaunch, ModuleRunsFromPythonPath) {
  TempDir tmp;
  write_script(tmp, "pkg/trainer_mod.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp,
                {"--nproc_per_node=2", "--log_dir", logs.string(), "-m", "trainer_mod", "--epochs",
                 "1"},
                {{"PYTHONPATH", (tmp.path() / "pkg").string()}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string log = worker_log(logs, 1);
  EXPECT_TRUE(contains(log, "ORIG_ARGV -u\n")) << log;
  EXPECT_TRUE(contains(log, "ARGS ['--epochs', '1']\n")) << log;
  EXPECT_TRUE(contains(log, "NAME __main__\n")) << "run as python3 -u -m MODULE\n" << log;
  EXPECT_TRUE(contains(log, "RANK 1 DONE")) << log;

  LaunchRun dash(tmp, {"--log_dir", logs.string(), "--module", "trainer_mod"},
                 {{"PYTHONPATH", (tmp.path() / "pkg").string()}});
  EXPECT_EQ(dash.wait(kTimeout), 0) << describe(dash);
}

TEST(PythonLaunch, NoPythonRunsTheFileItself) {
  TempDir tmp;
  const fs::path plain = write_script(tmp, "plain.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  for (const std::string flag : {"--no_python", "--no-python"}) {
    LaunchRun run(tmp, {flag, "--log_dir", logs.string(), plain.string()});
    EXPECT_EQ(run.wait(kTimeout), 127) << flag << ": not executable\n" << describe(run);
    EXPECT_TRUE(contains(run.err(), plain.string())) << run.err();
  }
  // An executable with a shebang runs as itself: no -u in front of it.
  const fs::path exe = write_script(tmp, "exe.py", "#!/usr/bin/env python3\n" + std::string(kShowScript));
  fs::permissions(exe, fs::perms::owner_exec, fs::perm_options::add);
  LaunchRun run(tmp, {"--no_python", "--log_dir", logs.string(), exe.string(), "a"});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string log = worker_log(logs, 0);
  EXPECT_FALSE(contains(log, "ORIG_ARGV -u\n")) << log;
  EXPECT_TRUE(contains(log, "ARGS ['a']\n")) << log;
}

// torchrun's --run_path: a script without the .py ending still runs under the interpreter, even
// with --no_python beside it.
TEST(PythonLaunch, RunPathRunsAnyFileAsAScript) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "trainer", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--run-path", "--no_python", "--log_dir", logs.string(), script.string(), "z"});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  EXPECT_TRUE(contains(worker_log(logs, 0), "ORIG_ARGV -u\n")) << worker_log(logs, 0);
  EXPECT_TRUE(contains(worker_log(logs, 0), "ARGS ['z']\n")) << worker_log(logs, 0);
}

TEST(PythonLaunch, PythonFlagChoosesTheInterpreter) {
  TempDir tmp;
  const fs::path script = write_script(
      tmp, "which.py", "import sys\nprint('EXE', sys.executable)\nprint('ARGV0', sys.orig_argv[0])\n");
  // A wrapper interpreter that says it ran, then runs python3 with what it was given.
  const fs::path wrapper = write_script(tmp, "mypython", "#!/bin/sh\necho WRAPPED \"$@\"\nexec python3 \"$@\"\n");
  fs::permissions(wrapper, fs::perms::owner_exec, fs::perm_options::add);
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--python=" + wrapper.string(), "--log_dir", logs.string(), script.string()});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string log = worker_log(logs, 0);
  EXPECT_TRUE(contains(log, "WRAPPED -u " + script.string() + "\n")) << log;
  EXPECT_TRUE(contains(log, "EXE ")) << log;

  LaunchRun missing(tmp, {"--python=no_such_python_here", "--log_dir", logs.string(), script.string()});
  EXPECT_EQ(missing.wait(kTimeout), 127) << describe(missing);
  EXPECT_TRUE(contains(missing.err(), "no_such_python_here")) << missing.err();
}

// print() to a file is block-buffered without -u/PYTHONUNBUFFERED: a script printing a line every
// 0.2 s would look silent to --hang_timeout for its whole run.
TEST(PythonLaunch, QuietlyPrintingScriptDoesNotTripTheHangGuard) {
  TempDir tmp;
  const char* text =
      "#!/usr/bin/env python3\nimport time\nfor i in range(15):\n    print('step', i)\n"
      "    time.sleep(0.2)\n";
  const fs::path script = write_script(tmp, "steps.py", text);
  fs::permissions(script, fs::perms::owner_exec, fs::perm_options::add);
  const fs::path logs = tmp.path() / "logs";
  // Run as the interpreter itself would (--no_python, no -u): PYTHONUNBUFFERED=1 keeps it line by line.
  LaunchRun run(tmp, {"--nproc_per_node=2", "--hang_timeout=1", "--log_dir", logs.string(),
                      "--no_python", script.string()});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  EXPECT_TRUE(contains(worker_log(logs, 1), "step 14\n"));

  // The same script when the caller turns unbuffered output off: the guard sees nothing (so the
  // check above is what PYTHONUNBUFFERED=1 buys).
  LaunchRun buffered(tmp,
                     {"--nproc_per_node=2", "--hang_timeout=1", "--log_dir", logs.string(),
                      "--no_python", script.string()},
                     {{"PYTHONUNBUFFERED", ""}});
  EXPECT_EQ(buffered.wait(kTimeout), kExitDeadline) << describe(buffered);
  EXPECT_TRUE(contains(buffered.err(), "hang guard")) << buffered.err();
}

// ---- The environment the script sees -----------------------------------------------------------

TEST(PythonLaunch, UnbufferedAndNoProxiesKeptUnderOurNames) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "env.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--log_dir", logs.string(), script.string()},
                {{"SHOW",
                  "PYTHONUNBUFFERED,http_proxy,https_proxy,DDL_SAVED_HTTP_PROXY,DDL_SAVED_HTTPS_"
                  "PROXY,no_proxy,PADDLE_DISTRI_BACKEND"},
                 {"http_proxy", "http://proxy.example:3128"},
                 {"https_proxy", "http://proxy.example:3129"},
                 {"no_proxy", "localhost"}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  const std::string log = worker_log(logs, 0);
  EXPECT_TRUE(contains(log, "ENV PYTHONUNBUFFERED=1\n")) << log;
  EXPECT_TRUE(contains(log, "ENV http_proxy=<unset>\n")) << log;
  EXPECT_TRUE(contains(log, "ENV https_proxy=<unset>\n")) << log;
  EXPECT_TRUE(contains(log, "ENV DDL_SAVED_HTTP_PROXY=http://proxy.example:3128\n")) << log;
  EXPECT_TRUE(contains(log, "ENV DDL_SAVED_HTTPS_PROXY=http://proxy.example:3129\n")) << log;
  EXPECT_TRUE(contains(log, "ENV no_proxy=localhost\n")) << "other variables pass through\n" << log;
  EXPECT_TRUE(contains(log, "ENV PADDLE_DISTRI_BACKEND=gloo\n")) << "no GPU selected\n" << log;

  // The caller's own PYTHONUNBUFFERED is kept.
  LaunchRun kept(tmp, {"--log_dir", logs.string(), script.string()},
                 {{"SHOW", "PYTHONUNBUFFERED"}, {"PYTHONUNBUFFERED", "x"}});
  ASSERT_EQ(kept.wait(kTimeout), 0) << describe(kept);
  EXPECT_TRUE(contains(worker_log(logs, 0), "ENV PYTHONUNBUFFERED=x\n"));
}

TEST(PythonLaunch, MasterAddrAndPortAsGiven) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "env.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  const std::string port = std::to_string(free_loopback_port());
  LaunchRun run(tmp,
                {"--nproc-per-node=2", "--master-addr=localhost", "--master-port=" + port,
                 "--log-dir", logs.string(), script.string()},
                {{"SHOW", "MASTER_ADDR,MASTER_PORT,PADDLE_CURRENT_ENDPOINT"}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = worker_log(logs, rank);
    EXPECT_TRUE(contains(log, "ENV MASTER_ADDR=localhost\n")) << log;
    EXPECT_TRUE(contains(log, "ENV MASTER_PORT=" + port + "\n")) << log;
  }
  EXPECT_TRUE(contains(worker_log(logs, 0), "ENV PADDLE_CURRENT_ENDPOINT=localhost:" + port + "\n"))
      << "rank 0 serves on the master port\n"
      << worker_log(logs, 0);
}

TEST(PythonLaunch, SelectedGpusAreRelativeToCudaVisibleDevices) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "env.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  LaunchRun run(tmp, {"--selected_gpus=4,5", "--log_dir", logs.string(), script.string()},
                {{"SHOW", "FLAGS_selected_gpus,CUDA_VISIBLE_DEVICES"}, {"CUDA_VISIBLE_DEVICES", "4,5"}});
  ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  EXPECT_TRUE(contains(worker_log(logs, 0), "ENV FLAGS_selected_gpus=0\n")) << worker_log(logs, 0);
  EXPECT_TRUE(contains(worker_log(logs, 1), "ENV FLAGS_selected_gpus=1\n")) << worker_log(logs, 1);
  EXPECT_TRUE(contains(worker_log(logs, 1), "ENV CUDA_VISIBLE_DEVICES=4,5\n")) << worker_log(logs, 1);

  LaunchRun hidden(tmp, {"--selected_gpus=3", "--log_dir", logs.string(), script.string()},
                   {{"CUDA_VISIBLE_DEVICES", "4,5"}});
  EXPECT_EQ(hidden.wait(kTimeout), 2) << describe(hidden);
  EXPECT_TRUE(contains(hidden.err(), "CUDA_VISIBLE_DEVICES")) << hidden.err();
  EXPECT_EQ(count(hidden.err(), "\n"), 1) << "one line\n" << hidden.err();
}

// ---- What the console shows --------------------------------------------------------------------

TEST(PythonLaunch, PrintConfigFalseInTheSpaceForm) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "env.py", kShowScript);
  LaunchRun off(tmp, {"--print_config", "False", script.string()});
  ASSERT_EQ(off.wait(kTimeout), 0) << describe(off);
  EXPECT_FALSE(contains(off.out(), "Configuration Arguments")) << off.out();
  EXPECT_TRUE(contains(off.out(), "RANK 0 DONE")) << "False is the flag's value, the script runs\n"
                                                   << off.out();

  LaunchRun on(tmp, {"--print_config", "True", script.string()});
  ASSERT_EQ(on.wait(kTimeout), 0) << describe(on);
  EXPECT_TRUE(contains(on.out(), "-----------  Configuration Arguments -----------\n")) << on.out();
  EXPECT_TRUE(contains(on.out(), "log_level: 20\n")) << "Paddle's numeric level\n" << on.out();
}

// With --log_dir the console shows local rank 0 (unprefixed, as Paddle 1.8); --tee adds ranks,
// --local_ranks_filter chooses them; with more than one shown each line names its rank.
TEST(PythonLaunch, ConsoleShowsRankZeroTeeAndFilter) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "env.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  auto console = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"--nproc_per_node=3", "--print_config=false", "--log_dir",
                                     logs.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back(script.string());
    LaunchRun run(tmp, args);
    EXPECT_EQ(run.wait(kTimeout), 0) << describe(run);
    return run.out();
  };
  const std::string plain = console({});
  EXPECT_TRUE(contains(plain, "\nRANK 0 DONE\n")) << plain;
  EXPECT_FALSE(contains(plain, "RANK 1")) << plain;

  const std::string tee = console({"--tee", "0:3,2:1"});
  EXPECT_TRUE(contains(tee, "[rank 0] RANK 0 DONE\n")) << tee;
  EXPECT_TRUE(contains(tee, "[rank 2] RANK 2 DONE\n")) << tee;
  EXPECT_FALSE(contains(tee, "RANK 1")) << tee;

  const std::string all = console({"-t", "3"});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(all, "[rank " + std::to_string(r) + "] RANK " + std::to_string(r)))
        << all;
  }

  const std::string filtered = console({"--local-ranks-filter", "1"});
  EXPECT_TRUE(contains(filtered, "\nRANK 1 DONE\n") || filtered.rfind("RANK 1 DONE\n", 0) == 0)
      << filtered;
  EXPECT_FALSE(contains(filtered, "RANK 0")) << filtered;
  EXPECT_FALSE(contains(filtered, "RANK 2")) << filtered;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(contains(worker_log(logs, r), "RANK " + std::to_string(r) + " DONE"))
        << "the logs have every rank whatever the console shows";
  }
}

TEST(PythonLaunch, LogOverwriteFalseAppends) {
  TempDir tmp;
  const fs::path script = write_script(tmp, "env.py", kShowScript);
  const fs::path logs = tmp.path() / "logs";
  auto run_once = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"--log_dir", logs.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back(script.string());
    LaunchRun run(tmp, args);
    ASSERT_EQ(run.wait(kTimeout), 0) << describe(run);
  };
  run_once({});
  run_once({});
  EXPECT_EQ(count(worker_log(logs, 0), "RANK 0 DONE"), 1) << "Paddle 1.8: each job truncates";
  run_once({"--log_overwrite", "False"});
  run_once({"--log_overwrite=false"});
  EXPECT_EQ(count(worker_log(logs, 0), "RANK 0 DONE"), 3) << worker_log(logs, 0);
}

// A script's own sys.exit(2) is passed on as launch's exit code, and the summary says whose it is
// (launch's own 2 means a bad command line).
TEST(PythonLaunch, ScriptsOwnExitTwoIsPassedOnAndSaidToBeIts) {
  TempDir tmp;
  const fs::path script = write_script(
      tmp, "exit2.py", "import os, sys\nif os.environ['RANK'] == '1':\n    sys.exit(2)\n"
                       "import time\ntime.sleep(30)\n");
  LaunchRun run(tmp, {"--nproc_per_node=2", "--log_dir", (tmp.path() / "logs").string(),
                      script.string()});
  ASSERT_EQ(run.wait(kTimeout), 2) << describe(run);
  EXPECT_TRUE(std::regex_search(run.err(), std::regex(R"(job failed: rank 1 \(pid \d+\) exited with code 2)")))
      << run.err();
  EXPECT_TRUE(contains(run.err(), "launcher exit code 2 (rank 1's own exit code, passed on)"))
      << run.err();
  EXPECT_LT(run.elapsed(), milliseconds(15'000)) << "rank 0 was stopped, not waited for";
}

}  // namespace
