// How the supervisor words what it sees of its processes (supervisor.cpp and its observers):
// durations, the indices it starts, how a process ended, where to look after a failure or a hang,
// and which process to name as a failure's cause. Pure functions of the group; no I/O.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/generation.h"
#include "launcher/supervise/outcome.h"
#include "launcher/supervise/worker.h"
#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

// "12.0": elapsed seconds with one decimal.
std::string elapsed_text(std::chrono::steady_clock::duration d);

// "(ranks 0..3)", "(servers 0..1, ranks 0..1)": the indices of each role, in launch order.
std::string describe_indices(const std::vector<Worker>& workers);

// "starting 4 worker(s) (ranks 0..3): /path/to/train", "restart 1 of 3: starting ...".
std::string starting_line(Generation generation, int max_restarts,
                          const std::vector<Worker>& workers);

// " after 2 restart(s)"; empty for the first generation.
std::string after_restarts(Generation generation);

// How a reaped process ended, with the exception it recorded in its error file, e.g.
// "exited with code 1 (RuntimeError: boom)".
std::string ended(const WorkerGroup::Process& p);

// A trainer's rank; unset for a server or heter worker.
std::optional<int> rank_of(const WorkerGroup::Process& p);

// "hang guard: no output from any rank for 1 s; silent: ranks 0 (1.0 s), 1 (1.0 s)" for
// trainers only (every collective job); with servers each process is named: "rank 0 (1.0 s),
// server 1 (1.0 s)". Names the processes still running.
std::string describe_hang(const WorkerGroup& group, std::chrono::milliseconds hang_timeout,
                          std::chrono::steady_clock::time_point now);

// Where to look after `failure`: "; log: ...; its last N line(s):\n    ..." for a failed process;
// else (the hang guard, another node) each process's log and last line.
std::string failure_details(const WorkerGroup& group, const std::optional<Failure>& failure);

// How long before the first reaped failure's last line an earlier failure still counts.
inline constexpr std::chrono::seconds kEchoWindow{30};

// The failure that happened first, by time, given `first` (the place of the first process reaped
// failing): the process reaped first may only be an echo (a rank that saw its peer's connection
// close exits at once, while the peer that failed first is still tearing down, and may then die
// of the stop's SIGTERM). A process's failure time is when it last wrote output; besides `first`,
// candidates are processes that exited non-zero by themselves and processes whose last line
// reports an error, within kEchoWindow before `first`'s own last line. When `first` is a deadline
// exit (124: a rank gave up on a stuck peer), it stands: the stack dump names the stuck rank,
// which the stop then kills. Returns a place in the group (`first` when it stands).
std::size_t first_cause(const WorkerGroup& group, std::size_t first);

// Process `i` (reaped, failed by itself) as a Failure: its exit code, "rank 1 exited with code 3
// (RuntimeError: boom)", its place, name and rank.
Failure worker_failure(const WorkerGroup& group, std::size_t i);

// When `failure` (kWorker) is an echo of an earlier failure (first_cause()), that one as a
// Failure, and in `note` the line that says so; a cause the stop killed keeps `failure`'s exit
// code, not the stop's own signal. Unset when `failure` stands (or is no kWorker one).
std::optional<Failure> earlier_cause(const WorkerGroup& group, const Failure& failure,
                                     std::string& note);

// The line that ends a job that did not succeed on this node: "job failed: rank 1 (pid 42) exited
// with code 3; launcher exit code 3 ...", "stopped by SIGINT: ..." (a warning); empty text when the
// job succeeded.
struct EndLine {
  bool warning = false;
  std::string text;
};
EndLine job_end_line(const WorkerGroup& group, const Outcome& outcome, Generation generation,
                     int exit_code);

}  // namespace ddl::launcher
