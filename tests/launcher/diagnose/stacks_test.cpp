// collect_stacks on live processes: stuck_program traced by the real eu-stack and gdb, processes
// that are gone, and fake tools on a private PATH (one that hangs, one that fails, a py-spy) for
// what real tools do not do on demand. Then the summary lines and the dump file.
#include "launcher/diagnose/stacks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "launcher/diagnose/tool_runner.h"
#include "tests/support/poll.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace ddl::launcher {
namespace {

using namespace std::chrono_literals;
using ddl::testing::ChildProcess;
using ddl::testing::contains;
using ddl::testing::TempDir;

const std::string kStuckProgram = std::string(DDL_BIN_DIR) + "/stuck_program";

// stuck_program, started and waited for until it says "ready" (both threads in place).
std::unique_ptr<ChildProcess> start_stuck(const TempDir& dir, const std::string& name,
                                          std::vector<std::string> args = {}) {
  ddl::testing::SpawnOptions spawn;
  spawn.argv = {kStuckProgram};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.stdout_path = dir.file(name + ".out");
  auto child = std::make_unique<ChildProcess>(spawn);
  const bool ready =
      ddl::testing::wait_until([&] { return contains(child->out(), "ready"); }, 5000ms);
  EXPECT_TRUE(ready) << kStuckProgram << " did not print 'ready': " << child->out();
  return child;
}

// An executable shell script `name` in `dir`.
void write_tool(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.file(name);
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
}

StackOptions only(const std::string& tool) {
  StackOptions options;
  options.tools = {tool};
  options.timeout = 10000ms;
  return options;
}

bool tool_available(const std::string& tool) {
  return find_on_path(tool, "/usr/local/bin:/usr/bin:/bin").has_value();
}

void expect_stuck_program_stack(const ProcessStacks& s, const std::string& tool, int pid) {
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.tool, tool);
  EXPECT_EQ(s.pid, pid);
  EXPECT_EQ(s.threads, 2) << s.text;
  EXPECT_EQ(s.innermost, "ddl::test::wait_in_known_place") << s.text;
  EXPECT_EQ(s.innermost_tid, pid);
  EXPECT_TRUE(s.innermost_ours);
  EXPECT_TRUE(contains(s.text, "ddl::test::wait_in_second_thread")) << s.text;
}

TEST(CollectStacks, EuStackTakesEveryThread) {
  if (!tool_available(kEuStack)) GTEST_SKIP() << "eu-stack is not installed";
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  const auto started = std::chrono::steady_clock::now();
  const auto stacks = collect_stacks({{"rank 1", stuck->pid()}}, only(kEuStack));
  const double ms = ddl::testing::elapsed_ms(started);
  std::cout << "eu-stack collection of one process: " << ms << " ms\n";
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].name, "rank 1");
  expect_stuck_program_stack(stacks[0], kEuStack, stuck->pid());
  // Traced and let go: it still runs, not stopped.
  EXPECT_TRUE(ddl::testing::alive(stuck->pid()));
  EXPECT_NE(ddl::testing::stat_field(stuck->pid(), 3).value_or("?"), "T");
}

TEST(CollectStacks, GdbTakesEveryThread) {
  if (!tool_available(kGdb)) GTEST_SKIP() << "gdb is not installed";
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  const auto started = std::chrono::steady_clock::now();
  const auto stacks = collect_stacks({{"rank 0", stuck->pid()}}, only(kGdb));
  const double ms = ddl::testing::elapsed_ms(started);
  std::cout << "gdb collection of one process: " << ms << " ms\n";
  ASSERT_EQ(stacks.size(), 1u);
  expect_stuck_program_stack(stacks[0], kGdb, stuck->pid());
  EXPECT_TRUE(ddl::testing::alive(stuck->pid()));
  EXPECT_NE(ddl::testing::stat_field(stuck->pid(), 3).value_or("?"), "T");
}

