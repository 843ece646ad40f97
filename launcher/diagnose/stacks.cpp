#include "launcher/diagnose/stacks.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "env/contract.h"
#include "env/text.h"
#include "launcher/diagnose/stack_text.h"
#include "launcher/diagnose/tool_runner.h"
#include "logging/safe_open.h"

namespace ddl::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// PATH is not part of the worker contract, so it has no constant in env/contract.h; it is read
// from the environment snapshot like every other variable.
constexpr const char* kPathVariable = "PATH";
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
// elfutils and gdb fetch missing debug info from these servers: a dump must not wait on a network.
constexpr const char* kDebuginfodVariable = "DEBUGINFOD_URLS";
// The parsers read the tools' English messages and headings.
constexpr const char* kLocaleVariable = "LC_ALL";

// Characters of a tool's message quoted in an error.
constexpr std::size_t kMaxQuotedChars = 200;

bool is_python_tool(const std::string& tool) { return tool == kPySpy; }

std::vector<std::string> tool_argv(const std::string& tool, const std::string& exe, int pid) {
  const std::string p = std::to_string(pid);
  if (tool == kEuStack) return {exe, "-p", p};
  if (tool == kGdb) {
    // -nx: no user or system gdbinit may change the output; the -iex settings apply before the
    // attach, so no question is asked and nothing is fetched.
    return {exe,
            "-nx",
            "-batch",
            "-iex",
            "set debuginfod enabled off",
            "-iex",
            "set pagination off",
            "-p",
            p,
            "-ex",
            "thread apply all bt"};
  }
  return {exe, "dump", "--pid", p};
}

std::vector<ThreadStack> parse(const std::string& tool, const std::string& text) {
  if (tool == kEuStack) return parse_eu_stack(text);
  if (tool == kGdb) return parse_gdb(text);
  return parse_py_spy(text);
}

// Field 3 of /proc/<pid>/stat (R, S, D, Z, ...), or nullopt if there is no such process.
std::optional<char> process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return std::nullopt;
  const std::size_t paren = stat.rfind(')');  // the command name may hold spaces and parens
  if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
  return stat[paren + 2];
}

// Why `pid` cannot be traced at all, or empty if it is a live process.
std::string gone_reason(int pid) {
  if (pid <= 0) return "no process id (pid " + std::to_string(pid) + ")";
  const auto state = process_state(pid);
  if (!state) return "process " + std::to_string(pid) + " is gone (it has exited)";
  if (*state == 'Z' || *state == 'X') {
    return "process " + std::to_string(pid) + " has exited (a zombie, not reaped yet)";
  }
  return {};
}

bool is_python_process(int pid) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return !ec && exe.filename().string().rfind("python", 0) == 0;
}

// The first non-empty line of `text`, cut to kMaxQuotedChars; empty if none.
std::string first_line(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos) continue;
    line = line.substr(begin);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.size() > kMaxQuotedChars) line = line.substr(0, kMaxQuotedChars) + "...";
    return line;
  }
  return {};
}

// One target on its way through the tools it can use.
struct Attempt {
  std::vector<std::pair<std::string, std::string>> tools;  // name, path: those left to try
  std::size_t next = 0;
  std::vector<std::string> failures;  // one per tool that failed, in words
  bool done = false;
};

// The environment the tools run in: the launcher's, less what could make them slow or change
// their wording.
env::EnvMap tool_environment(env::EnvMap env) {
  env.erase(kDebuginfodVariable);
  env[kLocaleVariable] = "C";
  return env;
}

void record_stack(ProcessStacks& stacks, const std::string& tool, const ToolResult& run,
                  const std::vector<ThreadStack>& threads, const StackOptions& options) {
  stacks.tool = tool;
  stacks.text = run.out;
  if (!run.err.empty()) {
    // Partial unwinds and missing source files are reported there; worth keeping in the dump.
    if (!stacks.text.empty() && stacks.text.back() != '\n') stacks.text += '\n';
    stacks.text += "---- " + tool + " stderr ----\n" + run.err;
  }
  stacks.threads = static_cast<int>(threads.size());
  const std::vector<std::string> any_frame{""};
  const Innermost in =
      find_innermost(threads, stacks.pid, is_python_tool(tool) ? any_frame : options.ours);
  stacks.innermost = in.frame;
  stacks.innermost_tid = in.tid;
  stacks.innermost_ours = in.ours;
  stacks.error.clear();
}

