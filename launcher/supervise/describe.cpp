#include "launcher/supervise/describe.h"

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "env/text.h"
#include "launcher/supervise/exit_status.h"

namespace ddl::launcher {

namespace {

using Process = WorkerGroup::Process;

// "ranks 0..3" for trainers, "servers 0..1" for servers, "heter workers 0..2".
std::string index_range(env::Role role, int first, int last) {
  const std::string noun = role == env::Role::kServer         ? "servers "
                           : role == env::Role::kHeterTrainer ? "heter workers "
                                                              : "ranks ";
  return noun + std::to_string(first) + ".." + std::to_string(last);
}

// Whether a line reads like a failure report ("checkpoint failed: Too many open files",
// "RuntimeError: ..."), as opposed to progress output.
bool reports_error(const std::string& line) {
  std::string lower(line.size(), ' ');
  std::transform(line.begin(), line.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"error", "fail", "exception", "abort", "fatal"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string log_of(const Process& p, const std::string& without) {
  return p.output->log_path().empty() ? without : p.output->log_path();
}

}  // namespace

std::string elapsed_text(std::chrono::steady_clock::duration d) {
  const auto tenths = std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}

std::string describe_indices(const std::vector<Worker>& workers) {
  std::string out;
  std::size_t i = 0;
  while (i < workers.size()) {
    std::size_t j = i;
    while (j + 1 < workers.size() && workers[j + 1].role == workers[i].role) ++j;
    out += (out.empty() ? "" : ", ") +
           index_range(workers[i].role, workers[i].index, workers[j].index);
    i = j + 1;
  }
  return "(" + out + ")";
}

std::string starting_line(Generation generation, int max_restarts,
                          const std::vector<Worker>& workers) {
  const std::string restart = generation.first() ? std::string()
                                                 : "restart " + std::to_string(generation.index()) +
                                                       " of " + std::to_string(max_restarts) + ": ";
  return restart + "starting " + std::to_string(workers.size()) + " worker(s) " +
         describe_indices(workers) + ": " + (workers.empty() ? "" : workers.front().executable);
}

std::string after_restarts(Generation generation) {
  return generation.first() ? std::string()
                            : " after " + std::to_string(generation.index()) + " restart(s)";
}

std::string ended(const Process& p) {
  const std::string status = describe_status(p.status);
  return p.recorded_error ? status + " (" + *p.recorded_error + ")" : status;
}

std::optional<int> rank_of(const Process& p) {
  if (p.role == env::Role::kTrainer) return p.index;
  return std::nullopt;
}

std::string describe_hang(const WorkerGroup& group, std::chrono::milliseconds hang_timeout,
                          std::chrono::steady_clock::time_point now) {
  bool only_trainers = true;
  for (const auto& p : group.processes()) {
    if (p->running && p->role != env::Role::kTrainer) only_trainers = false;
  }
  std::ostringstream os;
  os << "hang guard: no output from any rank for " << env::seconds_text(hang_timeout)
     << " s; silent: ";
  if (only_trainers) os << "rank" << (group.running() > 1 ? "s " : " ");
  bool first = true;
  for (const auto& p : group.processes()) {
    if (!p->running) continue;
    os << (first ? "" : ", ") << (only_trainers ? std::to_string(p->index) : p->name) << " ("
       << elapsed_text(now - p->last_output) << " s)";
    first = false;
  }
  return os.str();
}

std::string failure_details(const WorkerGroup& group, const std::optional<Failure>& failure) {
  std::ostringstream os;
  if (failure && failure->process) {
    const Process& p = *group.processes().at(*failure->process);
    const auto& tail = p.output->tail();
    os << "; log: " << log_of(p, "console (no --log_dir)");
    if (tail.empty()) {
      os << "; it printed nothing";
    } else {
      os << "; its last " << tail.size() << " line(s):";
      for (const std::string& line : tail) os << "\n    " << line;
    }
    return os.str();
  }
  os << "; logs:";
  for (const auto& p : group.processes()) {
    const auto& tail = p->output->tail();
    os << "\n    " << p->name << " (" << log_of(*p, "console")
       << "): " << (tail.empty() ? std::string("printed nothing") : "last line: " + tail.back());
  }
  return os.str();
}

std::size_t first_cause(const WorkerGroup& group, std::size_t first) {
  const auto& processes = group.processes();
  const Process& reaped = *processes.at(first);
  if (WIFEXITED(reaped.status) && WEXITSTATUS(reaped.status) == kExitDeadline) return first;
  std::size_t cause = first;
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const Process& p = *processes[i];
    if (i == first || p.running || !p.started) continue;
    const bool exited_failing = WIFEXITED(p.status) && WEXITSTATUS(p.status) != 0;
    const auto& tail = p.output->tail();
    if (!exited_failing && (tail.empty() || !reports_error(tail.back()))) continue;
    if (p.last_output + kEchoWindow < reaped.last_output) continue;
    if (p.last_output < processes[cause]->last_output) cause = i;
  }
  return cause;
}

Failure worker_failure(const WorkerGroup& group, std::size_t i) {
  const Process& p = *group.processes().at(i);
  return Failure{Failure::Kind::kWorker,
                 exit_code_of(p.status),
                 p.name + " " + ended(p),
                 i,
                 p.name,
                 rank_of(p)};
}

std::optional<Failure> earlier_cause(const WorkerGroup& group, const Failure& failure,
                                     std::string& note) {
  if (failure.kind != Failure::Kind::kWorker || !failure.process) return std::nullopt;
  const std::size_t first = *failure.process;
  const std::size_t cause = first_cause(group, first);
  if (cause == first) return std::nullopt;
  const Process& reaped = *group.processes()[first];
  const Process& named = *group.processes()[cause];
  note = reaped.name + " exited first (" + ended(reaped) + "), but " + named.name +
         " failed before it (its last line came " +
         elapsed_text(reaped.last_output - named.last_output) + " s earlier): naming " +
         named.name + " as the cause";
  Failure renamed = worker_failure(group, cause);
  if (!WIFEXITED(named.status)) renamed.exit_code = failure.exit_code;
  return renamed;
}

EndLine job_end_line(const WorkerGroup& group, const Outcome& outcome, Generation generation,
                     int exit_code) {
  const std::string after = after_restarts(generation);
  const auto& failure = outcome.failure();
  const auto& stop = outcome.stopped();
  const std::string code = "launcher exit code " + std::to_string(exit_code);
  if (outcome.failed(Failure::Kind::kWorker)) {
    const Process& p = *group.processes()[*failure->process];
    // launch's own code 2 means a bad command line: say when a worker's 2 is passed on.
    const std::string passed_on =
        exit_code == kExitUsage ? " (" + p.name + "'s own exit code, passed on)" : std::string();
    return {false, "job failed" + after + ": " + p.name + " (pid " + std::to_string(p.pid) + ") " +
                       ended(p) + "; " + code + passed_on + failure_details(group, failure)};
  }
  if (outcome.failed(Failure::Kind::kHang)) {
    return {false, "job failed" + after + ": " + failure->what + "; " + code +
                       failure_details(group, failure)};
  }
  if (outcome.from_peer())
    return {false, "job failed" + after + ": " + failure->what + "; " + code};
  if (outcome.stopped(Stop::Kind::kInterrupted)) {
    return {true, "stopped by " + signal_name(stop->signal) + ": all " +
                      std::to_string(group.size()) + " worker(s) ended; exit code " +
                      std::to_string(exit_code)};
  }
  if (outcome.stopped(Stop::Kind::kSpawnFailed)) return {false, "job failed: " + stop->what};
  if (stop) return {false, "job failed: " + stop->what + "; " + code};
  return {};
}

}  // namespace ddl::launcher