TEST(CollectStacks, DefaultToolsUseANativeToolForANativeProcess) {
  if (!tool_available(kEuStack) && !tool_available(kGdb)) GTEST_SKIP() << "no native tool";
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  const auto stacks = collect_stacks({{"rank 0", stuck->pid()}}, StackOptions{});
  ASSERT_EQ(stacks.size(), 1u);
  expect_stuck_program_stack(stacks[0], tool_available(kEuStack) ? kEuStack : kGdb, stuck->pid());
}

TEST(CollectStacks, MainThreadOutsideOurCodeNamesTheOtherThread) {
  if (!tool_available(kEuStack)) GTEST_SKIP() << "eu-stack is not installed";
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck", {"--outside"});
  const auto stacks = collect_stacks({{"rank 3", stuck->pid()}}, only(kEuStack));
  ASSERT_EQ(stacks.size(), 1u);
  const ProcessStacks& s = stacks[0];
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.innermost, "ddl::test::wait_in_second_thread") << s.text;
  EXPECT_NE(s.innermost_tid, stuck->pid());
  EXPECT_GT(s.innermost_tid, 0);
  EXPECT_TRUE(s.innermost_ours);
  const auto lines = summarize_stacks(stacks);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "rank 3: ddl::test::wait_in_second_thread (thread " +
                          std::to_string(s.innermost_tid) +
                          "; the main thread is outside our code)");

  // No prefix matches: the main thread's innermost frame, marked as not ours.
  StackOptions options = only(kEuStack);
  options.ours = {"nobody::"};
  const auto foreign = collect_stacks({{"rank 3", stuck->pid()}}, options);
  EXPECT_EQ(foreign[0].innermost, "pause");
  EXPECT_FALSE(foreign[0].innermost_ours);
  EXPECT_EQ(summarize_stacks(foreign)[0], "rank 3: pause (no frame of our code in any thread)");
}

// A rank stopped by SIGSTOP (state T): its stack is taken with each tool in time, the summary
// says it is stopped and where, and it is left stopped (no SIGCONT), also when the tool hangs.
TEST(CollectStacks, StoppedProcessIsNamedStoppedAndLeftStopped) {
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  ASSERT_EQ(::kill(stuck->pid(), SIGSTOP), 0);
  ASSERT_TRUE(ddl::testing::wait_until(
      [&] { return ddl::testing::stat_field(stuck->pid(), 3).value_or("?") == "T"; }, 2000ms));
  for (const char* tool : {kEuStack, kGdb}) {
    if (!tool_available(tool)) continue;
    const auto started = std::chrono::steady_clock::now();
    const auto stacks = collect_stacks({{"rank 1", stuck->pid()}}, only(tool));
    EXPECT_LT(ddl::testing::elapsed_ms(started), 9000) << tool;
    ASSERT_EQ(stacks.size(), 1u);
    EXPECT_TRUE(stacks[0].stopped) << tool;
    expect_stuck_program_stack(stacks[0], tool, stuck->pid());
    EXPECT_EQ(summarize_stacks(stacks)[0],
              "rank 1: stopped (SIGSTOP or another stop signal), in "
              "ddl::test::wait_in_known_place")
        << tool;
    EXPECT_EQ(ddl::testing::stat_field(stuck->pid(), 3).value_or("?"), "T") << tool;
  }
  // A tool that hangs is killed at the deadline; the stopped process gets no SIGCONT.
  write_tool(dir, kEuStack, "/bin/sleep 30\n");
  StackOptions options = only(kEuStack);
  options.path = dir.str();
  options.timeout = 300ms;
  const auto stacks = collect_stacks({{"rank 1", stuck->pid()}}, options);
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_TRUE(stacks[0].stopped);
  EXPECT_EQ(summarize_stacks(stacks)[0],
            "rank 1: stopped (SIGSTOP or another stop signal), no stack (eu-stack did not "
            "finish within 300 ms (killed))");
  EXPECT_EQ(ddl::testing::stat_field(stuck->pid(), 3).value_or("?"), "T");
  ::kill(stuck->pid(), SIGCONT);
}

