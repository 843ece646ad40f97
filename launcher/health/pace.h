// The pace of a job's ranks, from their progress messages (progress.h): which rank is a straggler,
// and which has stopped finishing steps at the job's own pace. Pure: the clock is passed in, no
// I/O; the supervisor (launcher/supervise/pace_guard.h) feeds it and acts on what it says.
//
// Per process it keeps the last kPaceWindow step intervals and own times (interval minus the
// sections spent waiting for other ranks), skipping the first kPaceWarmup steps (start-up) and
// the step after a "pause" (an evaluation or checkpoint is not a step).
//
// Stragglers: at each step of rank r, once r and at least one other rank have a full window,
// r's own times are compared with the median m of the other ranks' own times (each rank's window
// median) and their spread (MAD, the median absolute deviation), and with its own earlier pace b
// (the median of its first full window). Let x be r's window median and q its kSlowSteps-th
// largest own time (at least kSlowSteps of its last kPaceWindow steps took q or more). r is slow
// when it has turned slow, against the others and against itself, at nearly every step:
//   x >= ratio * m  and  x - m > max(3 * 1.4826 * MAD, kStragglerMinGap)  and  x >= ratio * b
//   and  q >= (1 + (ratio - 1) / 2) * m;
// slow at kPaceSustain steps in a row, it is named once, with its window's median; its median
// back under kRecoveredRatio * m for kPaceSustain steps, it is said to have recovered and may be
// named again. So a rank that turns twice as slow is named at its 7th slow step; a spell of
// slowness shorter than kSlowSteps steps (a rank descheduled for a while on a node with more
// ranks than cores) is never named; nor is a rank slower than the others from its first steps on
// (other hardware): the pre-flight check is the place for it.
//
// Step timeout: once some rank has a full window, the job's pace p is the median of the ranks'
// interval medians; a running rank that has reported a step and is not paused is late when its
// last step is more than max(floor, factor * p) ago.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/health/pace_options.h"
#include "launcher/health/progress.h"

namespace ddl::launcher {

inline constexpr std::size_t kPaceWindow = 7;      // steps per rank in its median
inline constexpr std::size_t kSlowSteps = 6;       // of the window's steps, slow ones to be slow
inline constexpr int kPaceSustain = 2;             // verdicts in a row before naming (or clearing)
inline constexpr int kPaceWarmup = 2;              // first steps of a start not counted
inline constexpr double kRecoveredRatio = 1.2;     // back under this: recovered
inline constexpr double kStragglerMinGap = 0.005;  // seconds: smaller gaps are noise
inline constexpr std::size_t kMaxPhases = 16;      // start-up phases kept per process

class PaceTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // `names`: the processes' names in launch order ("rank 3"); `where`: appended to a straggler's
  // name in messages ("on node 1 (host-b)"), may be empty.
  PaceTracker(PaceOptions options, std::vector<std::string> names, std::string where = "");

  const PaceOptions& options() const { return options_; }

  // A new generation: every process's pace is forgotten (its names may have changed).
  void begin_generation(std::vector<std::string> names);
  // Process `i` started at `now` / exited (no longer watched).
  void started(std::size_t i, Clock::time_point now);
  void exited(std::size_t i);

  // A message of process `i` arrived at `now`. Returns a line to log when this makes it a named
  // straggler or ends that ("straggler: ..." / "... is back at the other ranks' pace").
  struct Verdict {
    bool straggler = true;  // false: recovered
    std::size_t process = 0;
    std::string name;  // the process's ("rank 3")
    std::string message;
  };
  std::optional<Verdict> on_message(std::size_t i, const ProgressMessage& m, Clock::time_point now);

  // The own time (seconds) of process `i`'s latest step when that step was counted (not a
  // start-up step, not the one after a pause); nullopt otherwise.
  std::optional<double> counted_own(std::size_t i) const;

  // The step timeout: a line naming the late ranks, when any is late at `now`.
  std::optional<std::string> late(Clock::time_point now) const;
  // When the step timeout should be asked next: the earliest deadline; nullopt when none runs.
  std::optional<Clock::time_point> next_deadline() const;
  // The deadline of a step that started at a known pace: max(floor, factor * pace).
  std::optional<std::chrono::milliseconds> step_timeout() const;

  // What the run report keeps of a process this generation.
  struct Summary {
    std::int64_t steps = 0;  // step messages
    std::optional<std::int64_t> last_step;
    std::optional<std::int64_t> last_checkpoint;
    std::optional<double> step_seconds;  // window median of the intervals
    std::optional<double> own_seconds;   // window median of the own times
    bool straggler = false;              // named now
    // Start-up: seconds from its start to each phase it reported, in order, and to its first step.
    std::vector<std::pair<std::string, double>> phases;
    std::optional<double> first_step_seconds;
    std::optional<std::int64_t> batches_per_epoch;  // from its latest "epoch E B"
  };
  Summary summary(std::size_t i) const;
  std::size_t size() const { return ranks_.size(); }

 private:
  struct Rank {
    std::string name;
    bool running = false;
    bool paused = false;
    Clock::time_point started_at;
    std::optional<Clock::time_point> last_step_at;
    std::int64_t steps = 0;
    std::optional<std::int64_t> last_step;
    std::optional<std::int64_t> last_checkpoint;
    std::vector<std::pair<std::string, double>> phases;  // at most kMaxPhases
    std::optional<double> first_step_seconds;
    std::optional<std::int64_t> batches_per_epoch;
    std::deque<double> intervals;  // seconds, the last kPaceWindow
    std::deque<double> own;
    std::optional<double> baseline;     // the median of its first full window of own times
    std::optional<double> counted_own;  // its latest step's own time, when counted
    int slow_streak = 0;
    int normal_streak = 0;
    bool named = false;
  };

  std::optional<Verdict> judge(std::size_t i, Clock::time_point now);
  std::optional<double> job_pace() const;

  PaceOptions options_;
  std::string where_;
  std::vector<Rank> ranks_;
};

// The median of `v` (not empty); `v` is reordered.
double median_of(std::vector<double>& v);

// "31.2 ms" under a second, "2.60 s" from there: a step time as the lines say it.
std::string step_time_text(double seconds);

}  // namespace ddl::launcher