// The failure of `run` in words, for a run that gave no stack.
std::string describe_failure(const std::string& tool, const ToolResult& run) {
  if (!run.start_error.empty()) return tool + " could not be started: " + run.start_error;
  std::string what = !run.reaped ? tool + " ended, its exit status unknown"
                     : WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0
                         ? tool + " printed no thread stacks"
                         : tool + " " + describe_exit(run.status);
  std::string said = first_line(run.err);
  if (said.empty()) said = first_line(run.out);
  return said.empty() ? what : what + ": " + said;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

}  // namespace

std::vector<ProcessStacks> collect_stacks(const std::vector<StackTarget>& targets,
                                          const StackOptions& options) {
  for (const std::string& tool : options.tools) {
    if (tool != kEuStack && tool != kGdb && tool != kPySpy) {
      throw std::invalid_argument("unknown stack tool '" + tool + "' (expected " +
                                  std::string(kEuStack) + ", " + kGdb + " or " + kPySpy + ")");
    }
  }
  const auto deadline = Clock::now() + options.timeout;
  const env::EnvMap launcher_env = env::current_environment();
  const std::string path = options.path.empty()
                               ? env::lookup(launcher_env, kPathVariable).value_or(kDefaultPath)
                               : options.path;
  std::map<std::string, std::optional<std::string>> found;
  for (const std::string& tool : options.tools) found[tool] = find_on_path(tool, path);

  std::vector<ProcessStacks> results(targets.size());
  std::vector<Attempt> attempts(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    ProcessStacks& r = results[i];
    r.name = targets[i].name;
    r.pid = targets[i].pid;
    Attempt& a = attempts[i];
    a.done = true;
    if (std::string gone = gone_reason(r.pid); !gone.empty()) {
      r.error = std::move(gone);
      continue;
    }
    r.stopped = process_state(r.pid) == 'T';
    if (options.tools.empty()) {
      r.error = "no stack tool configured (the list of tools is empty)";
      continue;
    }
    const bool python = is_python_process(r.pid);
    std::vector<std::string> missing;
    for (const std::string& tool : options.tools) {
      if (is_python_tool(tool) && !python) continue;
      if (found[tool]) {
        a.tools.emplace_back(tool, *found[tool]);
      } else {
        missing.push_back(tool);
      }
    }
    if (!a.tools.empty()) {
      a.done = false;
    } else if (!missing.empty()) {
      r.error =
          "no stack tool on PATH: " + env::join(missing, ", ") + " not found in '" + path + "'";
    } else {
      r.error = "no stack tool for a native process (" + std::string(kPySpy) +
                " is for Python processes only)";
    }
  }

  // Round after round: each target not done yet runs its next tool, all of them at once.
  for (;;) {
    std::vector<std::size_t> round;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (!attempts[i].done) round.push_back(i);
    }
    if (round.empty()) break;
    if (Clock::now() >= deadline) {
      for (std::size_t i : round) {
        attempts[i].failures.push_back("no time left for " +
                                       attempts[i].tools[attempts[i].next].first + " within " +
                                       std::to_string(options.timeout.count()) + " ms");
        results[i].error = env::join(attempts[i].failures, "; ");
      }
      break;
    }
    std::vector<ToolCommand> commands;
    for (std::size_t i : round) {
      const auto& [tool, exe] = attempts[i].tools[attempts[i].next];
      commands.push_back({tool_argv(tool, exe, results[i].pid)});
    }
    const std::vector<ToolResult> runs =
        run_tools(commands, tool_environment(launcher_env), deadline);

    for (std::size_t j = 0; j < round.size(); ++j) {
      ProcessStacks& r = results[round[j]];
      Attempt& a = attempts[round[j]];
      const std::string& tool = a.tools[a.next].first;
      const ToolResult& run = runs[j];
      ++a.next;
      if (run.timed_out) {
        // A tracer killed between its PTRACE_ATTACH and the detach can leave the target in the
        // stop that the attach's SIGSTOP began; SIGCONT undoes that and is harmless otherwise.
        // Not for a process that was stopped before: it stays as it was found.
        if (!r.stopped && gone_reason(r.pid).empty()) ::kill(r.pid, SIGCONT);
        a.failures.push_back(tool + " did not finish within " +
                             std::to_string(options.timeout.count()) + " ms (killed)");
        r.error = env::join(a.failures, "; ");
        a.done = true;
        continue;
      }
      const std::vector<ThreadStack> threads = parse(tool, run.out);
      // Unreaped without a timeout: the caller ignores SIGCHLD, so the kernel took the status;
      // the output is all there is to judge by.
      const bool exited = !run.reaped || WIFEXITED(run.status);
      if (run.start_error.empty() && exited && !threads.empty()) {
        record_stack(r, tool, run, threads, options);
        if (!a.failures.empty()) {
          spdlog::warn("stack of {} (pid {}) taken with {} after: {}", r.name, r.pid, tool,
                       env::join(a.failures, "; "));
        }
        a.done = true;
        continue;
      }
      a.failures.push_back(describe_failure(tool, run));
      r.error = env::join(a.failures, "; ");
      if (std::string gone = gone_reason(r.pid); !gone.empty()) {
        r.error += " (" + gone + ")";
        a.done = true;
      } else if (a.next >= a.tools.size()) {
        a.done = true;
      }
    }
  }
  return results;
}