TEST(CollectStacks, SeveralProcessesKeepTheirOrder) {
  if (!tool_available(kEuStack)) GTEST_SKIP() << "eu-stack is not installed";
  TempDir dir("ddl_diag");
  auto a = start_stuck(dir, "a");
  auto b = start_stuck(dir, "b", {"--outside"});
  const auto stacks = collect_stacks({{"rank 0", a->pid()}, {"rank 1", b->pid()}}, only(kEuStack));
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0].pid, a->pid());
  EXPECT_EQ(stacks[0].innermost, "ddl::test::wait_in_known_place");
  EXPECT_EQ(stacks[1].pid, b->pid());
  EXPECT_EQ(stacks[1].innermost, "ddl::test::wait_in_second_thread");
}

// The supervisor handles SIGCHLD itself (a handler that interrupts system calls) and reaps its
// workers by pid; collect_stacks must work under that, leave the workers to it, and also work when
// SIGCHLD is ignored (the kernel then reaps the tools).
TEST(CollectStacks, CallersSigchldHandlingIsUndisturbed) {
  if (!tool_available(kEuStack)) GTEST_SKIP() << "eu-stack is not installed";
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  static volatile sig_atomic_t sigchld_count = 0;
  struct sigaction counting {};
  counting.sa_handler = [](int) { sigchld_count = sigchld_count + 1; };
  counting.sa_flags = 0;  // no SA_RESTART: poll() and waitpid() see EINTR
  struct sigaction previous {};
  ASSERT_EQ(::sigaction(SIGCHLD, &counting, &previous), 0);
  const auto handled = collect_stacks({{"rank 0", stuck->pid()}}, only(kEuStack));

  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGCHLD, &ignore, nullptr);
  const auto ignored = collect_stacks({{"rank 0", stuck->pid()}}, only(kEuStack));
  ::sigaction(SIGCHLD, &previous, nullptr);

  EXPECT_GT(sigchld_count, 0);
  expect_stuck_program_stack(handled.at(0), kEuStack, stuck->pid());
  expect_stuck_program_stack(ignored.at(0), kEuStack, stuck->pid());
  // The target is still ours to reap, and it runs: it ends on SIGTERM with code 0.
  ASSERT_EQ(::kill(stuck->pid(), SIGTERM), 0);
  EXPECT_EQ(stuck->wait(5000ms), 0);
}

TEST(CollectStacks, ProcessesThatAreGoneGiveAnErrorNotAHang) {
  TempDir dir("ddl_diag");
  ddl::testing::SpawnOptions spawn;
  spawn.argv = {"/bin/true"};
  spawn.stdout_path = dir.file("true.out");
  ChildProcess reaped(spawn);
  ASSERT_EQ(reaped.wait(5000ms), 0);
  // A zombie: exited, not reaped yet (as a worker is between its exit and the supervisor's
  // waitpid).
  ChildProcess zombie(spawn);
  ASSERT_TRUE(ddl::testing::wait_until(
      [&] { return ddl::testing::stat_field(zombie.pid(), 3).value_or("") == "Z"; }, 5000ms));

  const auto started = std::chrono::steady_clock::now();
  const auto stacks = collect_stacks(
      {{"rank 0", reaped.pid()}, {"rank 1", zombie.pid()}, {"rank 2", -1}}, StackOptions{});
  EXPECT_LT(ddl::testing::elapsed_ms(started), 1000);
  ASSERT_EQ(stacks.size(), 3u);
  EXPECT_EQ(stacks[0].error,
            "process " + std::to_string(reaped.pid()) + " is gone (it has exited)");
  EXPECT_EQ(stacks[1].error,
            "process " + std::to_string(zombie.pid()) + " has exited (a zombie, not reaped yet)");
  EXPECT_EQ(stacks[2].error, "no process id (pid -1)");
  for (const auto& s : stacks) {
    EXPECT_EQ(s.tool, "");
    EXPECT_EQ(s.threads, 0);
  }
  EXPECT_EQ(
      summarize_stacks(stacks)[0],
      "rank 0: no stack (process " + std::to_string(reaped.pid()) + " is gone (it has exited))");
}

