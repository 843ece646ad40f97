// --help and the docs' flag reference, both written from the flag table (flags.h).
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launcher/options/flags.h"

namespace ddl::launcher {
namespace {

constexpr FlagGroup kGroups[] = {FlagGroup::kWorkers,         FlagGroup::kLogs,
                                 FlagGroup::kNodes,           FlagGroup::kFailures,
                                 FlagGroup::kParameterServer, FlagGroup::kCompatibility,
                                 FlagGroup::kGeneral};

std::string dashes(std::string name) {
  for (char& c : name) {
    if (c == '_') c = '-';
  }
  return name;
}

// "--name=VALUE", "--name[=BOOL]" or "--name".
std::string usage(const FlagSpec& f, const std::string& name) {
  switch (f.arity) {
    case Arity::kValue:
      return "--" + name + "=" + f.value_name;
    case Arity::kBoolean:
      return "--" + name + "[=BOOL]";
    case Arity::kSwitch:
      return "--" + name;
  }
  return "--" + name;
}

// `text` wrapped to lines of at most `width` characters, each after `indent` spaces but the first.
std::string wrap(const std::string& text, std::size_t indent, std::size_t width) {
  std::istringstream words(text);
  std::string word;
  std::string out;
  std::size_t column = indent;
  bool first = true;
  while (words >> word) {
    if (!first && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      first = true;
    }
    if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  return out;
}

// `items` joined by ", " between `before` and `after`; "" when there are none.
std::string listed(const std::vector<std::string>& items, const std::string& before,
                   const std::string& after) {
  if (items.empty()) return "";
  std::string out = before;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + after;
}

std::string help_line(const FlagSpec& f) {
  constexpr std::size_t kColumn = 34;
  constexpr std::size_t kWidth = 100;
  std::string left = f.short_name ? std::string("  -") + f.short_name + ", " : std::string(6, ' ');
  left += "--" + f.name;
  if (f.arity == Arity::kValue) left += " " + f.value_name;
  if (f.arity == Arity::kBoolean) left += "[=BOOL]";
  std::string text = f.help;
  if (!f.default_text.empty()) text += " (default: " + f.default_text + ")";
  std::vector<std::string> aliases;
  for (const Spelling& s : f.aliases) {
    std::vector<std::string> launchers;
    for (Dialect o : s.origins) launchers.push_back(launcher_name(o));
    aliases.push_back("--" + s.name + " (" + listed(launchers, "", "") + ")");
  }
  text += listed(aliases, "; also ", "");
  std::string line = left;
  if (left.size() + 2 > kColumn) {
    line += "\n" + std::string(kColumn, ' ');
  } else {
    line += std::string(kColumn - left.size(), ' ');
  }
  return line + wrap(text, kColumn, kWidth) + "\n";
}

// The markdown cell of the other launchers' spellings of `f` from `origins`.
std::string spellings_in(const FlagSpec& f, std::initializer_list<Dialect> origins) {
  std::vector<std::string> parts;
  for (Dialect origin : origins) {
    std::vector<std::string> names;
    for (Dialect o : f.also_in) {
      if (o == origin) names.push_back(f.name);
    }
    for (const Spelling& s : f.aliases) {
      for (Dialect o : s.origins) {
        if (o == origin) names.push_back(s.name);
      }
    }
    for (const std::string& name : names) {
      std::string cell;
      if (origin == Dialect::kTorchrun) {
        if (f.short_name && name == f.name) cell = std::string("`-") + f.short_name + "`, ";
        cell += "`--" + dashes(name) + "`";
      } else {
        const std::string label = origin == Dialect::kPaddle18   ? "1.8 "
                                  : origin == Dialect::kFleetrun ? "fleetrun "
                                                                 : "2.x ";
        cell = label + "`--" + name + "`";
      }
      parts.push_back(cell);
    }
  }
  return parts.empty() ? "—" : listed(parts, "", "");
}

std::string escape_pipes(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string markdown_row(const FlagSpec& f) {
  std::string launch_cell;
  if (f.is_refused()) {
    launch_cell = "— (refused)";
  } else {
    if (f.short_name) launch_cell = std::string("`-") + f.short_name + "`, ";
    launch_cell += "`" + usage(f, f.name) + "`";
    std::vector<std::string> aliases;
    for (const Spelling& s : f.aliases) aliases.push_back("`--" + s.name + "`");
    launch_cell += listed(aliases, " (", ")");
  }
  std::string meaning;
  if (f.is_refused()) {
    meaning = "a one-line error, exit 2: " + f.refused;
  } else {
    meaning = f.doc.empty() ? f.help : f.doc;
    if (!meaning.empty() && meaning.back() != '.') meaning += '.';
    if (!f.default_text.empty()) meaning += " Default: " + f.default_text + ".";
    std::vector<std::string> variables;
    for (const FlagVariable& v : f.variables) {
      std::string text = "`" + v.name + "`";
      if (v.spelling != f.name) text += " (as `--" + v.spelling + "`)";
      variables.push_back(text);
    }
    meaning += listed(variables, " Environment: ", ".");
  }
  return "| " + escape_pipes(launch_cell) + " | " +
         escape_pipes(spellings_in(f, {Dialect::kTorchrun})) + " | " +
         escape_pipes(
             spellings_in(f, {Dialect::kPaddle18, Dialect::kFleetrun, Dialect::kPaddle2})) +
         " | " + escape_pipes(meaning) + " |\n";
}

}  // namespace

std::string help_text() {
  std::string out =
      "Starts and supervises the workers of a data-parallel job.\n"
      "Usage:\n"
      "  launch [options] WORKER [WORKER ARGS...]\n";
  for (FlagGroup group : kGroups) {
    out += std::string("\n") + group_title(group) + ":\n";
    for (const FlagSpec& f : flag_table()) {
      if (f.group == group && !f.is_refused()) out += help_line(f);
    }
  }
  return out +
         "\nEverything after WORKER is passed to the worker untouched. WORKER is a path, or the\n"
         "name of a program next to `launch` or on PATH. A WORKER ending in .py (and -m MODULE)\n"
         "runs as `python3 -u WORKER ARGS` with the python3 first on PATH, as under torchrun and\n"
         "Paddle; --python=PROGRAM picks another interpreter, --no_python runs WORKER itself.\n"
         "Workers get PYTHONUNBUFFERED=1 unless it is set, and no http_proxy/https_proxy (kept\n"
         "as DDL_SAVED_HTTP_PROXY/DDL_SAVED_HTTPS_PROXY). Each worker gets the variables of\n"
         "Paddle 1.8, Paddle 2.x and torchrun (PADDLE_TRAINER_ID, RANK, LOCAL_RANK, WORLD_SIZE,\n"
         "MASTER_ADDR, TORCHELASTIC_*, ...; docs/environment.md). A flag's PET_<FLAG> (torchrun)\n"
         "or PADDLE_<FLAG> (Paddle 2.x) variable stands for it when it is not given "
         "(docs/flags.md).\n"
         "kill -USR1 <launch pid> writes every running rank's stack to LOG_DIR/stacks.<K>.txt\n"
         "(also done when the hang guard fires or a rank exits 124 at a deadline).\n";
}

std::string flag_reference_markdown() {
  std::string out =
      "Generated from the flag table (`launcher/options/flags.cpp`); each flag also in its dash\n"
      "spelling. \"—\" means that launcher has no such flag.\n";
  for (FlagGroup group : kGroups) {
    out += std::string("\n### ") + group_title(group) + "\n\n";
    out += "| `launch` | torchrun | Paddle | meaning |\n|---|---|---|---|\n";
    for (const FlagSpec& f : flag_table()) {
      if (f.group == group) out += markdown_row(f);
    }
  }
  return out;
}

namespace {

// The offsets of the text between the markers in `doc`.
std::pair<std::size_t, std::size_t> reference_bounds(const std::string& doc) {
  const std::size_t begin = doc.find(kFlagReferenceBegin);
  const std::size_t end = doc.find(kFlagReferenceEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    throw std::runtime_error(std::string("no '") + kFlagReferenceBegin + "' ... '" +
                             kFlagReferenceEnd + "' block in the page");
  }
  std::size_t from = begin + std::string(kFlagReferenceBegin).size();
  if (from < doc.size() && doc[from] == '\n') ++from;
  return {from, end};
}

}  // namespace

std::string flag_reference_in(const std::string& doc) {
  const auto [from, to] = reference_bounds(doc);
  return doc.substr(from, to - from);
}

std::string with_flag_reference(const std::string& doc) {
  const auto [from, to] = reference_bounds(doc);
  return doc.substr(0, from) + flag_reference_markdown() + doc.substr(to);
}

}  // namespace ddl::launcher
