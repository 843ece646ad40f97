#include "launcher/options/options.h"

#include <algorithm>
#include <boost/asio/ip/address_v4.hpp>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cxxopts.hpp>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "env/contract.h"
#include "logging/log.h"

#ifndef DDL_VERSION
#define DDL_VERSION "unknown"
#endif

namespace ddl::launcher {
namespace {

// Flags that take a value; everything else is a switch. Needed to split argv before cxxopts sees
// it: in "--log_dir mylog train" the word "mylog" is a value, "train" is WORKER.
const std::set<std::string>& value_flags() {
  static const std::set<std::string> flags = {
      "selected_gpus", "gpus",         "nproc_per_node", "log_dir",      "cluster_node_ips",  "ips",
      "node_ip",       "started_port", "log_level",      "kill_timeout", "rendezvous_timeout",
      "max_restarts",  "hang_timeout", "nnodes",         "node_rank",    "master_addr",
      "master_port",   "server_num",   "worker_num",     "servers",      "workers",
      "server_grace",  "rdzv_conf",    "devices",        "master",       "rank",
      "job_id",        "rdzv_id",      "role",           "rdzv_endpoint", "rdzv_backend",
      "python",        "tee",          "redirects",      "local_ranks_filter", "monitor_interval",
      "start_method",  "run_mode",     "local_addr",     "event_log_handler",
      "signals_to_handle"};
  return flags;
}

const std::set<std::string>& switch_flags() {
  static const std::set<std::string> flags = {"quiet",  "print_config", "report",    "help",
                                              "h",      "version",      "module",    "no_python",
                                              "standalone", "log_overwrite", "run_path"};
  return flags;
}

// Flags of today's torchrun that launch does not carry out, with why; one line and exit 2 rather
// than a job that silently runs differently.
const std::map<std::string, std::string>& refused_flags() {
  static const std::map<std::string, std::string> flags = {
      {"logs_specs",
       "a Python entry point of torchrun's logging; launch writes LOG_DIR/workerlog.N itself"},
      {"numa_binding", "CPU binding near GPUs is not done by launch; bind with numactl in WORKER"},
      {"duplicate_stdout_filters",
       "not supported: a rank's stdout and stderr share one log here (filter LOG_DIR/workerlog.N)"},
      {"duplicate_stderr_filters",
       "not supported: a rank's stdout and stderr share one log here (filter LOG_DIR/workerlog.N)"},
      {"virtual_local_rank", "not supported: LOCAL_RANK is the worker's index on its node"}};
  return flags;
}

// Switches that take a boolean: "--print_config=false", and Paddle's space form
// "--print_config False" when the next word is a boolean.
const std::set<std::string>& boolean_switches() {
  static const std::set<std::string> flags = {"print_config", "report", "log_overwrite"};
  return flags;
}

bool is_boolean_word(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "true" || v == "false" || v == "0" || v == "1";
}

// Other launchers' names for our flags: Paddle 2.x's --start_port, --max_restart, --host,
// --trainers and --trainer_num; torchrun's --shutdown_timeout.
const std::map<std::string, std::string>& flag_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"start_port", "started_port"}, {"max_restart", "max_restarts"}, {"host", "node_ip"},
      {"shutdown_timeout", "kill_timeout"}, {"trainers", "workers"}, {"trainer_num", "worker_num"}};
  return aliases;
}

// torchrun's one-letter flags.
const std::map<char, std::string>& short_flags() {
  static const std::map<char, std::string> flags = {
      {'h', "help"}, {'m', "module"}, {'r', "redirects"}, {'t', "tee"}};
  return flags;
}

