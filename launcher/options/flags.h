// The flag table: every option of `launch`, declared once, as data.
//
// A flag's entry holds everything the rest of the launcher and its docs say about it: its name
// and the other launchers' spellings of it, whether it takes a value and how that value is
// checked, its default, the PET_/PADDLE_ variables that stand for it, its help group and text, its
// line in the --print_config block and its row in docs/flags.md. Parsing (command_line.h), the
// environment defaults, --help, --print_config (describe_options) and the docs' flag reference
// all read this table; a test fails when docs/flags.md and the table disagree.
//
// Adding a flag: one entry in flag_table() (flags.cpp), one field in LaunchOptions and the line
// of parse_options() that fills it; then regenerate the docs (`flag_reference --write
// docs/flags.md`, see docs/developing.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/options/options.h"

namespace ddl::launcher {

// A spelling's launchers (Dialect, options.h: the one enum of whose flags these are), for the
// docs' side-by-side columns and for telling which launcher's flags a command line uses.
// "launch", "torchrun", "Paddle 1.8", "fleetrun", "Paddle 2.x".
const char* launcher_name(Dialect dialect);

// The topics --help and the docs group flags by, in this order.
enum class FlagGroup {
  kWorkers,          // workers and devices: how many, which GPUs, how WORKER is run
  kLogs,             // logs and console
  kNodes,            // multi-node jobs
  kFailures,         // failures and restarts
  kParameterServer,  // parameter-server jobs
  kCompatibility,    // other launchers' flags accepted (and checked) with nothing to do here
  kGeneral,          // --help, --version
};
const char* group_title(FlagGroup group);

enum class Arity {
  kValue,    // --flag=V or --flag V
  kSwitch,   // --flag alone
  kBoolean,  // --flag (true), --flag=BOOL, and Paddle's space form --flag False
};

// How a value is checked; the parse step of each flag reads its limits from here.
enum class ValueType {
  kText,     // checked by the flag's own parser in parse_options (lists, endpoints, ...)
  kInt,      // an integer in [min, max]
  kSeconds,  // a number of seconds, >= 0 (allow_zero) or > 0
  kBool,     // true/false/1/0/yes/no/on/off
  kName,     // a non-empty name without spaces, commas or '='
  kChoice,   // one of `choices`
};

// Another name for a flag. A `reported` alias is a flag of its own in the other launcher's
// documentation (--gpus, --devices, --ips, --rank): errors name it as typed, and giving it with
// the flag's own name is an error. Other aliases (--start_port, --host, ...) are the same flag
// under another name: errors use the flag's name, and the last one given wins.
struct Spelling {
  std::string name;              // underscore form; the dash form is accepted as well
  std::vector<Dialect> origins;  // the launchers that spell the flag so (fleetrun and 2.x: --ips)
  bool reported = false;
};

// A variable that stands for the flag when no spelling of it is on the command line (the rules
// of which one wins are in command_line.cpp). `spelling` is the flag name the value is given
// under (Paddle's PADDLE_RANK is its --rank).
struct FlagVariable {
  std::string name;
  std::string spelling;
};

struct FlagSpec {
  std::string name;  // underscore form, as in LaunchOptions and --print_config
  char short_name = 0;
  Arity arity = Arity::kValue;
  std::string value_name;  // in help and docs: "N", "0,1,...", "HOST:PORT"
  ValueType type = ValueType::kText;
  long long min = 0;                    // kInt
  long long max = 0;                    // kInt
  bool allow_zero = true;               // kSeconds
  std::vector<std::string> choices;     // kChoice
  std::string expected;                 // kChoice: the message when the value is not one of them
  std::string default_text;             // "" when the flag has no default worth naming
  std::vector<Spelling> aliases;        // other names of this flag
  std::vector<Dialect> also_in;         // other launchers that call it by this very name
  std::vector<FlagVariable> variables;  // PET_..., then PADDLE_...
  FlagGroup group = FlagGroup::kWorkers;
  std::string help;  // one or two lines for --help
  std::string doc;   // the docs' "meaning" (markdown); `help` when empty
  // A flag of another launcher that launch refuses, with why: the one-line error.
  std::string refused;
  // False for flags that say nothing about whose command line this is (--log_level,
  // --print_config, --log_overwrite: every user of launch types them); see LaunchOptions::dialect.
  bool marks_dialect = true;
  // Its --print_config line's value, or nullopt when the job does not print it.
  std::function<std::optional<std::string>(const LaunchOptions&)> config;

  bool takes_value() const { return arity == Arity::kValue; }
  bool is_refused() const { return !refused.empty(); }
};

// Every flag, in help order within each group.
const std::vector<FlagSpec>& flag_table();

// The flag a long option names (underscore or dash form, any alias), with the spelling errors
// should name; nullopt for an unknown name. Refused flags are found too (is_refused()).
struct FlagMatch {
  const FlagSpec* spec = nullptr;
  std::string spelling;  // the flag's name, or a reported alias as typed (underscore form)
};
std::optional<FlagMatch> find_flag(const std::string& name);
// The flag of a one-letter option (-m, -t, ...), or nullptr.
const FlagSpec* find_short_flag(char c);
// The entry for `name` (the flag's own name); throws std::logic_error for a name not in the table.
const FlagSpec& flag(const std::string& name);
// The flag's own name and its reported aliases: the spellings that say "this flag was given".
std::vector<std::string> reported_spellings(const FlagSpec& spec);
// The launchers that have the spelling `typed` of `spec` (as typed, without the leading dashes:
// "start_port", "nproc-per-node", "m" for -m): the flag's own name is ours and also_in's, an
// alias its origin's. A dash form of a multi-word name is torchrun's only (Paddle's argparse
// knows the underscore form alone); a dash form torchrun does not have is ours only.
std::vector<Dialect> spelling_origins(const FlagSpec& spec, const std::string& typed);

// The --help text, flags grouped by topic.
std::string help_text();

// The flag reference of docs/flags.md (the text between its BEGIN/END markers).
std::string flag_reference_markdown();
inline constexpr const char* kFlagReferenceBegin = "<!-- BEGIN generated flag reference -->";
inline constexpr const char* kFlagReferenceEnd = "<!-- END generated flag reference -->";
// The text between the markers in `doc` (a page's contents); throws std::runtime_error when the
// markers are missing.
std::string flag_reference_in(const std::string& doc);
// `doc` with the text between its markers replaced by flag_reference_markdown().
std::string with_flag_reference(const std::string& doc);

}  // namespace ddl::launcher
