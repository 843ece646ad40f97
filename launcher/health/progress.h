// The progress protocol: how a worker in any language tells its launcher where it is.
//
// The launcher gives every process it starts the write end of a pipe of its own and names it in
// DDL_PROGRESS_FD (env/contract.h). A worker that wants its steps watched writes one line per
// message there, each in one write() of at most kMaxProgressLine bytes (so lines never mix):
//
//   step N [NAME=SECONDS ...]   step N (1, 2, ...) is done; optionally how long named parts of it
//                               took ("data=0.002 compute=0.031 allreduce=0.004")
//   pause [WHAT]                what follows is not a step (an evaluation, a checkpoint): the
//                               step-time rules wait for the next "step"
//   checkpoint N                the state after step N is saved
//   phase NAME                  start-up reached NAME ("store": joined the store,
//                               "communicator": the communicator is built), for the run report
//   epoch E B                   epoch E (from 0) starts, B batches (steps) long on this rank:
//                               the run report's loss chart draws fractional epochs with it
//
// Sections named allreduce, comm, collective or wait are time spent waiting for the other ranks;
// the rest of a step is the rank's own time, which is what the straggler rule compares (in a
// synchronous job every rank's step takes as long as the slowest one's; only the own time tells
// which rank that is). A worker that writes nothing is watched as before (exit codes and the fixed
// --hang_timeout). The pipe is non-blocking: a write the launcher cannot take at once fails with
// EAGAIN and the message is lost, never the training's time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddl::launcher {

// Longer lines are not messages (and are dropped).
inline constexpr std::size_t kMaxProgressLine = 512;

struct ProgressMessage {
  enum class Kind { kStep, kPause, kCheckpoint, kPhase, kEpoch };
  Kind kind = Kind::kStep;
  std::int64_t step = 0;     // kStep, kCheckpoint; kEpoch: the epoch
  std::int64_t batches = 0;  // kEpoch: its length in steps (> 0)
  // kStep: the named sections, in the order given (seconds, finite and >= 0).
  std::vector<std::pair<std::string, double>> sections;
  std::string what;  // kPause: what the worker is doing, may be empty; kPhase: the phase

  // kStep: seconds of the step spent waiting for the other ranks (the waiting sections' sum).
  double waiting_seconds() const;
};

// True for a section that is waiting on the other ranks (see above).
bool is_waiting_section(std::string_view name);

// One line as the worker wrote it (without its newline; a trailing '\r' is ignored). nullopt, with
// `error` saying what is wrong, for anything that is not a message of the protocol.
std::optional<ProgressMessage> parse_progress_line(std::string_view line, std::string& error);

}  // namespace ddl::launcher
