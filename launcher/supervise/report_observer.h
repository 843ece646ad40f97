// Feeds the run report (launcher/report/run_report.h) the loop's events, and writes it to its
// folder after every generation and at the end of the job (a write that fails is logged, never
// thrown).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/supervise/observers.h"

namespace ddl::launcher {

class RunReport;

class ReportObserver : public SupervisorObserver {
 public:
  // `report` must outlive the observer. `dir` is created when the report is written; unset: the
  // report is fed, never written.
  ReportObserver(RunReport& report, std::optional<std::string> dir);

  void generation_started(Generation g, const std::vector<Worker>& workers) override;
  void process_started(Generation g, const Process& p) override;
  void process_line(const std::string& name, const std::string& line) override;
  void step_time(Generation g, const Process& p, std::int64_t step, double own_seconds) override;
  void straggler(Generation g, const PaceTracker::Verdict& verdict) override;
  void pace(Generation g, const Process& p, const PaceTracker::Summary& pace) override;
  void process_exited(Generation g, const Process& p) override;
  void generation_ended(Generation g, const Outcome& outcome) override;
  void job_ended(int exit_code, const Outcome& outcome) override;

 private:
  void write();

  RunReport& report_;
  std::optional<std::string> dir_;
};

}  // namespace ddl::launcher
