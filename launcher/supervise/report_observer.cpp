#include "launcher/supervise/report_observer.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "launcher/report/run_report.h"

namespace ddl::launcher {

ReportObserver::ReportObserver(RunReport& report, std::optional<std::string> dir)
    : report_(report), dir_(std::move(dir)) {}

void ReportObserver::generation_started(Generation g, const std::vector<Worker>& workers) {
  // The world size is every node's: the trainers are told it.
  int world_size = 0;
  for (const Worker& w : workers) {
    if (w.role != env::Role::kTrainer) continue;
    if (auto v = env::lookup(w.env, env::kWorldSize)) world_size = std::atoi(v->c_str());
    break;
  }
  report_.generation_started(g.index(), WallClock::now(), world_size);
}

void ReportObserver::process_started(Generation g, const Process& p) {
  report_.process_started(p.name, p.role != env::Role::kTrainer, p.index, g.index(), p.pid,
                          WallClock::now());
}

void ReportObserver::process_line(const std::string& name, const std::string& line) {
  report_.process_line(name, line);
}

void ReportObserver::step_time(Generation, const Process& p, std::int64_t step,
                               double own_seconds) {
  report_.process_step(p.name, step, own_seconds);
}

void ReportObserver::straggler(Generation, const PaceTracker::Verdict& verdict) {
  report_.straggler(WallClock::now(), verdict.name, verdict.straggler, verdict.message);
}

void ReportObserver::pace(Generation g, const Process& p, const PaceTracker::Summary& pace) {
  if (pace.steps == 0 && !pace.last_checkpoint && pace.phases.empty()) return;  // nothing said
  RunPace run;
  run.steps = pace.steps;
  run.last_step = pace.last_step;
  run.last_checkpoint = pace.last_checkpoint;
  run.step_seconds = pace.step_seconds;
  run.own_seconds = pace.own_seconds;
  run.straggler = pace.straggler;
  run.phases = pace.phases;
  run.first_step_seconds = pace.first_step_seconds;
  run.batches_per_epoch = pace.batches_per_epoch;
  report_.process_pace(p.name, g.index(), run);
}

void ReportObserver::process_exited(Generation g, const Process& p) {
  ProcessUsage usage;
  usage.cpu_seconds =
      static_cast<double>(p.usage.ru_utime.tv_sec + p.usage.ru_stime.tv_sec) +
      static_cast<double>(p.usage.ru_utime.tv_usec + p.usage.ru_stime.tv_usec) / 1e6;
  usage.peak_rss_kib = p.usage.ru_maxrss;
  report_.process_exited(p.name, g.index(), p.status, usage, WallClock::now());
}

void ReportObserver::generation_ended(Generation g, const Outcome& outcome) {
  report_.generation_ended(g.index(), WallClock::now(), outcome.summary());
  write();
}

void ReportObserver::job_ended(int exit_code, const Outcome& outcome) {
  report_.job_ended(WallClock::now(), exit_code, exit_code == 0 ? "succeeded" : outcome.what());
  write();
}

void ReportObserver::write() {
  if (!dir_) return;
  try {
    std::filesystem::create_directories(*dir_);
    report_.write(*dir_);
  } catch (const std::exception& e) {
    spdlog::warn("could not write the run report: {}", e.what());
  }
}

}  // namespace ddl::launcher
