// Who watches the agent loop (supervisor.cpp) besides the loop itself: the run report
// (report_observer.h) and the stack dumps (stack_dump_observer.h). The loop calls every observer
// at each event, on its own thread, in the order things happen.
//
// An observer only watches: it must not throw (it logs its own troubles; a report that cannot be
// written never takes the job down) and must not change the group or the outcome. Every method
// does nothing unless overridden.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launcher/cluster/generation.h"
#include "launcher/health/pace.h"
#include "launcher/supervise/outcome.h"
#include "launcher/supervise/worker.h"
#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

class SupervisorObserver {
 public:
  using Process = WorkerGroup::Process;

  virtual ~SupervisorObserver() = default;

  // Generation `g` is about to start `workers` (this node's, in launch order).
  virtual void generation_started(Generation /*g*/, const std::vector<Worker>& /*workers*/) {}
  // Process `p` of generation `g` was spawned (its pid is set).
  virtual void process_started(Generation /*g*/, const Process& /*p*/) {}
  // One whole output line of process `name` ("rank 3"), without its newline.
  virtual void process_line(const std::string& /*name*/, const std::string& /*line*/) {}
  // Process `p` finished `step`, `own_seconds` of it its own (a step pace.h counts).
  virtual void step_time(Generation /*g*/, const Process& /*p*/, std::int64_t /*step*/,
                         double /*own_seconds*/) {}
  // A straggler was named, or recovered (pace.h; the line is already logged).
  virtual void straggler(Generation /*g*/, const PaceTracker::Verdict& /*verdict*/) {}
  // Process `p` of generation `g` is reaped (process_exited follows): its pace in `g`.
  virtual void pace(Generation /*g*/, const Process& /*p*/, const PaceTracker::Summary& /*pace*/) {}
  // Process `p` of generation `g` was reaped: its status and usage are set.
  virtual void process_exited(Generation /*g*/, const Process& /*p*/) {}
  // Generation `g` has just failed here (`failure`: a process, the hang guard, another node),
  // before anything of `group` is stopped: what runs still runs as it was.
  virtual void generation_failed(Generation /*g*/, const Failure& /*failure*/,
                                 const WorkerGroup& /*group*/) {}
  // SIGUSR1 to the launcher: the user asks what the processes of `group` are doing.
  virtual void stacks_requested(Generation /*g*/, const WorkerGroup& /*group*/) {}
  // Generation `g` is over on this node (every process reaped, its output drained), as
  // `outcome` says, before the restart policy is asked.
  virtual void generation_ended(Generation /*g*/, const Outcome& /*outcome*/) {}
  // The job is over on this node: the launcher exits with `exit_code`; `outcome` is the last
  // generation's, its cause named, the summary already logged.
  virtual void job_ended(int /*exit_code*/, const Outcome& /*outcome*/) {}
};

using Observers = std::vector<std::unique_ptr<SupervisorObserver>>;

}  // namespace ddl::launcher