TEST(CollectStacks, NoToolGivesAClearError) {
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  StackOptions none;
  none.tools = {};
  EXPECT_EQ(collect_stacks({{"rank 0", stuck->pid()}}, none)[0].error,
            "no stack tool configured (the list of tools is empty)");

  TempDir empty("ddl_diag_path");
  StackOptions missing;
  missing.tools = {kEuStack, kGdb};
  missing.path = empty.str();
  const auto stacks = collect_stacks({{"rank 0", stuck->pid()}}, missing);
  EXPECT_EQ(stacks[0].error,
            "no stack tool on PATH: eu-stack, gdb not found in '" + empty.str() + "'");
  EXPECT_EQ(stacks[0].tool, "");

  // py-spy alone does not apply to a native process.
  write_tool(empty, kPySpy, "echo should not run\n");
  StackOptions python_only;
  python_only.tools = {kPySpy};
  python_only.path = empty.str();
  EXPECT_EQ(collect_stacks({{"rank 0", stuck->pid()}}, python_only)[0].error,
            "no stack tool for a native process (py-spy is for Python processes only)");

  StackOptions unknown;
  unknown.tools = {"lldb"};
  EXPECT_THROW(collect_stacks({{"rank 0", stuck->pid()}}, unknown), std::invalid_argument);
}