std::vector<std::string> summarize_stacks(const std::vector<ProcessStacks>& stacks) {
  std::vector<std::string> lines;
  for (const ProcessStacks& s : stacks) {
    std::string line = s.name + ": ";
    // /proc tells a stop apart but not which signal caused it; SIGSTOP is the usual one.
    if (s.stopped) line += "stopped (SIGSTOP or another stop signal), ";
    if (s.stopped && s.error.empty() && !s.tool.empty() && !s.innermost.empty()) line += "in ";
    if (!s.error.empty() || s.tool.empty()) {
      line += "no stack (" + (s.error.empty() ? std::string("not taken") : s.error) + ")";
    } else if (s.innermost.empty()) {
      line += "stack taken, but no frames in it";
    } else if (!s.innermost_ours) {
      line += s.innermost + " (no frame of our code in any thread)";
    } else if (s.innermost_tid != s.pid && !is_python_tool(s.tool)) {
      const std::string thread =
          s.innermost_tid > 0 ? "thread " + std::to_string(s.innermost_tid) : "another thread";
      line += s.innermost + " (" + thread + "; the main thread is outside our code)";
    } else {
      line += s.innermost;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

void write_stacks(const std::string& path, const std::string& reason,
                  const std::vector<ProcessStacks>& stacks) {
  std::string dump = "==== stack dump: " + reason + " (" + utc_now() + ") ====\n";
  for (const std::string& line : summarize_stacks(stacks)) dump += line + "\n";
  for (const ProcessStacks& s : stacks) {
    dump += "\n==== " + s.name + " (pid " + std::to_string(s.pid);
    if (s.error.empty() && !s.tool.empty()) {
      dump += ", " + s.tool + ", " + std::to_string(s.threads) +
              (s.threads == 1 ? " thread" : " threads") + ") ====\n" + s.text;
    } else {
      dump += ", no stack) ====\n" + (s.error.empty() ? std::string("not taken") : s.error);
    }
    if (dump.back() != '\n') dump += '\n';
  }
  dump += '\n';

  std::string why;
  const int fd = logging::open_for_writing(path, logging::WriteMode::kAppend, why);
  if (fd < 0) throw std::runtime_error("stack dump file: " + why);
  std::size_t written = 0;
  while (written < dump.size()) {
    const ssize_t n = ::write(fd, dump.data() + written, dump.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      throw std::runtime_error("cannot write the stack dump file '" + path +
                               "': " + std::strerror(n < 0 ? saved : EIO));
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    throw std::runtime_error("cannot write the stack dump file '" + path +
                             "': " + std::strerror(errno));
  }
}

}  // namespace ddl::launcher
