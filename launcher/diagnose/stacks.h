// Stack dumps of stuck processes. When a job hangs, the supervisor asks for a native stack of every
// thread of every live worker (py-spy's Python stack for a Python worker), appends them all to
// LOG_DIR/stacks.<generation>.txt and prints one line per process naming the innermost frame of
// our code, so that a user sees at once which rank waits where:
//   rank 0: ddl::GlooMesh::allreduce
//   rank 1: ddl::FaultInjector::at_step
//
// The stacks are taken by external tools run as child processes (eu-stack, gdb, py-spy), all
// processes at once, under one deadline; see tool_runner.h for how they are run and reaped (by
// their own pids only, so the caller's SIGCHLD handling is undisturbed). Tracing stops each target
// for a moment (ptrace) and leaves it running as before. Needs the right to ptrace the targets:
// root, or the same user with kernel.yama.ptrace_scope 0 (a parent may always trace its children
// where the scope is 1, but the tool is not their parent).
//
// Everything runs on the caller's thread, and collect_stacks returns only when its tools are gone;
// the functions share no state. If the launcher dies meanwhile, its tools get SIGKILL, and a
// killed tracer lets go of its target.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddl::launcher {

// A process to take the stack of.
struct StackTarget {
  std::string name;  // how messages name it: "rank 1", "server 0"
  int pid = -1;
};

// The stack of one StackTarget, or why there is none.
struct ProcessStacks {
  std::string name;
  int pid = -1;
  // The tool whose output `text` is: "eu-stack", "gdb" or "py-spy"; empty if none.
  std::string tool;
  std::string text;  // the tool's output, every thread (its stderr after it); empty if none
  // Why no stack was taken: no tool configured or on PATH, the process is gone, the tool timed out
  // or failed (with the first line it wrote to stderr). Empty when `text` holds a stack. When a
  // tool fails and a later one succeeds, the failure is only logged.
  std::string error;
  int threads = 0;  // threads in `text`
  // Where the process is stuck. For a native stack, the innermost frame of our code (a function
  // name starting with one of StackOptions::ours, without its argument list:
  // "ddl::GlooMesh::allreduce", "ddl::(anonymous namespace)::train"), looked for in the main
  // thread first, then in the other threads in order of thread id; if no thread has one, the main
  // thread's innermost frame ("pause") with `innermost_ours` false. For py-spy, the main thread's
  // innermost Python frame ("train_step (train.py:42)"). Empty when there is no stack or no frame.
  std::string innermost;
  int innermost_tid = -1;       // the thread `innermost` is on (== pid: the main thread)
  bool innermost_ours = false;  // `innermost` is a frame of our code (always, for py-spy)
  // The process was stopped (state T in /proc/PID/stat: SIGSTOP, or a terminal stop signal) when
  // the collection began. Its stack is still taken (a tracer attaches to a stopped process and
  // leaves it stopped), and it is never sent SIGCONT: whoever stopped it decides when it runs.
  bool stopped = false;
};

// How to take the stacks.
struct StackOptions {
  // For the whole collection: the tools run concurrently and each one still running at the
  // deadline is SIGKILLed (with its process group) and reaped, its target then marked timed out
  // (and sent SIGCONT, in case the killed tracer left it stopped). A tool that fails in time makes
  // way for the next one in `tools`, within the same deadline.
  std::chrono::milliseconds timeout{10000};
  // The tools in order of preference; "py-spy" is used for Python processes only (those whose
  // executable's name starts with "python"), "eu-stack" and "gdb" for any. The first one found on
  // `path` that applies is used.
  std::vector<std::string> tools{"py-spy", "eu-stack", "gdb"};
  // Prefixes of the functions that are ours, for ProcessStacks::innermost.
  std::vector<std::string> ours{"ddl::"};
  // Where the tools are looked up, PATH-style; empty: the launcher's own PATH. (The tools run with
  // the launcher's environment either way, less DEBUGINFOD_URLS and with LC_ALL=C.)
  std::string path;
};

// Tool names StackOptions::tools may hold.
inline constexpr const char* kEuStack = "eu-stack";
inline constexpr const char* kGdb = "gdb";
inline constexpr const char* kPySpy = "py-spy";

// The stacks of `targets`, one ProcessStacks per target in the same order. Returns within
// options.timeout (plus at most about a second if a killed tool is slow to die); leaves no tool
// process running. Never throws for a problem with one process: it goes into that process's
// `error`. Throws std::invalid_argument for a name in options.tools that is none of the above.
std::vector<ProcessStacks> collect_stacks(const std::vector<StackTarget>& targets,
                                          const StackOptions& options);

// One line per process, in order, without newlines:
//   "rank 1: ddl::FaultInjector::at_step"
//   "rank 1: ddl::Worker::poll (thread 4242; the main thread is outside our code)"
//   "rank 1: pause (no frame of our code in any thread)"
//   "rank 1: stack taken, but no frames in it"
//   "rank 2: no stack (eu-stack exited with code 2: eu-stack: dwfl_linux_proc_attach ...)"
//   "rank 3: stopped (SIGSTOP or another stop signal), in ddl::FaultInjector::at_step"
std::vector<std::string> summarize_stacks(const std::vector<ProcessStacks>& stacks);

// Appends one dump to the file `path`, creating it if missing: a header line with `reason` and the
// UTC time, the summary lines, then per process a block
//   ==== rank 1 (pid 123, eu-stack, 3 threads) ====
// followed by the tool's text (or the error). Throws std::runtime_error naming `path` and the
// system's reason when the file cannot be opened or written.
void write_stacks(const std::string& path, const std::string& reason,
                  const std::vector<ProcessStacks>& stacks);

}  // namespace ddl::launcher
