#include "launcher/options/launch_ps.h"

#include <algorithm>
#include <set>

#include "launcher/options/command_line.h"
#include "launcher/options/flags.h"

namespace ddl::launcher {
namespace {

// Paddle 1.8's launch_ps defaults (its parse_args()).
constexpr int kServers = 2;
constexpr int kTrainers = 2;
constexpr int kFirstPort = 6170;
constexpr const char* kLogDir = "logs";

bool boolean_word(const std::string& v) {
  for (const char* w : {"true", "false", "True", "False", "1", "0", "yes", "no"}) {
    if (v == w) return true;
  }
  return false;
}

// `--endpoints[=V]` before the worker becomes `--servers[=V]`; the worker's own arguments are
// left alone. The worker is the first argument that is neither an option nor an option's value.
std::vector<std::string> renamed(const std::vector<std::string>& argv) {
  std::vector<std::string> out = argv;
  for (std::size_t i = 1; i < out.size(); ++i) {
    const std::string a = out[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;
    const bool long_form = a[1] == '-';
    const std::size_t eq = a.find('=');
    const std::string name =
        a.substr(long_form ? 2 : 1, eq == std::string::npos ? eq : eq - (long_form ? 2 : 1));
    if (long_form && name == "endpoints") {
      out[i] = eq == std::string::npos ? "--servers" : "--servers" + a.substr(eq);
      if (eq == std::string::npos) ++i;  // its value
      continue;
    }
    if (eq != std::string::npos) continue;
    const FlagSpec* spec = nullptr;
    if (long_form) {
      if (const auto match = find_flag(name)) spec = match->spec;
    } else if (name.size() == 1) {
      spec = find_short_flag(name[0]);
    }
    if (!spec) continue;  // launch's parsing names it
    if (spec->arity == Arity::kValue) ++i;
    if (spec->arity == Arity::kBoolean && i + 1 < out.size() && boolean_word(out[i + 1])) ++i;
  }
  return out;
}

}  // namespace

bool started_as_launch_ps(const std::string& argv0) {
  const std::size_t slash = argv0.rfind('/');
  return argv0.substr(slash == std::string::npos ? 0 : slash + 1) == "launch_ps";
}

std::vector<std::string> launch_ps_arguments(const std::vector<std::string>& argv) {
  const std::vector<std::string> args = renamed(argv);
  std::vector<const char*> c_argv;
  for (const std::string& a : args) c_argv.push_back(a.c_str());
  // Which flags the command line gives (environment defaults do not count: read with none).
  const CommandLine given =
      read_command_line(static_cast<int>(c_argv.size()), c_argv.data(), env::EnvMap{});
  std::set<std::string> flags;
  for (const TypedSpelling& t : given.typed) flags.insert(t.spec->name);
  const auto has = [&](const std::string& name) { return flags.count(name) > 0; };

  std::vector<std::string> defaults;
  const bool server_list = has("servers");
  if (!server_list && !has("server_num")) {
    defaults.push_back("--server_num=" + std::to_string(kServers));
  }
  if (server_list && !has("workers")) {
    // launch_ps starts its trainers on this node (--node_ip) next to a user's server list;
    // launch's --servers takes the trainers' hosts with it.
    int trainers = kTrainers;
    if (has("worker_num")) {
      const std::string v = given.flags.value("worker_num");
      trainers = v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 6
                     ? 0  // not a count: launch names the bad value
                     : std::stoi(v);
    }
    const std::string host = has("node_ip") ? given.flags.value("node_ip") : "127.0.0.1";
    std::string hosts;
    for (int i = 0; i < trainers; ++i) hosts += (i ? "," : "") + host;
    if (trainers > 0) defaults.push_back("--workers=" + hosts);
  } else if (!has("worker_num") && !has("workers")) {
    defaults.push_back("--worker_num=" + std::to_string(kTrainers));
  }
  if (!has("log_dir")) defaults.push_back(std::string("--log_dir=") + kLogDir);
  if (!server_list && !has("started_port")) {
    defaults.push_back("--started_port=" + std::to_string(kFirstPort));
  }
  std::vector<std::string> out;
  out.push_back(args.empty() ? std::string("launch_ps") : args[0]);
  out.insert(out.end(), defaults.begin(), defaults.end());
  if (args.size() > 1) out.insert(out.end(), args.begin() + 1, args.end());
  return out;
}

}  // namespace ddl::launcher
