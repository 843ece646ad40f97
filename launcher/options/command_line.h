// The launcher's part of argv read against the flag table (flags.h): which flags were given,
// under which spelling, with which value, then completed by the PET_/PADDLE_ variables that stand
// for flags still absent. parse_options() (options.h) turns the result into LaunchOptions.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/options/flags.h"

namespace ddl::launcher {

// One flag as given: the spelling errors name (the flag's own name, or a reported alias such as
// --gpus) and its value ("" for a switch; "true" for a boolean given alone).
struct GivenFlag {
  std::string spelling;
  std::string value;
  std::string variable;  // the environment variable that gave it ("PET_NNODES"); empty: argv
};

// The flags given, by the flag's own name. A flag given twice keeps its last value; two different
// reported spellings of one flag (--gpus and --devices) are an error when the flag is read.
class GivenFlags {
 public:
  void add(const FlagSpec& spec, const std::string& spelling, std::string value,
           std::string variable = {});
  // Every name asked about must be a flag of the table: a name that is not (a misspelling in the
  // code) throws std::logic_error, so every parse in the tests fails on it, never a silent "not
  // given".
  // True when any spelling of `name` was given.
  bool has(const std::string& name) const;
  // The flag as given; nullopt when absent. Throws OptionsError for two reported spellings.
  std::optional<GivenFlag> get(const std::string& name) const;
  // The value given (`name` must have been given).
  std::string value(const std::string& name) const { return get(name)->value; }
  // The variable that gave `value` to the flag named or spelled `flag` (a BadValueError's
  // parts); nullopt when the command line gave it, or no such flag was given.
  std::optional<std::string> variable_of(const std::string& flag, const std::string& value) const;

  // The value read and checked as the flag table types the flag (its limits, choices, default);
  // nullopt when absent. Throws OptionsError for a bad value, std::logic_error when `name` is
  // not of that type in the table.
  std::optional<int> integer(const std::string& name) const;
  std::optional<std::chrono::milliseconds> seconds(const std::string& name) const;
  bool boolean(const std::string& name) const;  // the table's default when absent
  std::optional<std::string> name_value(const std::string& name) const;
  std::optional<std::string> choice(const std::string& name) const;

 private:
  static const FlagSpec& typed(const std::string& name, ValueType type);

  std::map<std::string, std::vector<GivenFlag>> flags_;
};

// One option as typed on the command line (not from the environment), for telling whose
// command line this is (LaunchOptions::dialect, through spelling_origins()).
struct TypedSpelling {
  const FlagSpec* spec = nullptr;
  std::string name;  // without the leading dashes and the value: "start_port", "log-dir", "m"
};

struct CommandLine {
  GivenFlags flags;
  std::vector<TypedSpelling> typed;  // in command-line order
  std::vector<std::string> worker;   // WORKER first, then its arguments; may be empty
  // The variables that gave a flag its value, as "PET_NNODES=2", in the order they were read.
  std::vector<std::string> from_environment;
};

// Splits argv (argv[0] is the program) at WORKER (the first argument that is not an option, or
// the one after "--") and reads the options before it; then adds the environment defaults from
// `env`. Throws OptionsError for an unknown or refused option or a missing value.
CommandLine read_command_line(int argc, const char* const argv[], const env::EnvMap& env);

}  // namespace ddl::launcher
