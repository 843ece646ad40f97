// The run report: what one node of a job did, written as LOG_DIR/report.json (for tools) and
// LOG_DIR/report.html (for people, one self-contained page: no scripts, fonts or styles fetched,
// the charts are inline SVG).
//
// The supervisor feeds a RunReport the job's events as they happen: generations starting and
// ending, processes starting, each of their output lines, their exits with the rusage of wait4().
// Per process the report keeps start/end, exit, generations, line count, peak RSS and CPU time;
// from the output lines of train_mnist workers it also keeps the training metrics:
//
//   epoch: E, batch: B, loss is: [L]                 progress: a point of the loss curve
//   epoch: E, test accuracy: A (C/T)                 A a ratio (0.9712) or a percentage (97.12%)
//   epoch: E, mean loss: L, images/s: R              the epoch's mean loss and this rank's rate
//
// Leading whitespace (and a trailing '\r') is ignored; any other line is only counted. A line that
// starts like one of these ("epoch: ") but does not parse is counted as malformed. A restart runs a
// fresh generation whose epochs start again (a resumed worker may start at epoch 3), so epoch
// metrics are keyed by (generation, epoch) and loss points carry their generation.
//
// Memory stays bounded however long the job runs: at most kMaxLossPoints loss points per process
// (when more arrive the kept ones are thinned to every other one, so the curve stays evenly
// sampled; the first and the latest point are always kept) and at most kMaxEpochRecords
// (generation, epoch) records per process (later epochs are counted but not kept).
//
// Events about a process or generation the report has not heard of are recorded as well as they
// can be (the process or generation is added); they never throw, so the report cannot take the
// job down. Move-only; not thread-safe: one thread (the supervisor's) feeds and writes it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddl::launcher {

// Wall-clock time: the report shows dates, and its times are compared across nodes.
using WallClock = std::chrono::system_clock;

// Loss points kept per process (see above); 2048 points are about 64 KiB.
inline constexpr std::size_t kMaxLossPoints = 2048;

// (generation, epoch) records kept per process.
inline constexpr std::size_t kMaxEpochRecords = 4096;

// The "format" field of report.json, and its version (raised when a field changes meaning).
inline constexpr const char* kReportFormat = "ddlaunch-run-report";
inline constexpr int kReportVersion = 1;

// A report could not be written or read; the message names the file and the reason.
class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What wait4() reports about a reaped process.
struct ProcessUsage {
  double cpu_seconds = 0;  // user + system time
  long peak_rss_kib = 0;   // ru_maxrss
};

// What the launcher learnt of a process's pace in one run from its progress messages
// (launcher/health/pace.h).
struct RunPace {
  std::int64_t steps = 0;
  std::optional<std::int64_t> last_step;
  std::optional<std::int64_t> last_checkpoint;
  std::optional<double> step_seconds;  // median of its last steps
  std::optional<double> own_seconds;   // ... without the time spent waiting for the other ranks
  bool straggler = false;              // named a straggler when it ended
  // Start-up: seconds from its start to each phase it reported ("store", "communicator") and
  // to its first step.
  std::vector<std::pair<std::string, double>> phases;
  std::optional<double> first_step_seconds;
  std::optional<std::int64_t> batches_per_epoch;  // as the worker said ("epoch E B")
};

// One pre-flight check (--preflight) as this node saw it.
struct PreflightNumbers {
  struct Node {
    int node = -1;
    double gflops = 0;                   // its matmul
    std::optional<double> best_out_mbs;  // its best link out, MB/s; null: none worked
    std::optional<double> best_in_mbs;   // its best link in
    std::string named;                   // why it was named; empty: it passed
  };
  int generation = 0;
  double seconds = 0;   // this node's time in the check
  std::string outcome;  // "passed", or what followed
  std::vector<Node> nodes;
};

// Pre-flight checks kept (one per generation; later ones are counted).
inline constexpr std::size_t kMaxPreflightChecks = 64;

// Straggler lines kept (later ones are counted).
inline constexpr std::size_t kMaxStragglerEvents = 256;

class RunReport {
 public:
  struct JobInfo {
    std::string job_id;
    std::string worker;  // the program's path as given to launch
    int node_rank = 0;
    int nnodes = 1;
  };

  explicit RunReport(JobInfo info);
  RunReport(const RunReport&) = delete;
  RunReport& operator=(const RunReport&) = delete;
  RunReport(RunReport&&) noexcept;
  RunReport& operator=(RunReport&&) noexcept;
  ~RunReport();

  // Generation `generation` (0 first, one more per restart) started `world_size` processes (all
  // nodes) at `at`.
  void generation_started(int generation, WallClock::time_point at, int world_size);

