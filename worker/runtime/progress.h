// Progress reports from a worker to the launcher that started it: "step N done", with how long
// named parts of the step took. `launch` names a pipe in DDL_PROGRESS_FD for every process; from
// the steps it learns the job's pace, names stragglers and catches a rank that stops finishing
// steps (launcher/health/progress.h has the protocol, docs/failures.md the rules). Without
// DDL_PROGRESS_FD (run by hand, or by another launcher) every call does nothing.
//
// Each message is one write() of one short line on a non-blocking pipe: a few hundred nanoseconds,
// never a wait (a message the pipe cannot take is dropped). Not thread-safe; cheap to copy.
//
//   ProgressReporter progress = ProgressReporter::from_env();
//   progress.step(step, {{"compute", compute_s}, {"allreduce", allreduce_s}});
//   progress.pause("evaluation");   // before something that is not a step
//   progress.checkpoint(step);      // the state after `step` is saved
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "env/contract.h"

namespace ddl {

class ProgressReporter {
 public:
  // A named part of a step and its seconds. Sections named allreduce, comm, collective or wait are
  // time spent waiting for the other ranks.
  struct Section {
    const char* name;
    double seconds;
  };

  // Inert.
  ProgressReporter() = default;
  // Writes to `fd` (-1: inert).
  explicit ProgressReporter(int fd) : fd_(fd) {}
  // The pipe DDL_PROGRESS_FD names in `vars`; inert when it is unset or not a descriptor number.
  static ProgressReporter from_env(const env::EnvMap& vars);

  bool active() const { return fd_ >= 0; }

  // Step `step` (1 for the first) is done.
  void step(std::int64_t step, std::initializer_list<Section> sections = {}) const;
  // What follows is not a step (an evaluation, a checkpoint's write): the step timeout waits for
  // the next step. `what` is a word or two for the launcher's messages.
  void pause(std::string_view what) const;
  // The state after step `step` is saved.
  void checkpoint(std::int64_t step) const;
  // Start-up reached `name` (one word: "store", "communicator"), for the run report's phases.
  void phase(std::string_view name) const;
  // Epoch `epoch` (from 0) starts and runs `batches` steps on this rank.
  void epoch(std::int64_t epoch, std::int64_t batches) const;

 private:
  void send(const char* line, int size) const;

  int fd_ = -1;
};

}  // namespace ddl