TEST(CollectStacks, HangingToolIsKilledAtTheDeadlineWithItsChildren) {
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  // The fake eu-stack leaves a child of its own (the sleep) and records both pids.
  write_tool(dir, kEuStack,
             "echo $$ > " + dir.file("tool.pid") + "\n/bin/sleep 30 &\necho $! > " +
                 dir.file("sleep.pid") + "\necho 'PID 1 - process'\nwait\n");
  StackOptions options = only(kEuStack);
  options.path = dir.str();
  options.timeout = 500ms;
  const auto started = std::chrono::steady_clock::now();
  const auto stacks = collect_stacks({{"rank 1", stuck->pid()}}, options);
  const double ms = ddl::testing::elapsed_ms(started);
  EXPECT_GE(ms, 450);
  EXPECT_LT(ms, 2500);
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].error, "eu-stack did not finish within 500 ms (killed)");
  EXPECT_EQ(stacks[0].tool, "");

  const int tool_pid = std::stoi(ddl::testing::read_file(dir.file("tool.pid")));
  const int sleep_pid = std::stoi(ddl::testing::read_file(dir.file("sleep.pid")));
  // The tool was reaped by us (no such process at all), its child was killed with its group.
  EXPECT_EQ(::kill(tool_pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(ddl::testing::wait_until([&] { return !ddl::testing::alive(sleep_pid); }, 2000ms));
  EXPECT_TRUE(ddl::testing::live_members({tool_pid}).empty());
  // The target runs on.
  EXPECT_TRUE(ddl::testing::alive(stuck->pid()));
}

TEST(CollectStacks, ToolsRunConcurrently) {
  TempDir dir("ddl_diag");
  auto a = start_stuck(dir, "a");
  auto b = start_stuck(dir, "b");
  auto c = start_stuck(dir, "c");
  // A slow eu-stack: 1 s each, so three in a row would take 3 s.
  write_tool(dir, kEuStack,
             "/bin/sleep 1\necho \"TID $2:\"\necho '#0  0x0000000000001000 pause'\n"
             "echo '#1  0x0000000000002000 ddl::Slow::wait()'\n");
  StackOptions options = only(kEuStack);
  options.path = dir.str();
  options.timeout = 5000ms;
  const auto started = std::chrono::steady_clock::now();
  const auto stacks =
      collect_stacks({{"rank 0", a->pid()}, {"rank 1", b->pid()}, {"rank 2", c->pid()}}, options);
  EXPECT_LT(ddl::testing::elapsed_ms(started), 2500);
  ASSERT_EQ(stacks.size(), 3u);
  for (const auto& s : stacks) {
    EXPECT_EQ(s.error, "");
    EXPECT_EQ(s.threads, 1);
    EXPECT_EQ(s.innermost, "ddl::Slow::wait");
    EXPECT_EQ(s.innermost_tid, s.pid);
  }
}

TEST(CollectStacks, FailingToolGivesItsMessageAndMakesWayForTheNext) {
  TempDir dir("ddl_diag");
  auto stuck = start_stuck(dir, "stuck");
  write_tool(dir, kEuStack,
             "echo 'eu-stack: dwfl_linux_proc_attach pid 1: Operation not permitted' >&2\n"
             "echo 'second line' >&2\nexit 2\n");
  StackOptions options = only(kEuStack);
  options.path = dir.str();
  auto stacks = collect_stacks({{"rank 2", stuck->pid()}}, options);
  EXPECT_EQ(stacks[0].error,
            "eu-stack exited with code 2: eu-stack: dwfl_linux_proc_attach pid 1: Operation not "
            "permitted");
  EXPECT_EQ(summarize_stacks(stacks)[0],
            "rank 2: no stack (eu-stack exited with code 2: eu-stack: dwfl_linux_proc_attach pid "
            "1: Operation not permitted)");

  // With gdb next in line, gdb's stack is used.
  if (!tool_available(kGdb)) GTEST_SKIP() << "gdb is not installed";
  std::filesystem::create_symlink(*find_on_path(kGdb, "/usr/local/bin:/usr/bin:/bin"),
                                  dir.file(kGdb));
  options.tools = {kEuStack, kGdb};
  stacks = collect_stacks({{"rank 2", stuck->pid()}}, options);
  expect_stuck_program_stack(stacks[0], kGdb, stuck->pid());
}

TEST(CollectStacks, PySpyIsUsedForPythonProcessesOnly) {
  const std::string python = "/usr/bin/python3";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << "no " << python;
  TempDir dir("ddl_diag");
  ddl::testing::SpawnOptions spawn;
  spawn.argv = {python, "-c", "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"};
  spawn.stdout_path = dir.file("python.out");
  ChildProcess py(spawn);
  ASSERT_TRUE(ddl::testing::wait_until([&] { return contains(py.out(), "ready"); }, 10000ms));
  auto stuck = start_stuck(dir, "stuck");

  // The fake py-spy prints a dump in py-spy's format for the pid it is given ($3).
  write_tool(dir, kPySpy,
             "echo \"Process $3: python -c\"\necho 'Python v3.11.2 (/usr/bin/python3.11)'\n"
             "echo\necho \"Thread $3 (idle): \\\"MainThread\\\"\"\n"
             "echo '    <module> (<string>:3)'\n");
  write_tool(dir, kEuStack,
             "echo \"TID $2:\"\necho '#0  0x0000000000001000 pause'\n"
             "echo '#1  0x0000000000002000 ddl::Native::wait()'\n");
  StackOptions options;
  options.tools = {kPySpy, kEuStack};
  options.path = dir.str();
  const auto stacks = collect_stacks({{"rank 0", py.pid()}, {"rank 1", stuck->pid()}}, options);
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0].error, "");
  EXPECT_EQ(stacks[0].tool, kPySpy);
  EXPECT_EQ(stacks[0].innermost, "<module> (<string>:3)");
  EXPECT_TRUE(stacks[0].innermost_ours);
  EXPECT_EQ(stacks[1].tool, kEuStack);
  EXPECT_EQ(stacks[1].innermost, "ddl::Native::wait");
  const auto lines = summarize_stacks(stacks);
  EXPECT_EQ(lines[0], "rank 0: <module> (<string>:3)");
  EXPECT_EQ(lines[1], "rank 1: ddl::Native::wait");
}

