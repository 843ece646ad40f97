#include "launcher/health/node_pace.h"

#include <cstdio>

#include "launcher/health/pace.h"

namespace ddl::launcher {

void NodePaceJudge::begin_generation(int generation) {
  generation_ = generation;
  nodes_.clear();
}

std::vector<NodePaceJudge::Verdict> NodePaceJudge::look(const std::vector<NodePace>& paces) {
  std::vector<Verdict> out;
  if (paces.size() < 2) return out;
  for (const NodePace& p : paces) {
    Node& n = nodes_[p.node];
    if (p.step <= n.last_step) continue;  // nothing new from it
    n.last_step = p.step;
    const double x = p.own_seconds;
    if (!n.baseline) {
      n.baseline = x;
      continue;
    }
    std::vector<double> others;
    for (const NodePace& q : paces) {
      if (q.node != p.node) others.push_back(q.own_seconds);
    }
    const double m = median_of(others);
    const bool slow = x >= ratio_ * m && x - m > kStragglerMinGap && x >= ratio_ * *n.baseline;
    n.slow = slow ? n.slow + 1 : 0;
    n.normal = x < kRecoveredRatio * m ? n.normal + 1 : 0;
    char ratio[16];
    std::snprintf(ratio, sizeof ratio, "%.2fx", m > 0 ? x / m : 0.0);
    if (!n.named && n.slow >= kNodeSustain) {
      n.named = true;
      out.push_back({p.node, true,
                     "straggler: node " + std::to_string(p.node) + " takes " + step_time_text(x) +
                         " of its own per step, " + ratio + " the other nodes' median " +
                         step_time_text(m) + " (at step " + std::to_string(p.step) +
                         "); its own first steps took " + step_time_text(*n.baseline)});
    } else if (n.named && n.normal >= kNodeSustain) {
      n.named = false;
      n.slow = 0;
      out.push_back({p.node, false,
                     "node " + std::to_string(p.node) + " is back at the other nodes' pace: " +
                         step_time_text(x) + " of its own per step, " + ratio + " their median"});
    }
  }
  return out;
}

}  // namespace ddl::launcher
