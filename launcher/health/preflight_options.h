// What the command line tells the pre-flight check (--preflight, --preflight_ratio;
// launcher/options/flags.cpp, the rules in preflight.h).
#pragma once

namespace ddl::launcher {

struct PreflightOptions {
  bool enabled = false;  // --preflight=on
  double ratio = 2;      // a node below the median divided by this is named
};

}  // namespace ddl::launcher
