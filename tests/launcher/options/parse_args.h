// parse_options() on an argv written as a list of words (the program name is added), for the
// options tests.
#pragma once

#include <string>
#include <vector>

#include "launcher/options/options.h"

namespace ddl::launcher {

inline LaunchOptions parse(std::vector<std::string> args, const env::EnvMap& env = {},
                           MachineCounts machine = {}) {
  args.insert(args.begin(), "launch");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data(), env, machine);
}

// The OptionsError message for `args`, or "" when they parse.
inline std::string error_of(std::vector<std::string> args, const env::EnvMap& env = {},
                            MachineCounts machine = {}) {
  try {
    parse(std::move(args), env, machine);
  } catch (const OptionsError& e) {
    return e.what();
  }
  return "";
}

}  // namespace ddl::launcher
