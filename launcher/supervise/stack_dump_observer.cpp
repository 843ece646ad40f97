#include "launcher/supervise/stack_dump_observer.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "env/exit_codes.h"
#include "env/text.h"
#include "launcher/diagnose/stacks.h"
#include "launcher/supervise/describe.h"

namespace ddl::launcher {

namespace fs = std::filesystem;

StackDumpObserver::StackDumpObserver(std::optional<std::string> dir,
                                     std::chrono::milliseconds hang_timeout)
    : dir_(std::move(dir)), hang_timeout_(hang_timeout) {}

void StackDumpObserver::generation_failed(Generation g, const Failure& failure,
                                          const WorkerGroup& group) {
  if (failure.kind == Failure::Kind::kHang && failure.what.rfind("step timeout", 0) == 0) {
    dump(g, group, failure.what.substr(0, failure.what.find(" (")));
  } else if (failure.kind == Failure::Kind::kHang) {
    dump(g, group, "hang guard: no output for " + env::seconds_text(hang_timeout_) + " s");
  } else if (failure.kind == Failure::Kind::kWorker && failure.exit_code == kExitDeadline) {
    // A rank that gave up at a deadline waited for a peer: the stuck one is still running.
    dump(g, group,
         failure.process_name + " exited with code " + std::to_string(kExitDeadline) +
             " (a rendezvous or collective deadline passed)");
  }
}

void StackDumpObserver::stacks_requested(Generation g, const WorkerGroup& group) {
  dump(g, group, "SIGUSR1 to the launcher");
}

// Takes the stack of every thread of every running process and prints, per process, where our
// code is.
void StackDumpObserver::dump(Generation g, const WorkerGroup& group,
                             const std::string& reason) const {
  std::vector<StackTarget> targets;
  for (const auto& p : group.processes()) {
    if (p->running) targets.push_back(StackTarget{p->name, p->pid});
  }
  if (targets.empty()) return;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<ProcessStacks> stacks = collect_stacks(targets, StackOptions{});
  const std::vector<std::string> summary = summarize_stacks(stacks);
  std::string where = "stderr";
  if (dir_) {
    const std::string path =
        (fs::path(*dir_) / ("stacks." + std::to_string(g.index()) + ".txt")).string();
    try {
      fs::create_directories(*dir_);
      write_stacks(path, reason, stacks);
      where = path;
    } catch (const std::exception& e) {
      spdlog::warn("could not write the stack dump: {}", e.what());
    }
  }
  std::string lines;
  for (const std::string& line : summary) lines += "\n    " + line;
  if (where == "stderr") {
    for (const ProcessStacks& p : stacks) lines += "\n==== " + p.name + " ====\n" + p.text;
  }
  spdlog::warn("{}: stacks of {} process(es) in {} ({} s); innermost frame of our code:{}", reason,
               stacks.size(), where, elapsed_text(std::chrono::steady_clock::now() - started),
               lines);
}

}  // namespace ddl::launcher