ProcessStacks taken(std::string name, int pid, std::string innermost, int tid, bool ours) {
  ProcessStacks s;
  s.name = std::move(name);
  s.pid = pid;
  s.tool = kEuStack;
  s.threads = 3;
  s.text = "TID " + std::to_string(pid) + ":\n#0  0x1 " + innermost + "()\n";
  s.innermost = std::move(innermost);
  s.innermost_tid = tid;
  s.innermost_ours = ours;
  return s;
}

std::vector<ProcessStacks> sample_job() {
  ProcessStacks failed;
  failed.name = "rank 2";
  failed.pid = 125;
  failed.error = "eu-stack exited with code 2: no";
  ProcessStacks empty = taken("rank 3", 126, "", -1, false);
  return {taken("rank 0", 123, "ddl::GlooMesh::allreduce", 123, true),
          taken("rank 1", 124, "ddl::FaultInjector::at_step", 124, true), failed, empty};
}

TEST(StackReport, SummaryHasOneLinePerProcess) {
  EXPECT_EQ(summarize_stacks(sample_job()),
            (std::vector<std::string>{"rank 0: ddl::GlooMesh::allreduce",
                                      "rank 1: ddl::FaultInjector::at_step",
                                      "rank 2: no stack (eu-stack exited with code 2: no)",
                                      "rank 3: stack taken, but no frames in it"}));
  EXPECT_TRUE(summarize_stacks({}).empty());
  ProcessStacks stopped = taken("rank 4", 127, "ddl::FaultInjector::at_step", 127, true);
  stopped.stopped = true;
  EXPECT_EQ(summarize_stacks({stopped})[0],
            "rank 4: stopped (SIGSTOP or another stop signal), in ddl::FaultInjector::at_step");
}

TEST(StackReport, WriteStacksAppendsOneDumpPerCall) {
  TempDir dir("ddl_diag");
  const std::string path = dir.file("stacks.0.txt");
  write_stacks(path, "no progress for 30 s", sample_job());
  const std::string first = ddl::testing::read_file(path);
  EXPECT_EQ(first.rfind("==== stack dump: no progress for 30 s (", 0), 0u) << first;
  EXPECT_TRUE(contains(first,
                       " UTC) ====\nrank 0: ddl::GlooMesh::allreduce\n"
                       "rank 1: ddl::FaultInjector::at_step\n"
                       "rank 2: no stack (eu-stack exited with code 2: no)\n"))
      << first;
  EXPECT_TRUE(contains(first,
                       "\n==== rank 0 (pid 123, eu-stack, 3 threads) ====\nTID 123:\n"
                       "#0  0x1 ddl::GlooMesh::allreduce()\n"))
      << first;
  EXPECT_TRUE(contains(first,
                       "\n==== rank 2 (pid 125, no stack) ====\n"
                       "eu-stack exited with code 2: no\n"))
      << first;

  write_stacks(path, "second look", {sample_job()[0]});
  const std::string both = ddl::testing::read_file(path);
  EXPECT_EQ(both.substr(0, first.size()), first);
  EXPECT_EQ(ddl::testing::count(both, "==== stack dump: "), 2);
  EXPECT_TRUE(contains(both.substr(first.size()), "==== stack dump: second look ("));

  const std::string bad = dir.file("no/such/dir/stacks.txt");
  try {
    write_stacks(bad, "x", sample_job());
    FAIL() << "no exception for " << bad;
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), bad)) << e.what();
    EXPECT_TRUE(contains(e.what(), "No such file or directory")) << e.what();
  }
}

}  // namespace
}  // namespace ddl::launcher
