// The step-time watch of a generation (launcher/health/pace.h): reads each process's progress
// messages, logs stragglers (--straggler), and fails the generation when a rank stops finishing
// steps at the job's own pace (the step timeout), as the hang guard (hang_guard.h) does for
// silence. Across generations it keeps whether restarts make progress (health/ledger.h).
// Single-threaded: on the io_context's thread, like the group it watches.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/health/ledger.h"
#include "launcher/health/node_pace.h"
#include "launcher/health/pace.h"
#include "launcher/supervise/observers.h"
#include "launcher/supervise/restart_policy.h"
#include "launcher/supervise/worker_group.h"

namespace ddl::launcher {

inline constexpr std::chrono::milliseconds kNodePaceEvery{100};

class PaceGuard {
 public:
  // `watching()`: asked at every wake-up; false ends the watch. `late(message)`: a rank is past
  // the step timeout.
  using Watching = std::function<bool()>;
  using Late = std::function<void(const std::string& message)>;

  // This node's pace (the median of its ranks' own step times) after its ranks' latest counted
  // step, for the other nodes (launcher/health/node_pace.h).
  using NodePaceSink = std::function<void(Generation, std::int64_t step, double own_seconds)>;
  // The straggler verdicts across nodes reached here (by the control plane's decider) since the
  // last call, each with the line logged for it.
  using NodeVerdicts = std::function<std::vector<NodePaceJudge::Verdict>()>;

  // `where`: this node in straggler lines ("on node 1 (host-b)"), may be empty. `observers` (must
  // outlive the guard) are told each counted step's own time and each straggler verdict, this
  // node's ranks' and (from `node_verdicts`, asked whenever the pace is told and when a
  // generation ends) the nodes'; `node_pace` (may be empty) this node's pace, at most every
  // kNodePaceEvery.
  PaceGuard(boost::asio::io_context& io, PaceOptions options, std::string where,
            const Observers& observers, NodePaceSink node_pace = {},
            NodeVerdicts node_verdicts = {});

  // Generation `g` of `group` begins: the previous one's pace is forgotten.
  void begin_generation(const WorkerGroup& group, Generation g, Watching watching, Late late);
  void started(std::size_t i);
  void exited(std::size_t i);
  // A progress line of process `i`.
  void on_line(std::size_t i, const std::string& line);
  void cancel();

  // Process `i`'s pace this generation (for the run report).
  PaceTracker::Summary summary(std::size_t i) const { return tracker_.summary(i); }

  // The generation `index` is over, failed or not: whether it made progress (ledger.h).
  void generation_ended(int index, bool failed);
  // Failed generations in a row without progress, for the restart policy.
  Stall stall() const { return Stall{ledger_.stalled(), ledger_.why()}; }

 private:
  void rearm();
  void tell_node_pace(std::int64_t step);
  void take_node_verdicts();

  boost::asio::steady_timer timer_;
  PaceTracker tracker_;
  ProgressLedger ledger_;
  const WorkerGroup* group_ = nullptr;  // begin_generation()'s
  std::vector<std::string> names_;
  std::vector<bool> warned_;  // a malformed line was logged for this process
  std::optional<PaceTracker::Clock::time_point> armed_for_;
  Watching watching_;
  Late late_;
  const Observers& observers_;
  NodePaceSink node_pace_;
  NodeVerdicts node_verdicts_;
  std::optional<PaceTracker::Clock::time_point> told_at_;
  Generation generation_;
};

}  // namespace ddl::launcher
