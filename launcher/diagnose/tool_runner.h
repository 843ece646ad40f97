// Running the stack tools: several short-lived child processes at once, their stdout and stderr
// read through pipes, all of them bounded by one deadline. A tool still running at the deadline is
// SIGKILLed with its whole process group and reaped, so nothing it started is left behind.
//
// Children are reaped by their own pid only (never waitpid(-1)), so a caller that reaps its own
// children on SIGCHLD (the supervisor) neither loses ours nor has its own taken. Each child leads
// its own process group, gets SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), starts
// with default signal dispositions and an empty signal mask, reads /dev/null, and inherits no file
// descriptor of the caller but its three pipes' ends.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/executable.h"

namespace ddl::launcher {

// Bytes kept of each of a tool's streams; the rest is read and dropped (and the cut is marked).
inline constexpr std::size_t kMaxToolOutputBytes = 8 * 1024 * 1024;

// After SIGKILL, how long to wait for the tool to be reapable. A process in uninterruptible sleep
// can outlast that; it is then left a zombie rather than stalling the caller.
inline constexpr std::chrono::milliseconds kKillReapTimeout{1000};

// One program to run. argv[0] is its path (no PATH search: see find_on_path).
struct ToolCommand {
  std::vector<std::string> argv;
};

// What became of one ToolCommand.
struct ToolResult {
  pid_t pid = -1;           // the tool's pid (and process group), -1 if it was not started
  std::string start_error;  // why it was not started (pipe or fork failure); empty if it was
  bool timed_out = false;   // still running at the deadline: SIGKILLed with its group
  bool reaped = false;      // its exit status was collected (false only if even SIGKILL stalled)
  int status = 0;           // the waitpid() status, when reaped
  std::string out;          // everything it wrote to stdout (at most kMaxToolOutputBytes)
  std::string err;          // the same for stderr
};

// Runs every command at once with `env` as its whole environment and returns one result per
// command, in order. Returns by `deadline` plus at most kKillReapTimeout. Never throws for a
// problem with one command; it goes into that command's result.
std::vector<ToolResult> run_tools(const std::vector<ToolCommand>& commands, const env::EnvMap& env,
                                  std::chrono::steady_clock::time_point deadline);

// The PATH search is env::find_on_path (env/executable.h).
using env::find_on_path;

// "exited with code 2", "was killed by SIGKILL": a waitpid() status in words.
std::string describe_exit(int status);

}  // namespace ddl::launcher
