#include "launcher/health/ledger.h"

#include <algorithm>

namespace ddl::launcher {

namespace {

void raise(std::optional<std::int64_t>& best, const std::optional<std::int64_t>& v) {
  if (v && (!best || *v > *best)) best = v;
}

}  // namespace

void ProgressLedger::generation_ended(int index, const std::vector<PaceTracker::Summary>& paces,
                                      bool failed) {
  std::optional<std::int64_t> checkpoint;
  std::optional<std::int64_t> step;
  for (const auto& p : paces) {
    raise(checkpoint, p.last_checkpoint);
    raise(step, p.last_step);
  }
  if (!checkpoint && !step) return;  // nothing reported: nothing known
  bool progressed;
  if (checkpoint || best_checkpoint_) {
    progressed = checkpoint && (!best_checkpoint_ || *checkpoint > *best_checkpoint_);
  } else {
    progressed = !best_step_ || *step > *best_step_;
  }
  raise(best_checkpoint_, checkpoint);
  raise(best_step_, step);
  if (progressed || !failed) {
    stalled_ = 0;
    stalled_generations_.clear();
    return;
  }
  ++stalled_;
  stalled_generations_.push_back(index);
}

std::string ProgressLedger::why() const {
  if (stalled_ == 0) return "";
  std::string which;
  for (std::size_t i = 0; i < stalled_generations_.size(); ++i) {
    if (i > 0) which += i + 1 == stalled_generations_.size() ? " and " : ", ";
    which += std::to_string(stalled_generations_[i]);
  }
  const std::string how = best_checkpoint_
                              ? "without a checkpoint past step " +
                                    std::to_string(*best_checkpoint_) + " (the last one written)"
                              : "without passing step " + std::to_string(best_step_.value_or(0)) +
                                    " (the furthest any generation reached)";
  return std::string(stalled_ == 1 ? "generation " : "generations ") + which + " failed " + how;
}

}  // namespace ddl::launcher
