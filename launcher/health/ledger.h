// Whether restarts are getting the job anywhere (--no_progress_restarts): from the steps and
// checkpoints the ranks report (progress.h), how many failed generations in a row made no
// progress. A generation made progress when a rank reported a checkpoint beyond every checkpoint
// reported before it; when no generation has reported a checkpoint, when a rank reported a step
// beyond every step reported before it. A generation whose ranks reported nothing tells nothing
// and is not counted either way. Pure; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/health/pace.h"

namespace ddl::launcher {

class ProgressLedger {
 public:
  // Generation `index` ended, failed or not, its processes' paces as `paces` says.
  void generation_ended(int index, const std::vector<PaceTracker::Summary>& paces, bool failed);

  // Failed generations in a row that made no progress (0 after one that did, or succeeded).
  int stalled() const { return stalled_; }
  // "generations 1 and 2 failed without a checkpoint past step 400 (the last one written)": what
  // stalled() counts, in words; empty when it is 0.
  std::string why() const;

 private:
  std::optional<std::int64_t> best_checkpoint_;
  std::optional<std::int64_t> best_step_;
  int stalled_ = 0;
  std::vector<int> stalled_generations_;
};

}  // namespace ddl::launcher