[[noreturn]] void bad_value(const std::string& flag, const std::string& value,
                            const std::string& expected) {
  throw OptionsError("--" + flag + "='" + value + "': " + expected);
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = text.find(',', start);
    parts.push_back(text.substr(start, pos == std::string::npos ? pos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return parts;
}

int parse_int_flag(const std::string& flag, const std::string& value, int min, int max) {
  int v = 0;
  try {
    v = env::parse_non_negative_int(value, "--" + flag);
  } catch (const env::EnvError&) {
    bad_value(flag, value,
              "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  if (v < min || v > max) {
    bad_value(flag, value,
              "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

// Seconds as typed by a user ("10", "0.5") -> milliseconds.
std::chrono::milliseconds parse_seconds(const std::string& flag, const std::string& value,
                                        bool allow_zero) {
  const char* begin = value.c_str();
  char* end = nullptr;
  double s = std::strtod(begin, &end);
  const bool ok = !value.empty() && end == begin + value.size() && std::isfinite(s) &&
                  value.find_first_of(" \t+-eExXnN") == std::string::npos &&
                  (allow_zero ? s >= 0 : s > 0) && s <= 1e7;
  if (!ok) {
    bad_value(flag, value,
              std::string("expected a number of seconds ") + (allow_zero ? ">= 0" : "> 0"));
  }
  auto ms = std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000.0)));
  if (!allow_zero && ms.count() == 0) ms = std::chrono::milliseconds(1);
  return ms;
}

bool parse_bool(const std::string& flag, const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad_value(flag, value, "expected true or false");
}

// torchrun's Std spelling of --tee / --redirects: one value 0..3 for every local rank, or
// LOCAL_RANK:VALUE pairs; a rank is in the set when its value is not 0.
LocalRanks parse_streams(const std::string& flag, const std::string& value) {
  const std::string expected =
      "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:VALUE,... such as 0:3,1:0";
  auto level = [&](const std::string& v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') bad_value(flag, value, expected);
    return v[0] - '0';
  };
  LocalRanks out;
  if (value.find(':') == std::string::npos) {
    out.all = level(value) != 0;
    return out;
  }
  std::set<int> seen;
  for (const std::string& part : split_commas(value)) {
    const auto colon = part.find(':');
    if (colon == std::string::npos) bad_value(flag, value, expected);
    int rank = 0;
    try {
      rank = env::parse_non_negative_int(part.substr(0, colon), "--" + flag);
    } catch (const env::EnvError&) {
      bad_value(flag, value, expected);
    }
    if (!seen.insert(rank).second) {
      bad_value(flag, value, "local rank " + std::to_string(rank) + " is listed twice");
    }
    if (level(part.substr(colon + 1)) != 0) out.ranks.push_back(rank);
  }
  std::sort(out.ranks.begin(), out.ranks.end());
  return out;
}

// --local_ranks_filter=0,2: local ranks, each a non-negative integer.
LocalRanks parse_rank_list(const std::string& flag, const std::string& value) {
  LocalRanks out;
  for (const std::string& part : split_commas(value)) {
    int rank = 0;
    try {
      rank = env::parse_non_negative_int(part, "--" + flag);
    } catch (const env::EnvError&) {
      bad_value(flag, value, "expected a comma-separated list of local ranks (0,1,...)");
    }
    if (std::find(out.ranks.begin(), out.ranks.end(), rank) == out.ranks.end()) {
      out.ranks.push_back(rank);
    }
  }
  std::sort(out.ranks.begin(), out.ranks.end());
  return out;
}

std::vector<int> parse_gpus(const std::string& flag, const std::string& value) {
  if (value.empty()) bad_value(flag, value, "expected a comma-separated list of GPU ids");
  std::vector<int> ids;
  for (const std::string& part : split_commas(value)) {
    int id = 0;
    try {
      id = env::parse_non_negative_int(part, "--" + flag);
    } catch (const env::EnvError&) {
      bad_value(flag, value, "GPU id '" + part + "' is not a non-negative integer");
    }
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
      bad_value(flag, value, "GPU id " + std::to_string(id) + " is listed twice");
    }
    ids.push_back(id);
  }
  return ids;
}

std::string check_ip(const std::string& flag, const std::string& all, const std::string& ip) {
  if (!is_valid_host(ip)) bad_value(flag, all, "'" + ip + "' is not an IPv4 address or host name");
  return ip;
}

std::vector<std::string> parse_ips(const std::string& flag, const std::string& value) {
  if (value.empty()) {
    bad_value(flag, value, "expected a comma-separated list of IPv4 addresses or host names");
  }
  std::vector<std::string> ips;
  for (const std::string& part : split_commas(value)) {
    check_ip(flag, value, part);
    if (std::find(ips.begin(), ips.end(), part) != ips.end()) {
      bad_value(flag, value, "address '" + part + "' is listed twice");
    }
    ips.push_back(part);
  }
  return ips;
}

// --servers / --workers: host:port entries, each host a valid address, no entry twice.
std::vector<env::Endpoint> parse_ps_endpoints(const std::string& flag, const std::string& value) {
  std::vector<env::Endpoint> endpoints;
  try {
    endpoints = env::parse_endpoint_list(value, "--" + flag);
  } catch (const env::EnvError&) {
    bad_value(flag, value, "expected a comma-separated list of ip:port (port 1..65535)");
  }
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    check_ip(flag, value, endpoints[i].host);
    for (std::size_t j = 0; j < i; ++j) {
      if (endpoints[j] == endpoints[i]) {
        bad_value(flag, value, "endpoint '" + endpoints[i].str() + "' is listed twice");
      }
    }
  }
  return endpoints;
}

// The launcher's part of argv, and WORKER with its arguments.
struct SplitArgs {
  std::vector<std::string> launcher;  // without argv[0]
  std::vector<std::string> worker;    // WORKER first; may be empty
};

SplitArgs split_argv(int argc, const char* const argv[]) {
  SplitArgs out;
  int i = 1;
  while (i < argc) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // first positional: WORKER
    if (a[1] != '-') {
      // -h, -m, and -r/-t with their value as the next word, glued ("-r3") or after '='.
      const auto it = short_flags().find(a[1]);
      if (it == short_flags().end()) {
        throw OptionsError("unknown option '" + a + "' (see launch --help)");
      }
      const std::string& name = it->second;
      ++i;
      if (value_flags().count(name) == 0) {
        if (a.size() > 2) throw OptionsError("unknown option '" + a + "' (see launch --help)");
        out.launcher.push_back("--" + name);
        continue;
      }
      if (a.size() > 2) {
        out.launcher.push_back("--" + name + "=" + a.substr(a[2] == '=' ? 3 : 2));
        continue;
      }
      if (i >= argc) throw OptionsError("option '" + a + "' needs a value (see launch --help)");
      out.launcher.push_back("--" + name + "=" + argv[i]);
      ++i;
      continue;
    }
    std::string name = a.substr(2);
    const std::size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    const std::string value = has_value ? name.substr(eq) : std::string();  // "=..." or ""
    if (has_value) name = name.substr(0, eq);
    // torchrun's dash spellings (--nproc-per-node) are the same flags.
    std::replace(name.begin(), name.end(), '-', '_');
    if (auto alias = flag_aliases().find(name); alias != flag_aliases().end()) {
      name = alias->second;
    }
    if (auto refused = refused_flags().find(name); refused != refused_flags().end()) {
      throw OptionsError("--" + name + " (torchrun's): " + refused->second);
    }
    const bool takes_value = value_flags().count(name) > 0;
    if (!takes_value && switch_flags().count(name) == 0) {
      throw OptionsError("unknown option '" + a + "' (see launch --help)");
    }
    const std::string typed = a;
    out.launcher.push_back("--" + name + value);
    ++i;
    if (takes_value && !has_value) {
      if (i >= argc) throw OptionsError("option '" + typed + "' needs a value (see launch --help)");
      out.launcher.push_back(argv[i]);
      ++i;
    } else if (!has_value && boolean_switches().count(name) && i < argc &&
               is_boolean_word(argv[i])) {
      out.launcher.back() += std::string("=") + argv[i];
      ++i;
    }
  }
  for (; i < argc; ++i) out.worker.emplace_back(argv[i]);
  return out;
}

// The name of a long flag in a normalized launcher argument ("--nnodes=2" -> "nnodes").
std::string flag_name(const std::string& arg) {
  if (arg.rfind("--", 0) != 0) return "";
  const std::string name = arg.substr(2);
  return name.substr(0, name.find('='));
}

