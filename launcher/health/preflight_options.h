// What the command line tells the pre-flight check (--preflight, --preflight_ratio;
// launcher/options/flags.cpp, the rules in preflight.h).
#pragma once

#include <optional>
#include <string_view>

namespace ddl::launcher {

enum class PreflightMode {
  kOff,
  kOn,
  kAuto,  // on when the generation's nodes are on more than one machine (preflight::spans_machines)
};

// --preflight's spelling of each mode, and back (nullopt for anything else).
inline const char* preflight_mode_name(PreflightMode mode) {
  switch (mode) {
    case PreflightMode::kOff:
      return "off";
    case PreflightMode::kOn:
      return "on";
    case PreflightMode::kAuto:
      break;
  }
  return "auto";
}
inline std::optional<PreflightMode> preflight_mode_named(std::string_view name) {
  for (PreflightMode m : {PreflightMode::kOff, PreflightMode::kOn, PreflightMode::kAuto}) {
    if (name == preflight_mode_name(m)) return m;
  }
  return std::nullopt;
}

struct PreflightOptions {
  PreflightMode mode = PreflightMode::kAuto;
  double ratio = 2;  // a node below the median divided by this is named
};

}  // namespace ddl::launcher
