// The flag table (launcher/options/flags.h) against what is built from it: the docs' flag
// reference, --help, parsing, the environment defaults and --print_config.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/options/flags.h"
#include "launcher/options/options.h"
#include "tests/launcher/options/parse_args.h"

namespace ddl::launcher {
namespace {

TEST(FlagTable, DocsFlagReferenceIsTheTables) {
  const std::string path = std::string(DDL_SOURCE_DIR) + "/docs/flags.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::ostringstream page;
  page << in.rdbuf();
  EXPECT_EQ(flag_reference_in(page.str()), flag_reference_markdown())
      << path << " and the flag table (launcher/options/flags.cpp) disagree; update the page "
      << "with: build/bin/flag_reference --write docs/flags.md";
}

// Every flag name the options code asks the command line about (`r.has("nnodes")`,
// `given.value("master")`, ...) is a flag of the table: a misspelt one fails here, whether or not
// a test happens to run the line that holds it (GivenFlags also throws when it runs).
TEST(FlagTable, EveryNameTheCodeAsksAboutIsAFlag) {
  const std::regex lookup(
      R"re(\.(has|value|get|integer|seconds|boolean|name_value|choice|has_value|add)\("([a-z_]+)")re");
  std::set<std::string> names;
  for (const char* file :
       {"options.cpp", "command_line.cpp", "launch_ps.cpp", "values.cpp", "rank_mapping.cpp"}) {
    const std::string path = std::string(DDL_SOURCE_DIR) + "/launcher/options/" + file;
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::ostringstream text;
    text << in.rdbuf();
    const std::string code = text.str();
    for (auto it = std::sregex_iterator(code.begin(), code.end(), lookup);
         it != std::sregex_iterator(); ++it) {
      names.insert((*it)[2].str());
      EXPECT_NO_THROW(flag((*it)[2].str()))
          << path << ": --" << (*it)[2].str() << " is not in the flag table";
    }
  }
  EXPECT_GT(names.size(), 40u) << "the pattern no longer finds the code's lookups";
}

TEST(FlagTable, EverySpellingNamesOneFlag) {
  std::set<std::string> names;
  std::set<char> shorts;
  for (const FlagSpec& f : flag_table()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    for (const Spelling& s : f.aliases) EXPECT_TRUE(names.insert(s.name).second) << s.name;
    if (f.short_name) {
      EXPECT_TRUE(shorts.insert(f.short_name).second) << f.short_name;
    }
    EXPECT_FALSE(f.help.empty() && !f.is_refused()) << f.name << " has no help";
  }
  for (const std::string& name : names) {
    std::string dashed = name;
    for (char& c : dashed) c = c == '_' ? '-' : c;
    const auto match = find_flag(dashed);
    ASSERT_TRUE(match) << dashed;
    EXPECT_EQ(find_flag(name)->spec, match->spec) << name;
  }
  EXPECT_FALSE(find_flag("nproc_per_nod"));
}

TEST(FlagTable, HelpShowsEveryAcceptedSpellingAndRefusedFlagsSayWhy) {
  const std::string help = help_text();
  for (const FlagSpec& f : flag_table()) {
    if (f.is_refused()) {
      const std::string message = error_of({"--" + f.name + (f.takes_value() ? "=x" : ""), "w"});
      EXPECT_EQ(message,
                "--" + f.name + " (" + launcher_name(f.also_in.front()) + "'s): " + f.refused);
      EXPECT_EQ(help.find("--" + f.name + " "), std::string::npos) << f.name;
      continue;
    }
    EXPECT_NE(help.find("--" + f.name), std::string::npos) << f.name;
    for (const Spelling& s : f.aliases) EXPECT_NE(help.find("--" + s.name), std::string::npos);
    if (f.short_name) {
      EXPECT_NE(help.find(std::string("-") + f.short_name + ", --" + f.name), std::string::npos);
    }
  }
  // Grouped by topic, in the table's order.
  std::size_t at = 0;
  for (const char* title :
       {"Workers and devices:", "Logs and console:", "Multi-node jobs:", "Failures and restarts:",
        "Parameter servers:", "Other launchers' flags (compatibility only):", "General:"}) {
    const std::size_t found = help.find(title, at);
    ASSERT_NE(found, std::string::npos) << title;
    at = found;
  }
}

TEST(FlagTable, ChecksComeFromTheTable) {
  for (const FlagSpec& f : flag_table()) {
    // Parameter-server flags are read in a parameter-server job (a later flag given twice wins).
    const auto error_of = [&](std::vector<std::string> args) {
      if (f.group == FlagGroup::kParameterServer) args.insert(args.begin(), "--server_num=1");
      return launcher::error_of(std::move(args));
    };
    if (f.type == ValueType::kInt) {
      const std::string too_big = std::to_string(f.max + 1);
      EXPECT_EQ(error_of({"--" + f.name + "=" + too_big, "w"}),
                "--" + f.name + "='" + too_big + "': expected an integer in [" +
                    std::to_string(f.min) + ", " + std::to_string(f.max) + "]");
    } else if (f.type == ValueType::kSeconds) {
      const std::string message = error_of({"--" + f.name + "=-1", "w"});
      EXPECT_EQ(message, "--" + f.name + "='-1': expected a number of seconds " +
                             (f.allow_zero ? ">= 0" : "> 0"));
      EXPECT_EQ(error_of({"--" + f.name + "=0", "w"}).empty(), f.allow_zero) << f.name;
    } else if (f.type == ValueType::kChoice) {
      EXPECT_EQ(error_of({"--" + f.name + "=bogus", "w"}),
                "--" + f.name + "='bogus': " + f.expected);
      for (const std::string& c : f.choices) {
        std::vector<std::string> args{"--" + f.name + "=" + c, "w"};
        // The etcd backends name the etcd cluster with --rdzv_endpoint, which they require.
        if (f.name == "rdzv_backend" && c.rfind("etcd", 0) == 0) {
          args.insert(args.begin(), "--rdzv_endpoint=127.0.0.1");
        }
        EXPECT_EQ(error_of(args), "") << f.name << "=" << c;
      }
    } else if (f.type == ValueType::kName) {
      EXPECT_NE(error_of({"--" + f.name + "=a b", "w"}).find("expected a non-empty name"),
                std::string::npos);
    } else if (f.type == ValueType::kBool) {
      EXPECT_EQ(error_of({"--" + f.name + "=maybe", "w"}),
                "--" + f.name + "='maybe': expected true or false");
    }
  }
}

// A value each variable of the table can stand for its flag with, on its own.
const std::map<std::string, std::string>& sample_values() {
  static const std::map<std::string, std::string> values = {
      {"PET_NPROC_PER_NODE", "2"},
      {"PADDLE_NPROC_PER_NODE", "2"},
      {"PADDLE_DEVICES", "0,1"},
      {"PET_LOG_DIR", "logs"},
      {"PADDLE_LOG_DIR", "logs"},
      {"PADDLE_LOG_LEVEL", "debug"},
      {"PADDLE_IPS", "127.0.0.1"},
      {"PET_LOCAL_ADDR", "127.0.0.1"},
      {"PET_NNODES", "1"},
      {"PADDLE_NNODES", "1"},
      {"PET_NODE_RANK", "0"},
      {"PADDLE_RANK", "0"},
      {"PET_MASTER_ADDR", "127.0.0.1"},
      {"PET_MASTER_PORT", "29500"},
      {"PADDLE_MASTER", "127.0.0.1:29500"},
      {"PET_RDZV_ENDPOINT", "127.0.0.1:29400"},
      {"PET_RDZV_BACKEND", "c10d"},
      {"PET_RDZV_ID", "job"},
      {"PET_RDZV_CONF", "last_call_timeout=5"},
      {"PADDLE_START_PORT", "6000"},
      {"FLAGS_START_PORT", "6100"},
      {"PET_ROLE", "trainer"},
      {"PADDLE_JOB_ID", "job"},
      {"PET_MAX_RESTARTS", "2"},
      {"PADDLE_MAX_RESTART", "2"},
      {"PET_LOG_LINE_PREFIX_TEMPLATE", "[${rank}]: "},
      {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "${hostname}:${rank}: "},
      {"PET_SHUTDOWN_TIMEOUT", "5"},
      {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "5"},
      {"PADDLE_DISTRI_BACKEND", "gloo"},
      {"PADDLE_LOG_OVERWRITE", "false"},
      {"PADDLE_SORT_IP", "true"},
      {"PADDLE_ELASTIC_TIMEOUT", "10"},
      {"PADDLE_ELASTIC_LEVEL", "1"},
      {"PADDLE_GLOO_PORT", "7000"},
      {"PADDLE_WITH_GLOO", "0"},
      {"PADDLE_ELASTIC_SERVER", "127.0.0.1:2379"},
      {"PADDLE_ELASTIC_NP", "2"},
      {"PET_DUPLICATE_STDOUT_FILTERS", "loss"},
      {"PET_DUPLICATE_STDERR_FILTERS", "warn"}};
  return values;
}

TEST(FlagTable, EveryVariableStandsForItsFlag) {
  for (const FlagSpec& f : flag_table()) {
    for (const FlagVariable& v : f.variables) {
      const auto sample = sample_values().find(v.name);
      ASSERT_NE(sample, sample_values().end()) << "no sample value for " << v.name;
      const LaunchOptions o = parse({"train"}, {{v.name, sample->second}});
      const std::vector<std::string> expected{v.name + "=" + sample->second};
      EXPECT_EQ(o.from_environment, expected) << v.name;
      // The flag on the command line wins over its variable.
      EXPECT_TRUE(find_flag(v.spelling)) << v.spelling;
    }
  }
}

TEST(FlagTable, PrintConfigHasEveryFlagsLineInAlphabeticalOrder) {
  const LaunchOptions o = parse({"--server_num=1", "--worker_num=1", "train", "--epochs=1"});
  const std::string text = describe_options(o);
  std::vector<std::string> names;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(": ") != std::string::npos) names.push_back(line.substr(0, line.find(": ")));
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end())) << text;
  for (const FlagSpec& f : flag_table()) {
    if (!f.config) continue;
    EXPECT_NE(text.find("\n" + f.name + ": "), std::string::npos) << f.name;
  }
  EXPECT_NE(text.find("training_script_args: ['--epochs=1']\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace ddl::launcher
