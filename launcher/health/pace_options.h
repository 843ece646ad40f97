// What the pace rules (pace.h) are told by the command line: --straggler, --straggler_ratio,
// --step_timeout_factor and --step_timeout_floor (launcher/options/flags.cpp).
#pragma once

#include <chrono>

namespace ddl::launcher {

struct PaceOptions {
  bool stragglers = true;          // --straggler=warn (false: off)
  bool evict = false;              // --straggler=evict: an elastic job goes on without a slow node
  double straggler_ratio = 1.5;    // a rank this many times slower than the others is slow
  double step_timeout_factor = 4;  // the step timeout in job paces; 0 turns it off
  std::chrono::milliseconds step_timeout_floor{10000};  // ... and at least this
};

}  // namespace ddl::launcher