// torchrun's PET_<FLAG> defaults (see parse_options in options.h): "--flag=value" for each
// variable set in `env` whose flag is not on the command line in any spelling, appended to
// `launcher`; each one used goes to `used` as "PET_X=value".
void add_environment_defaults(std::vector<std::string>& launcher, const env::EnvMap& env,
                              std::vector<std::string>& used) {
  std::set<std::string> given;
  for (const std::string& a : launcher) given.insert(flag_name(a));
  auto any_given = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (given.count(n)) return true;
    }
    return false;
  };
  // A variable's non-empty value, noted in `used`.
  auto variable = [&](const std::string& name) -> std::optional<std::string> {
    auto v = env::lookup(env, name);
    if (!v || v->empty()) return std::nullopt;
    used.push_back(name + "=" + *v);
    return v;
  };
  auto pet = [&](const std::string& flag) {
    std::string name = "PET_" + flag;
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return variable(name);
  };
  auto add = [&](const std::string& flag, const std::optional<std::string>& v) {
    if (v) launcher.push_back("--" + flag + "=" + *v);
  };
  // The nodes: only when the command line does not describe them in Paddle's spelling.
  const bool paddle_nodes =
      any_given({"cluster_node_ips", "ips", "node_ip", "master", "standalone"});
  if (!paddle_nodes) {
    for (const char* flag : {"nnodes", "node_rank"}) {
      if (!any_given({flag}) && !(std::string(flag) == "node_rank" && any_given({"rank"}))) {
        add(flag, pet(flag));
      }
    }
    // Node 0 by --master_addr/--master_port (torchrun's static backend) or --rdzv_endpoint (c10d);
    // when the variables give both, the backend decides which one is meant.
    const bool endpoint_given = any_given({"rdzv_endpoint"});
    const bool master_given = any_given({"master_addr", "master_port"});
    if (master_given) {
      for (const char* flag : {"master_addr", "master_port"}) {
        if (!any_given({flag})) add(flag, pet(flag));
      }
    } else if (!endpoint_given) {
      const auto backend_flag = std::find_if(launcher.begin(), launcher.end(), [](const auto& a) {
        return flag_name(a) == "rdzv_backend";
      });
      std::string backend = backend_flag != launcher.end()
                                ? backend_flag->substr(backend_flag->find('=') + 1)
                                : env::lookup(env, "PET_RDZV_BACKEND").value_or("static");
      const bool has_master = env::lookup(env, "PET_MASTER_ADDR").has_value() ||
                              env::lookup(env, "PET_MASTER_PORT").has_value();
      const bool has_endpoint = env::lookup(env, "PET_RDZV_ENDPOINT").has_value();
      if (has_endpoint && (backend == "c10d" || !has_master)) {
        add("rdzv_endpoint", pet("rdzv_endpoint"));
      } else {
        add("master_addr", pet("master_addr"));
        add("master_port", pet("master_port"));
      }
    }
  }
  if (!any_given({"nproc_per_node", "selected_gpus", "gpus", "devices"})) {
    add("nproc_per_node", pet("nproc_per_node"));
  }
  for (const char* flag :
       {"max_restarts", "rdzv_id", "rdzv_conf", "rdzv_backend", "role", "log_dir", "local_addr"}) {
    if (!any_given({flag})) add(flag, pet(flag));
  }

  // Paddle 2.x's launcher reads PADDLE_<NAME> for its flags (launch/context/args_envs.py);
  // Kubeflow's PaddleJob sets PADDLE_MASTER, PADDLE_NNODES and PADDLE_JOB_ID. Only for flags
  // still absent, after the PET_ ones.
  for (const std::string& a : launcher) given.insert(flag_name(a));
  const auto& paddle = variable;
  const bool nodes_given = any_given({"cluster_node_ips", "ips", "node_ip", "master", "master_addr",
                                      "master_port", "rdzv_endpoint", "standalone"});
  if (!nodes_given) {
    add("master", paddle("PADDLE_MASTER"));
    if (!any_given({"nnodes"})) add("nnodes", paddle("PADDLE_NNODES"));
    if (!any_given({"node_rank", "rank"})) add("rank", paddle("PADDLE_RANK"));
    for (const std::string& a : launcher) given.insert(flag_name(a));
    if (!any_given({"master", "nnodes"})) add("ips", paddle("PADDLE_IPS"));
  }
  if (!any_given({"nproc_per_node", "selected_gpus", "gpus", "devices"})) {
    if (auto devices = paddle("PADDLE_DEVICES")) {
      add("devices", devices);
    } else {
      add("nproc_per_node", paddle("PADDLE_NPROC_PER_NODE"));
    }
  }
  const std::pair<const char*, const char*> others[] = {
      {"PADDLE_JOB_ID", "job_id"},           {"PADDLE_LOG_DIR", "log_dir"},
      {"PADDLE_MAX_RESTART", "max_restarts"}, {"PADDLE_LOG_LEVEL", "log_level"},
      {"PADDLE_START_PORT", "started_port"}};
  for (const auto& [name, flag] : others) {
    if (!any_given({flag})) add(flag, paddle(name));
  }
}