  // It ended: `outcome` is one line ("succeeded", "rank 1 exited with code 3", "hung: ...",
  // "restart: node 1 rank 3 exited ...").
  void generation_ended(int generation, WallClock::time_point at, const std::string& outcome);

  // Process `name` ("rank 3", "server 1"; `index` is the 3 or the 1) started in `generation`.
  // The lines that follow belong to that generation until the process starts again.
  void process_started(const std::string& name, bool server, int index, int generation, int pid,
                       WallClock::time_point at);

  // One whole output line of process `name`, without its newline. Cheap enough for every line:
  // most are rejected by their first characters, none is copied.
  void process_line(const std::string& name, std::string_view line);

  // Process `name`'s run in `generation` was reaped with `wait_status` (as from waitpid).
  void process_exited(const std::string& name, int generation, int wait_status,
                      const ProcessUsage& usage, WallClock::time_point at);

  // Process `name`'s pace in its run of `generation`, told when that run ends.
  void process_pace(const std::string& name, int generation, const RunPace& pace);

  // Process `name` finished `step` (in the generation of its latest start) with `own_seconds` of
  // its own (the step minus its time waiting for the other ranks). Kept as the loss points are.
  void process_step(const std::string& name, std::int64_t step, double own_seconds);

  // A straggler was named (`named`) or recovered at `at`; `line` is what the launcher logged.
  void straggler(WallClock::time_point at, const std::string& name, bool named,
                 const std::string& line);

  // The pre-flight check of a generation was run (before the generation started).
  void preflight(const PreflightNumbers& numbers);

  // The job is over on this node: `launch` exits with `exit_code`; `summary` is its last word
  // ("job succeeded", "rank 1 exited with code 3 ...").
  void job_ended(WallClock::time_point at, int exit_code, const std::string& summary);

  // Everything above as report.json holds it:
  //   format, version              kReportFormat, kReportVersion
  //   job                          job_id, worker, node_rank, nnodes, start, end, duration_s,
  //                                exit_code, summary
  //   limits                       max_loss_points_per_process, max_epoch_records_per_process
  //   generations[]                generation, world_size, start, end, duration_s, outcome,
  //                                startup: per phase (spawn, store, ..., first_step) the
  //                                slowest process of this node and its seconds
  //   processes[]                  ranks by index, then servers: name, role ("rank"/"server"),
  //                                index, generations (those it ran in), exit (of its latest
  //                                run: text, code, signal, signal_name, wait_status), cpu_seconds
  //                                (all runs), peak_rss_kib (largest run), lines, metric_lines,
  //                                malformed_metric_lines, dropped_epoch_lines,
  //                                mean_images_per_sec (over its epochs),
  //                                epochs[] (generation, epoch, mean_loss, images_per_sec,
  //                                accuracy as a ratio, correct, total),
  //                                loss (seen, stride, points[] as [generation, epoch, batch,
  //                                loss]), runs[] (generation, pid, start, end, duration_s, exit,
  //                                cpu_seconds, peak_rss_kib, pace: null, or steps, last_step,
  //                                last_checkpoint, step_s, own_s, straggler,
  //                                batches_per_epoch), startup (null, or
  //                                seconds from the generation's start: spawn_s, one per
  //                                reported phase (store_s, communicator_s), first_step_s)
  //                                step_times (seen, stride, fields, points[] as [generation,
  //                                step, own_s]: each counted step's own time, thinned as loss)
  //   stragglers[]                 process ("rank 1"; "node 2": the verdicts across nodes this
  //                                node reached), at, named (false: recovered), line; at most
  //                                kMaxStragglerEvents, then stragglers_dropped counts
  //   preflight[]                  generation, seconds, outcome, nodes[] (node, gflops,
  //                                best_out_mbs, best_in_mbs, named); at most kMaxPreflightChecks
  // Times appear twice: "start" as ISO 8601 UTC text with milliseconds and "start_ms" as
  // milliseconds since the Unix epoch. Anything not known (yet) is null: the exit and usage of
  // a process still running, the end of a job still running. Strings are as they were given
  // (write() puts U+FFFD in place of bytes that are not UTF-8).
  nlohmann::json to_json() const;

  // The page report.html holds: header, process table, charts (loss, accuracy, throughput; or
  // "no training metrics in the output"), timeline. All text is HTML-escaped.
  std::string to_html() const;

  // Writes dir/report.json and dir/report.html, each atomically (a temporary file in `dir`
  // renamed over it), so a reader sees the old report or the new one, never half of one. May be
  // called at any time, again and again. Throws ReportError naming the file and the errno text.
  void write(const std::string& dir) const;

  // Reads a report.json written by write(); throws ReportError naming the file when it cannot be
  // read, is not JSON, or is not a report of a version this code knows.
  static nlohmann::json read_json(const std::string& path);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ddl::launcher
