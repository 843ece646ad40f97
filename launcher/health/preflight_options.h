// What the command line tells the pre-flight check (--preflight, --preflight_ratio;
// launcher/options/flags.cpp, the rules in preflight.h).
#pragma once

namespace ddl::launcher {

enum class PreflightMode {
  kOff,
  kOn,
  kAuto,  // on when the generation's nodes are on more than one machine (preflight::spans_machines)
};

struct PreflightOptions {
  PreflightMode mode = PreflightMode::kAuto;
  double ratio = 2;  // a node below the median divided by this is named
};

}  // namespace ddl::launcher