cxxopts::Options make_cxxopts() {
  cxxopts::Options o("launch", "Starts and supervises the workers of a data-parallel job.");
  o.custom_help("[options] WORKER [WORKER ARGS...]");
  auto text = [] { return cxxopts::value<std::string>(); };
  o.add_options()("selected_gpus",
                  "GPU ids, one worker per id; each worker gets FLAGS_selected_gpus=<id>", text(),
                  "0,1,...")("gpus", "alias of --selected_gpus", text(), "0,1,...")(
      "devices", "alias of --selected_gpus (Paddle 2.x)", text(), "0,1,...")(
      "nproc_per_node", "workers on this node when no GPUs are selected (default: #GPUs, else 1)",
      text(), "N")("log_dir",
                   "write rank N's stdout+stderr to DIR/workerlog.N (created if missing)", text(),
                   "DIR")("quiet", "with --log_dir: do not echo rank 0 to the console")(
      "cluster_node_ips",
      "addresses (IPv4 or host names) of all nodes; ranks are node-major in this order "
      "(default 127.0.0.1, or Slurm's node list inside an allocation)",
      text(), "ip1,ip2,...")("ips", "alias of --cluster_node_ips", text(), "ip1,ip2,...")(
      "node_ip",
      "this node's address, one of --cluster_node_ips (default 127.0.0.1; Paddle 2.x: --host, "
      "torchrun: --local_addr)",
      text(),
      "IP")("nnodes",
           "torchrun spelling: number of nodes (use with --node_rank, --master_addr); MIN:MAX "
           "for an elastic job that runs on any number of nodes in between",
           text(), "N|MIN:MAX")("node_rank", "torchrun spelling: this node's index, 0..nnodes-1", text(),
                         "K")("rank", "alias of --node_rank (Paddle 2.x)", text(), "K")(
      "master_addr", "torchrun spelling: node 0's address (hosts the control store)", text(),
      "HOST")("master",
              "Paddle 2.x: node 0's HOST:PORT, the same as --master_addr HOST --master_port PORT",
              text(), "HOST:PORT")(
      "master_port",
      "multi-node: port of the control store on node 0 (default: started_port-1, else 29500); "
      "with --master_addr and no --started_port it is rank 0's MASTER_PORT (default 29500) and "
      "the control store takes the next port",
      text(), "P")("started_port",
                   "endpoints are node_ip:P, P+1, ... (default: free ports, exchanged between "
                   "nodes through the control store; Paddle 2.x: --start_port)",
                   text(), "P")(
      "print_config", "print the configuration and each rank's environment",
      cxxopts::value<std::string>()->default_value("true")->implicit_value("true"),
      "BOOL")("log_level", "debug|info|warn|error or 10|20|30|40 (also passed to workers)", text(),
              "LEVEL")("kill_timeout",
                       "seconds between SIGTERM and SIGKILL when stopping workers (default 10; "
                       "torchrun: --shutdown_timeout)",
                       text(), "S")(
      "rendezvous_timeout", "seconds the workers may take to find each other (default 300)", text(),
      "S")("max_restarts",
           "after a worker fails anywhere in the job (or the hang guard fires), stop every "
           "node's workers and start them all again, up to N times (default 0; Paddle 2.x: "
           "--max_restart)",
           text(), "N")("hang_timeout",
                        "fail the job when no rank has printed anything for S seconds "
                        "(default 0: off); exit code 124",
                        text(), "S")(
      "server_num",
      "parameter-server job: S servers per node (trainers: --worker_num); Paddle's launch_ps",
      text(), "S")("worker_num",
                   "parameter-server job: W trainers per node (default: --nproc_per_node, else "
                   "1); needs --server_num or --servers",
                   text(), "W")(
      "servers",
      "parameter-server job: every server's endpoint; this node starts those on --node_ip "
      "(with --workers)",
      text(), "ip:port,...")("workers",
                             "parameter-server job: every trainer's endpoint; this node starts "
                             "those on --node_ip (with --servers)",
                             text(), "ip:port,...")(
      "server_grace",
      "parameter-server job: once this node's trainers all exited 0, seconds its servers may take "
      "to exit before they are stopped (default: --kill_timeout)",
      text(), "S")("rdzv_conf",
                   "elastic jobs: last_call_timeout=S, seconds to wait for more nodes once MIN "
                   "have joined (default 30)",
                   text(), "KEY=VALUE,...")(
      "report",
      "write LOG_DIR/report.json and LOG_DIR/report.html (per rank: exit, CPU, memory, "
      "training curves; the generations)",
      cxxopts::value<std::string>()->default_value("true")->implicit_value("true"), "BOOL")(
      "rdzv_id", "torchrun: the job's id, given to workers as TORCHELASTIC_RUN_ID (default: "
      "DDL_JOB_ID, else a random one)", text(), "ID")(
      "role", "torchrun: the workers' ROLE_NAME (default: default)", text(), "NAME")(
      "job_id", "Paddle 2.x: the job's name, given to workers as PADDLE_JOB_ID (default: default)",
      text(), "NAME")("rdzv_endpoint",
                      "torchrun: node 0's HOST[:PORT] (port default 29400), the same as "
                      "--master_addr HOST --master_port PORT",
                      text(), "HOST[:PORT]")(
      "rdzv_backend",
      "torchrun: c10d or static; both mean the control store on node 0 (etcd is not supported)",
      text(), "NAME")(
      "standalone",
      "torchrun: a single-node job with its own rendezvous (the default here; multi-node flags "
      "are then an error)")(
      "m,module",
      "run WORKER as a Python module: PYTHON -u -m WORKER (torchrun's -m)")(
      "no_python",
      "run WORKER itself even when it ends in .py (torchrun's --no_python)")(
      "run_path",
      "torchrun: run WORKER as a Python script whatever its name (PYTHON -u WORKER); wins over "
      "--no_python")(
      "local_addr", "torchrun: this node's address (the same as --node_ip)", text(), "HOST")(
      "event_log_handler", "torchrun: only 'null' (launch has no event handlers)", text(),
      "NAME")("signals_to_handle",
              "torchrun: only its default SIGTERM,SIGINT,SIGHUP,SIGQUIT, which launch always "
              "forwards (SIGUSR1 dumps stacks)",
              text(), "LIST")(
      "python",
      "the interpreter for .py scripts and -m (default: python3 on PATH); scripts run as "
      "PYTHON -u SCRIPT, as torchrun and Paddle run them",
      text(), "PROGRAM")(
      "local_ranks_filter",
      "torchrun: show only these local ranks' lines on the console (default: local rank 0 with "
      "--log_dir, every rank without)",
      text(), "0,1,...")(
      "t,tee",
      "torchrun: with --log_dir, also show these local ranks on the console: 0 none, 1|2|3 all, "
      "or per rank 0:3,1:0",
      text(), "SPEC")(
      "r,redirects",
      "torchrun: accepted and checked (0-3 or 0:3,1:0); with --log_dir both streams always go "
      "to the rank's log file",
      text(), "SPEC")(
      "monitor_interval",
      "torchrun: accepted (seconds >= 0); worker exits are noticed at once here, not by polling",
      text(), "S")(
      "start_method",
      "torchrun: spawn|fork|forkserver, accepted; every worker is a fresh process (exec)",
      text(), "NAME")(
      "run_mode",
      "Paddle 2.x: collective (default) or ps (a parameter-server job: needs --server_num or "
      "--servers)",
      text(), "MODE")(
      "log_overwrite",
      "Paddle 2.x: truncate the logs at job start; false appends to them",
      cxxopts::value<std::string>()->default_value("true")->implicit_value("true"), "BOOL")(
      "h,help", "print this help")("version", "print the version");
  return o;
}

}  // namespace

bool is_valid_host(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  if (host.find_first_not_of("0123456789.") == std::string::npos) {
    boost::system::error_code ec;
    boost::asio::ip::make_address_v4(host, ec);
    return !ec;
  }
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = host.find('.', start);
    const std::string label = host.substr(start, dot == std::string::npos ? dot : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
    }
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

bool LaunchOptions::node_flags_given() const {
  return cluster_node_ips_given || node_ip_given || nnodes || node_rank || master_addr;
}

int LaunchOptions::node_index() const {
  auto it = std::find(cluster_node_ips.begin(), cluster_node_ips.end(), node_ip);
  return static_cast<int>(it - cluster_node_ips.begin());
}

std::string help_text() {
  return make_cxxopts().help() +
         "\nEverything after WORKER is passed to the worker untouched. WORKER is a path, or the\n"
         "name of a program next to `launch` or on PATH. A WORKER ending in .py (and -m MODULE)\n"
         "runs as `python3 -u WORKER ARGS` with the python3 first on PATH, as under torchrun and\n"
         "Paddle; --python=PROGRAM picks another interpreter, --no_python runs WORKER itself.\n"
         "Workers get PYTHONUNBUFFERED=1 unless it is set, and no http_proxy/https_proxy (kept\n"
         "as DDL_SAVED_HTTP_PROXY/DDL_SAVED_HTTPS_PROXY). Each worker gets the variables of\n"
         "Paddle 1.8, Paddle 2.x and torchrun (PADDLE_TRAINER_ID, RANK, LOCAL_RANK, WORLD_SIZE,\n"
         "MASTER_ADDR, TORCHELASTIC_*, ...; README: \"The environment contract\").\n"
         "kill -USR1 <launch pid> writes every running rank's stack to LOG_DIR/stacks.<K>.txt\n"
         "(also done when the hang guard fires or a rank exits 124 at a deadline).\n";
}

std::string version_text() { return std::string("ddlaunch ") + DDL_VERSION; }

int visible_gpu_count(const env::EnvMap& env) {
  int devices = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++devices;
    }
  }
  const auto visible = env::lookup(env, "CUDA_VISIBLE_DEVICES");
  if (!visible) return devices;
  int listed = 0;
  for (const std::string& part : split_commas(*visible)) {
    const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    const bool uuid = part.rfind("GPU-", 0) == 0 || part.rfind("MIG-", 0) == 0;
    if (!(index && std::stoll(part.substr(0, 9)) < devices) && !uuid) break;
    ++listed;
  }
  return std::min(listed, devices);
}

