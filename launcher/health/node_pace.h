// Stragglers across nodes: which node's ranks have turned slow against the other nodes'. Each
// launcher publishes its node's pace (the median of its ranks' own step times, pace.h) with its
// heartbeat; the node that watches the others (the control plane's decider, launcher/coord/) looks
// at every member's latest figure once per heartbeat and asks this judge. Pure: no clock, no I/O.
//
// A node n with pace x is slow at a look when, against the median m of the other members' paces
// and its own first figure of the generation b:
//   x >= ratio * m  and  x - m > kStragglerMinGap  and  x >= ratio * b,
// counted only at looks where n reported a newer step than at the last one (a node that stopped
// reporting is the step timeout's business). Slow at kNodeSustain fresh looks in a row, it is
// named once; back under kRecoveredRatio * m at kNodeSustain fresh looks, it may be named again.
// As for ranks, a node slower from its first steps on is not named: the pre-flight check is the
// place for it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddl::launcher {

inline constexpr int kNodeSustain = 4;  // fresh looks in a row (a heartbeat apart: ~1 s)

struct NodePace {
  int node = -1;
  std::int64_t step = 0;   // its ranks' latest counted step
  double own_seconds = 0;  // the median of its ranks' own step times
};

class NodePaceJudge {
 public:
  explicit NodePaceJudge(double ratio) : ratio_(ratio) {}

  // A new generation: every node's figures are forgotten.
  void begin_generation(int generation);
  int generation() const { return generation_; }

  struct Verdict {
    int node = -1;
    bool straggler = true;  // false: recovered
    std::string message;    // "straggler: node 2 takes 61.2 ms of its own per step, 2.02x ..."
  };
  // One look at the members' latest paces (members without one left out); what changed.
  std::vector<Verdict> look(const std::vector<NodePace>& paces);

 private:
  struct Node {
    std::optional<double> baseline;
    std::int64_t last_step = -1;
    int slow = 0;
    int normal = 0;
    bool named = false;
  };
  double ratio_;
  int generation_ = -1;
  std::map<int, Node> nodes_;
};

}  // namespace ddl::launcher