LaunchOptions parse_options(int argc, const char* const argv[], const env::EnvMap& env,
                            const MachineCounts& machine) {
  SplitArgs split = split_argv(argc, argv);
  std::vector<std::string> from_environment;
  add_environment_defaults(split.launcher, env, from_environment);

  std::vector<const char*> args;
  args.push_back(argc > 0 ? argv[0] : "launch");
  for (const std::string& a : split.launcher) args.push_back(a.c_str());

  cxxopts::Options spec = make_cxxopts();
  cxxopts::ParseResult r;
  try {
    r = spec.parse(static_cast<int>(args.size()), args.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw OptionsError(std::string(e.what()) + " (see launch --help)");
  }

  LaunchOptions o;
  o.from_environment = std::move(from_environment);
  o.help = r.count("help") > 0;
  o.version = r.count("version") > 0;
  if (o.help || o.version) return o;

  // The one of a flag's spellings that was given, with its value; more than one is an error.
  auto one_of = [&](std::initializer_list<const char*> names)
      -> std::optional<std::pair<std::string, std::string>> {
    std::optional<std::pair<std::string, std::string>> given;
    for (const char* name : names) {
      if (!r.count(name)) continue;
      if (given) {
        throw OptionsError("--" + given->first + " and its alias --" + name + " were both given");
      }
      given = std::pair{std::string(name), r[name].as<std::string>()};
    }
    return given;
  };

  if (auto g = one_of({"selected_gpus", "gpus", "devices"})) {
    o.selected_gpus_given = parse_gpus(g->first, g->second);
    o.selected_gpus = o.selected_gpus_given;
    // As Paddle: with CUDA_VISIBLE_DEVICES set, the ids are the machine's and each worker gets
    // the id's position in that list (CUDA_VISIBLE_DEVICES=4,5 --selected_gpus=5 gives 1).
    const auto visible = env::lookup(env, "CUDA_VISIBLE_DEVICES");
    if (visible && !visible->empty()) {
      const std::vector<std::string> list = split_commas(*visible);
      for (int& id : o.selected_gpus) {
        const auto at = std::find(list.begin(), list.end(), std::to_string(id));
        if (at == list.end()) {
          bad_value(g->first, g->second,
                    "GPU " + std::to_string(id) + " is not in CUDA_VISIBLE_DEVICES='" + *visible +
                        "' (the ids are the machine's; each worker gets the id's position in "
                        "that list)");
        }
        id = static_cast<int>(at - list.begin());
      }
    }
  }
  std::optional<int> nproc;
  if (r.count("nproc_per_node")) {
    // torchrun's words: gpu = one per visible GPU, cpu = one per core, auto = gpu when there are
    // GPUs, else cpu. With GPUs each worker gets one, as with --selected_gpus=0,1,...
    const std::string v = r["nproc_per_node"].as<std::string>();
    const bool use_gpus = v == "gpu" || (v == "auto" && machine.gpus > 0);
    if (v == "gpu" && machine.gpus < 1) {
      bad_value("nproc_per_node", v, "no GPU is visible here (use cpu, auto or a number)");
    }
    if (use_gpus && o.selected_gpus.empty()) {
      for (int id = 0; id < machine.gpus; ++id) o.selected_gpus.push_back(id);
    }
    nproc = use_gpus                           ? machine.gpus
            : (v == "cpu" || v == "auto")      ? std::max(1, machine.cores)
                                               : parse_int_flag("nproc_per_node", v, 1, 4096);
  }
  if (!o.selected_gpus.empty()) {
    const int gpus = static_cast<int>(o.selected_gpus.size());
    if (nproc && *nproc != gpus) {
      throw OptionsError("--nproc_per_node=" + std::to_string(*nproc) + " does not match the " +
                         std::to_string(gpus) + " ids of --selected_gpus (one worker per GPU)");
    }
    o.nproc_per_node = gpus;
  } else {
    o.nproc_per_node = nproc.value_or(1);
  }

  // Parameter-server flags; resolved against the node flags below.
  std::optional<int> server_num;
  std::optional<int> worker_num;
  if (r.count("server_num")) {
    server_num = parse_int_flag("server_num", r["server_num"].as<std::string>(), 1,
                                kMaxProcessesPerRole);
  }
  if (r.count("worker_num")) {
    worker_num = parse_int_flag("worker_num", r["worker_num"].as<std::string>(), 1,
                                kMaxProcessesPerRole);
  }
  if (r.count("servers")) o.servers = parse_ps_endpoints("servers", r["servers"].as<std::string>());
  if (r.count("workers")) o.workers = parse_ps_endpoints("workers", r["workers"].as<std::string>());
  const bool ps_job = server_num || !o.servers.empty();
  const bool explicit_endpoints = !o.servers.empty() || !o.workers.empty();
  if (!ps_job) {
    for (const char* flag : {"worker_num", "workers", "server_grace"}) {
      if (r.count(flag)) {
        bad_value(flag, r[flag].as<std::string>(),
                  "a parameter-server job needs --server_num or --servers");
      }
    }
  }

  if (r.count("log_dir")) {
    std::string dir = r["log_dir"].as<std::string>();
    if (dir.empty()) bad_value("log_dir", dir, "expected a directory");
    o.log_dir = dir;
  }
  o.quiet = r.count("quiet") > 0;

  if (auto ips = one_of({"cluster_node_ips", "ips"})) {
    o.cluster_node_ips = parse_ips(ips->first, ips->second);
    o.cluster_node_ips_given = true;
  }
  if (r.count("node_ip")) {
    const std::string ip = r["node_ip"].as<std::string>();
    o.node_ip = check_ip("node_ip", ip, ip);
    o.node_ip_given = true;
  }
  if (r.count("local_addr")) {
    const std::string ip = r["local_addr"].as<std::string>();
    if (o.node_ip_given && ip != o.node_ip) {
      bad_value("local_addr", ip, "--node_ip='" + o.node_ip + "' names this node already");
    }
    o.node_ip = check_ip("local_addr", ip, ip);
    o.node_ip_given = true;
    // torchrun's flag names this node only; a single-node job is then that one address.
    if (!o.cluster_node_ips_given) o.cluster_node_ips = {ip};
  }
  if (r.count("nnodes")) {
    const std::string v = r["nnodes"].as<std::string>();
    const auto colon = v.find(':');
    if (colon == std::string::npos) {
      o.nnodes = parse_int_flag("nnodes", v, 1, kMaxNodes);
    } else {
      const int lo = parse_int_flag("nnodes", v.substr(0, colon), 1, kMaxNodes);
      const int hi = parse_int_flag("nnodes", v.substr(colon + 1), 1, kMaxNodes);
      if (lo > hi) bad_value("nnodes", v, "MIN:MAX with MIN <= MAX");
      o.min_nnodes = lo;
      o.nnodes = hi;
    }
  }
  if (r.count("rdzv_conf")) {
    const std::string v = r["rdzv_conf"].as<std::string>();
    std::size_t start = 0;
    while (start <= v.size()) {
      const std::size_t comma = v.find(',', start);
      const std::string item = v.substr(start, comma == std::string::npos ? comma : comma - start);
      const std::size_t eq = item.find('=');
      const std::string key = item.substr(0, eq);
      if (eq == std::string::npos || key != "last_call_timeout") {
        bad_value("rdzv_conf", v, "KEY=VALUE,... with KEY last_call_timeout");
      }
      o.last_call_timeout = parse_seconds("rdzv_conf", item.substr(eq + 1), true);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (auto k = one_of({"node_rank", "rank"})) {
    o.node_rank = parse_int_flag(k->first, k->second, 0, kMaxNodes - 1);
  }
  if (r.count("master_addr")) {
    const std::string v = r["master_addr"].as<std::string>();
    o.master_addr = check_ip("master_addr", v, v);
  }
  if (r.count("master_port")) {
    o.master_port = parse_int_flag("master_port", r["master_port"].as<std::string>(), 1, 65535);
  }
  if (r.count("master")) {
    const std::string v = r["master"].as<std::string>();
    if (o.master_addr || o.master_port) {
      bad_value("master", v, "give either --master or --master_addr/--master_port, not both");
    }
    if (v.rfind("etcd://", 0) == 0) {
      bad_value("master", v, "an etcd master is not supported; give node 0's HOST:PORT");
    }
    const std::string hostport = v.rfind("http://", 0) == 0 ? v.substr(7) : v;
    const auto colon = hostport.rfind(':');
    if (colon == std::string::npos) bad_value("master", v, "expected HOST:PORT of node 0");
    o.master_addr = check_ip("master", v, hostport.substr(0, colon));
    o.master_port = parse_int_flag("master", hostport.substr(colon + 1), 1, 65535);
  }
  if (r.count("rdzv_backend")) {
    const std::string v = r["rdzv_backend"].as<std::string>();
    if (v != "c10d" && v != "static") {
      bad_value("rdzv_backend", v,
                "expected c10d or static (both: node 0 hosts the control store; etcd is not "
                "supported)");
    }
  }
  if (r.count("rdzv_endpoint")) {
    const std::string v = r["rdzv_endpoint"].as<std::string>();
    if (o.master_addr || o.master_port) {
      bad_value("rdzv_endpoint", v,
                "give either --rdzv_endpoint or --master_addr/--master_port (or --master), not both");
    }
    const auto colon = v.rfind(':');
    const std::string host = colon == std::string::npos ? v : v.substr(0, colon);
    o.master_addr = check_ip("rdzv_endpoint", v, host);
    o.master_port = colon == std::string::npos
                        ? kDefaultRendezvousPort
                        : parse_int_flag("rdzv_endpoint", v.substr(colon + 1), 1, 65535);
  }
  o.static_master = r.count("master_addr") > 0 &&
                    !(r.count("rdzv_backend") && r["rdzv_backend"].as<std::string>() == "c10d");
  o.auto_node_rank =
      !o.node_rank && (r.count("master") > 0 ||
                       (r.count("rdzv_backend") && r["rdzv_backend"].as<std::string>() == "c10d"));
  auto name_flag = [&](const char* flag) -> std::optional<std::string> {
    if (!r.count(flag)) return std::nullopt;
    const std::string v = r[flag].as<std::string>();
    if (v.empty() || v.find_first_of(" \t\n,=") != std::string::npos) {
      bad_value(flag, v, "expected a non-empty name without spaces, commas or '='");
    }
    return v;
  };
  o.rdzv_id = name_flag("rdzv_id");
  o.job_id = name_flag("job_id");
  if (auto role = name_flag("role")) o.role = *role;
  const bool torchrun_spelling = o.nnodes || o.node_rank || o.master_addr;
  if (torchrun_spelling) {
    if (o.cluster_node_ips_given) {
      throw OptionsError(
          "--cluster_node_ips and --nnodes/--node_rank/--master_addr describe the nodes twice; "
          "use one spelling");
    }
    const int nnodes = o.nnodes.value_or(1);
    if (o.node_rank.value_or(0) >= nnodes) {
      throw OptionsError("--node_rank=" + std::to_string(*o.node_rank) +
                         " is not below --nnodes=" + std::to_string(nnodes));
    }
    if (nnodes > 1 && !o.master_addr) {
      throw OptionsError("--nnodes=" + std::to_string(nnodes) +
                         " needs --master_addr (node 0's address, where the control store runs)");
    }
    // --node_ip is this node's own address here, not a member of a list. A single node given
    // --master_addr is that address (MASTER_ADDR as given, as torchrun's workers see it).
    if (!o.node_ip_given) o.node_ip = nnodes == 1 && o.master_addr ? *o.master_addr : kDefaultNodeIp;
    o.cluster_node_ips = {o.node_ip};
  } else if (explicit_endpoints) {
    // --servers/--workers name every process's host: this node is --node_ip, whatever it is.
  } else if (std::find(o.cluster_node_ips.begin(), o.cluster_node_ips.end(), o.node_ip) ==
      o.cluster_node_ips.end()) {
    std::string list;
    for (const auto& ip : o.cluster_node_ips) list += (list.empty() ? "" : ",") + ip;
    throw OptionsError("--node_ip='" + o.node_ip + "' is not in --cluster_node_ips='" + list + "'");
  }

  if (ps_job) {
    const std::string nproc_text = nproc ? std::to_string(*nproc) : std::string();
    if (explicit_endpoints) {
      const auto list = [&](const char* flag) { return r[flag].as<std::string>(); };
      if (o.workers.empty()) bad_value("servers", list("servers"), "needs --workers as well");
      if (o.servers.empty()) bad_value("workers", list("workers"), "needs --servers as well");
      const int s_count = static_cast<int>(o.servers.size());
      const int w_count = static_cast<int>(o.workers.size());
      if (server_num && *server_num != s_count) {
        throw OptionsError("--server_num=" + std::to_string(*server_num) + " does not match the " +
                           std::to_string(s_count) + " endpoint(s) of --servers='" +
                           list("servers") + "'");
      }
      if (worker_num && *worker_num != w_count) {
        throw OptionsError("--worker_num=" + std::to_string(*worker_num) + " does not match the " +
                           std::to_string(w_count) + " endpoint(s) of --workers='" +
                           list("workers") + "'");
      }
      for (const env::Endpoint& e : o.workers) {
        if (std::find(o.servers.begin(), o.servers.end(), e) != o.servers.end()) {
          bad_value("workers", list("workers"),
                    "endpoint '" + e.str() + "' is also in --servers");
        }
      }
      if (torchrun_spelling || o.cluster_node_ips_given) {
        throw OptionsError(
            "--servers/--workers name every process's host; they cannot be combined with "
            "--cluster_node_ips or --nnodes/--node_rank/--master_addr (give --node_ip only)");
      }
      if (r.count("started_port")) {
        bad_value("started_port", r["started_port"].as<std::string>(),
                  "--servers/--workers give every port already");
      }
      o.server_num = s_count;
      o.worker_num = w_count;
      o.cluster_node_ips = {o.node_ip};
    } else {
      o.server_num = *server_num;
      o.worker_num = worker_num.value_or(o.nproc_per_node);
    }
    const std::string w_source =
        explicit_endpoints ? " (the entries of --workers)" : " trainers per node";
    if (nproc && *nproc != o.worker_num) {
      throw OptionsError("--nproc_per_node=" + nproc_text + " does not match --worker_num=" +
                         std::to_string(o.worker_num) + w_source +
                         ": a parameter-server job starts --worker_num trainers, --nproc_per_node "
                         "is not used");
    }
    if (!o.selected_gpus.empty() && !explicit_endpoints &&
        static_cast<int>(o.selected_gpus.size()) != o.worker_num) {
      const auto g = one_of({"selected_gpus", "gpus", "devices"});
      throw OptionsError("--" + g->first + "='" + g->second + "' gives " +
                         std::to_string(o.selected_gpus.size()) + " GPU(s) for --worker_num=" +
                         std::to_string(o.worker_num) + " trainers per node (one GPU per trainer)");
    }
    if (explicit_endpoints) {
      o.nproc_per_node = static_cast<int>(std::count_if(
          o.workers.begin(), o.workers.end(),
          [&](const env::Endpoint& e) { return e.host == o.node_ip; }));
    } else {
      o.nproc_per_node = o.worker_num;
    }
  }

  if (r.count("started_port")) {
    const std::string v = r["started_port"].as<std::string>();
    o.started_port = parse_int_flag("started_port", v, 1, 65535);
    // Per node: the workers of a collective job; a parameter-server job's servers, then trainers.
    const int per_node = ps_job ? o.server_num + o.worker_num : o.nproc_per_node;
    const std::string what = ps_job ? std::to_string(o.server_num) + " servers and " +
                                          std::to_string(o.worker_num) + " trainers"
                                    : std::to_string(o.nproc_per_node) + " workers";
    if (*o.started_port + per_node - 1 > 65535) {
      bad_value("started_port", v,
                what + " need ports up to " + std::to_string(*o.started_port + per_node - 1) +
                    " > 65535");
    }
  }

  o.print_config = parse_bool("print_config", r["print_config"].as<std::string>());
  o.report = parse_bool("report", r["report"].as<std::string>());
  o.log_overwrite = parse_bool("log_overwrite", r["log_overwrite"].as<std::string>());

  // How WORKER is run, and what the console shows.
  o.module = r.count("module") > 0;
  o.run_path = r.count("run_path") > 0;
  // torchrun: --run_path takes precedence over --no_python.
  o.no_python = r.count("no_python") > 0 && !o.run_path;
  if (o.module && o.run_path) {
    throw OptionsError("--module and --run_path were both given: WORKER is a module or a script");
  }
  if (r.count("signals_to_handle")) {
    const std::string v = r["signals_to_handle"].as<std::string>();
    const std::set<std::string> forwarded = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"};
    const auto parts = split_commas(v);
    if (std::set<std::string>(parts.begin(), parts.end()) != forwarded) {
      bad_value("signals_to_handle", v,
                "launch always forwards SIGTERM,SIGINT,SIGHUP,SIGQUIT (torchrun's default) and "
                "dumps stacks on SIGUSR1; other sets are not supported");
    }
  }
  if (r.count("event_log_handler") && r["event_log_handler"].as<std::string>() != "null") {
    bad_value("event_log_handler", r["event_log_handler"].as<std::string>(),
              "only 'null': launch has no event log handlers (its run report is --report)");
  }
  if (o.module && o.no_python) {
    throw OptionsError("--module and --no_python were both given: a module needs the interpreter");
  }
  if (r.count("python")) {
    const std::string v = r["python"].as<std::string>();
    if (v.empty()) bad_value("python", v, "expected an interpreter (a path or a name on PATH)");
    if (o.no_python) bad_value("python", v, "--no_python runs WORKER without an interpreter");
    o.python = v;
  }
  if (r.count("local_ranks_filter")) {
    o.local_ranks_filter =
        parse_rank_list("local_ranks_filter", r["local_ranks_filter"].as<std::string>());
  }
  if (r.count("tee")) o.tee = parse_streams("tee", r["tee"].as<std::string>());
  if (r.count("redirects")) o.redirects = parse_streams("redirects", r["redirects"].as<std::string>());
  if (r.count("monitor_interval")) {
    const std::string v = r["monitor_interval"].as<std::string>();
    o.monitor_interval =
        static_cast<double>(parse_seconds("monitor_interval", v, true).count()) / 1000.0;
  }
  if (r.count("start_method")) {
    const std::string v = r["start_method"].as<std::string>();
    if (v != "spawn" && v != "fork" && v != "forkserver") {
      bad_value("start_method", v, "expected spawn, fork or forkserver");
    }
    o.start_method = v;
  }
  o.standalone = r.count("standalone") > 0;
  if (o.standalone && (o.nnodes.value_or(1) > 1 || o.node_rank.value_or(0) > 0 ||
                       o.cluster_node_ips_given || r.count("master") || r.count("rdzv_endpoint"))) {
    throw OptionsError(
        "--standalone is a single-node job: it cannot be combined with --nnodes above 1, "
        "--node_rank, --master, --rdzv_endpoint or --cluster_node_ips");
  }
  if (r.count("run_mode")) {
    const std::string v = r["run_mode"].as<std::string>();
    if (v == "collective" && ps_job) {
      bad_value("run_mode", v, "--server_num/--servers make this a parameter-server job (ps)");
    } else if (v == "ps" && !ps_job) {
      bad_value("run_mode", v, "a parameter-server job needs --server_num or --servers");
    } else if (v != "collective" && v != "ps") {
      bad_value("run_mode", v, "expected collective or ps (ps-heter and rpc are not supported)");
    }
  }
  if (o.elastic() && ps_job) {
    throw OptionsError("--nnodes=" + std::to_string(*o.min_nnodes) + ":" +
                       std::to_string(*o.nnodes) +
                       ": elastic node counts are for collective jobs; a parameter-server job "
                       "needs a fixed --nnodes");
  }

  if (r.count("log_level")) {
    const std::string v = r["log_level"].as<std::string>();
    try {
      o.log_level = logging::parse_level(v);
    } catch (const std::invalid_argument&) {
      bad_value("log_level", v, "expected debug, info, warn, error or 10, 20, 30, 40");
    }
    const auto name = spdlog::level::to_string_view(o.log_level);
    o.log_level_name = o.log_level == spdlog::level::warn  ? std::string("warn")
                       : o.log_level == spdlog::level::err ? std::string("error")
                                                           : std::string(name.data(), name.size());
  }
  if (r.count("kill_timeout")) {
    o.kill_timeout = parse_seconds("kill_timeout", r["kill_timeout"].as<std::string>(), true);
  }
  if (r.count("rendezvous_timeout")) {
    o.rendezvous_timeout =
        parse_seconds("rendezvous_timeout", r["rendezvous_timeout"].as<std::string>(), false);
  }

  if (r.count("server_grace")) {
    o.server_grace = parse_seconds("server_grace", r["server_grace"].as<std::string>(), true);
  }

  if (r.count("max_restarts")) {
    o.max_restarts =
        parse_int_flag("max_restarts", r["max_restarts"].as<std::string>(), 0, kMaxRestartsLimit);
  }
  if (r.count("hang_timeout")) {
    o.hang_timeout = parse_seconds("hang_timeout", r["hang_timeout"].as<std::string>(), true);
  }

  if (split.worker.empty()) throw OptionsError("missing WORKER program (see launch --help)");
  o.worker = split.worker.front();
  if (o.worker.empty()) throw OptionsError("WORKER is an empty string (see launch --help)");
  o.worker_args.assign(split.worker.begin() + 1, split.worker.end());
  return o;
}

std::string describe_options(const LaunchOptions& o) {
  auto join = [](const auto& items) {
    std::ostringstream os;
    for (std::size_t i = 0; i < items.size(); ++i) os << (i ? "," : "") << items[i];
    return os.str();
  };
  auto seconds = [](std::chrono::milliseconds ms) {
    std::ostringstream os;
    os << static_cast<double>(ms.count()) / 1000.0;
    return os.str();
  };
  std::ostringstream os;
  os << "-----------  Configuration Arguments -----------\n";
  os << "cluster_node_ips: " << join(o.cluster_node_ips) << "\n";
  os << "hang_timeout: " << (o.hang_timeout.count() == 0 ? "None" : seconds(o.hang_timeout))
     << "\n";
  os << "job_id: " << o.job_id.value_or("default") << "\n";
  os << "kill_timeout: " << seconds(o.kill_timeout) << "\n";
  os << "log_dir: " << o.log_dir.value_or("None") << "\n";
  os << "log_level: " << logging::paddle_level(o.log_level) << "\n";
  os << "master_addr: " << o.master_addr.value_or("None") << "\n";
  os << "master_port: " << (o.master_port ? std::to_string(*o.master_port) : "None") << "\n";
  os << "max_restarts: " << o.max_restarts << "\n";
  os << "nnodes: "
     << (o.elastic() ? std::to_string(*o.min_nnodes) + ":" + std::to_string(*o.nnodes)
         : o.nnodes  ? std::to_string(*o.nnodes)
                     : "None")
     << "\n";
  os << "node_ip: " << o.node_ip << "\n";
  os << "node_rank: " << (o.node_rank ? std::to_string(*o.node_rank) : "None") << "\n";
  os << "nproc_per_node: " << o.nproc_per_node << "\n";
  os << "print_config: " << (o.print_config ? "True" : "False") << "\n";
  os << "quiet: " << (o.quiet ? "True" : "False") << "\n";
  os << "rdzv_id: " << o.rdzv_id.value_or("None") << "\n";
  os << "rendezvous_timeout: "
     << seconds(o.rendezvous_timeout.value_or(env::kDefaultRendezvousTimeout)) << "\n";
  os << "role: " << o.role << "\n";
  os << "selected_gpus: "
     << (o.selected_gpus_given.empty() ? (o.selected_gpus.empty() ? "None" : join(o.selected_gpus))
                                       : join(o.selected_gpus_given))
     << "\n";
  // A parameter-server job's flags; a collective job's block stays as it always was.
  if (o.ps_job()) {
    os << "server_grace: " << seconds(o.server_grace_or_default()) << "\n";
    os << "server_num: " << o.server_num << "\n";
    os << "servers: " << (o.servers.empty() ? "None" : env::join_endpoints(o.servers)) << "\n";
  }
  os << "started_port: " << (o.started_port ? std::to_string(*o.started_port) : "None") << "\n";
  os << "training_script: " << o.worker << "\n";
  os << "training_script_args: [";
  for (std::size_t i = 0; i < o.worker_args.size(); ++i) {
    os << (i ? ", " : "") << "'" << o.worker_args[i] << "'";
  }
  os << "]\n";
  if (o.ps_job()) {
    os << "worker_num: " << o.worker_num << "\n";
    os << "workers: " << (o.workers.empty() ? "None" : env::join_endpoints(o.workers)) << "\n";
  }
  os << "------------------------------------------------\n";
  return os.str();
}

}  // namespace ddl::launcher
