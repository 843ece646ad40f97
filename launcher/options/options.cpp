#include "launcher/options/options.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "env/text.h"
#include "launcher/options/command_line.h"
#include "launcher/options/flags.h"
#include "launcher/options/fleet_elastic.h"
#include "launcher/options/values.h"
#include "logging/log.h"

#ifndef DDL_VERSION
#define DDL_VERSION "unknown"
#endif

namespace ddl::launcher {

const char* cpu_bind_name(CpuBind bind) {
  switch (bind) {
    case CpuBind::kCore:
      return "core";
    case CpuBind::kNuma:
      return "numa";
    case CpuBind::kNone:
      break;
  }
  return "none";
}

std::string version_text() { return std::string("ddlaunch ") + DDL_VERSION; }

const char* dialect_name(Dialect dialect) {
  switch (dialect) {
    case Dialect::kOurs:
      return "launch";
    case Dialect::kTorchrun:
      return "torchrun";
    case Dialect::kPaddle18:
      return "paddle1.8";
    case Dialect::kFleetrun:
      return "fleetrun";
    case Dialect::kPaddle2:
      return "paddle2";
  }
  return "";
}

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

namespace {

// Whose flags these are (see Dialect in options.h), from the launchers of each spelling.
// `spellings` holds, per spelling, the launchers that have it besides launch itself.
Dialect dialect_of(const std::vector<std::set<Dialect>>& spellings) {
  // Newer Paddle launchers accept the older ones' spellings; torchrun accepts none of them.
  constexpr Dialect kPrecedence[] = {Dialect::kPaddle2, Dialect::kFleetrun, Dialect::kPaddle18,
                                     Dialect::kTorchrun};
  std::set<Dialect> exclusive;
  std::optional<std::set<Dialect>> common;
  for (const std::set<Dialect>& origins : spellings) {
    if (origins.empty()) continue;
    if (origins.size() == 1) exclusive.insert(*origins.begin());
    if (!common) {
      common = origins;
    } else {
      std::set<Dialect> both;
      for (Dialect o : origins) {
        if (common->count(o)) both.insert(o);
      }
      common = both;
    }
  }
  for (Dialect o : kPrecedence) {
    if (exclusive.count(o)) return o;
  }
  if (common && common->size() == 1) return *common->begin();
  return Dialect::kOurs;
}

// The command line's spellings decide; when they do not, the variables that stood for flags.
Dialect decide_dialect(const CommandLine& command_line) {
  std::vector<std::set<Dialect>> typed;
  for (const TypedSpelling& t : command_line.typed) {
    if (!t.spec->marks_dialect) continue;
    std::set<Dialect> origins;
    for (Dialect o : spelling_origins(*t.spec, t.name)) {
      if (o != Dialect::kOurs) origins.insert(o);
    }
    typed.push_back(origins);
  }
  const Dialect from_flags = dialect_of(typed);
  if (from_flags != Dialect::kOurs) return from_flags;
  // A variable speaks for the launchers of the spelling it stands for: PET_ for torchrun,
  // PADDLE_<FLAG> for Paddle 2.x (launch/context/args_envs.py), PADDLE_DISTRI_BACKEND for the
  // fleet launcher (its --backend's default).
  std::vector<std::set<Dialect>> variables;
  for (const std::string& used : command_line.from_environment) {
    const std::string name = used.substr(0, used.find('='));
    if (name.rfind("PET_", 0) == 0) variables.push_back({Dialect::kTorchrun});
    if (name.rfind("PADDLE_", 0) != 0) continue;
    for (const FlagSpec& f : flag_table()) {
      for (const FlagVariable& v : f.variables) {
        if (v.name != name) continue;
        std::set<Dialect> origins;
        for (Dialect o : spelling_origins(f, v.spelling)) {
          if (o != Dialect::kOurs) origins.insert(o);
        }
        variables.push_back(origins.count(Dialect::kPaddle2) ? std::set{Dialect::kPaddle2}
                                                             : origins);
      }
    }
  }
  return dialect_of(variables);
}

// --selected_gpus (made relative to CUDA_VISIBLE_DEVICES) and --nproc_per_node; returns
// --nproc_per_node's count when given.
std::optional<int> parse_devices(const GivenFlags& r, const env::EnvMap& env,
                                 const MachineCounts& machine, LaunchOptions& o) {
  if (auto g = r.get("selected_gpus")) {
    o.selected_gpus_given = parse_gpus(g->spelling, g->value);
    o.selected_gpus = o.selected_gpus_given;
    // As Paddle: with CUDA_VISIBLE_DEVICES set, the ids are the machine's and each worker gets
    // the id's position in that list (CUDA_VISIBLE_DEVICES=4,5 --selected_gpus=5 gives 1).
    const auto visible = env::lookup(env, "CUDA_VISIBLE_DEVICES");
    if (visible && !visible->empty()) {
      const std::vector<std::string> list = split_commas(*visible);
      for (int& id : o.selected_gpus) {
        const auto at = std::find(list.begin(), list.end(), std::to_string(id));
        if (at == list.end()) {
          bad_value(g->spelling, g->value,
                    "GPU " + std::to_string(id) + " is not in CUDA_VISIBLE_DEVICES='" + *visible +
                        "' (the ids are the machine's; each worker gets the id's position in "
                        "that list)");
        }
        id = static_cast<int>(at - list.begin());
      }
    }
  }
  std::optional<int> nproc;
  if (r.has("nproc_per_node")) {
    // torchrun's words: gpu = one per visible GPU, cpu = one per core, auto = gpu when there are
    // GPUs, else cpu. With GPUs each worker gets one, as with --selected_gpus=0,1,...
    const std::string v = r.value("nproc_per_node");
    const bool use_gpus = v == "gpu" || (v == "auto" && machine.gpus > 0);
    if (v == "gpu" && machine.gpus < 1) {
      bad_value("nproc_per_node", v, "no GPU is visible here (use cpu, auto or a number)");
    }
    if (use_gpus && o.selected_gpus.empty()) {
      for (int id = 0; id < machine.gpus; ++id) o.selected_gpus.push_back(id);
    }
    nproc = use_gpus                      ? machine.gpus
            : (v == "cpu" || v == "auto") ? std::max(1, machine.cores)
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
  return nproc;
}

// The parameter-server flags as given; resolved against the node flags by resolve_ps_job().
struct PsFlags {
  std::optional<int> server_num;
  std::optional<int> worker_num;
  bool ps_job = false;
  bool explicit_endpoints = false;
  // --run_mode=ps|ps-heter (Paddle 2.x, fleet): Paddle 2.x's ps controller's counts, 1 server
  // and 1 trainer unless given, whatever --nproc_per_node and --devices say.
  bool paddle2_counts = false;
  bool heter_mode = false;  // --run_mode=ps-heter
};

// The first port of the fleet launcher's default endpoints (--workers given as hosts alone).
constexpr int kFleetStartPort = 6170;

// --workers as the fleet launcher reads it: when an entry has no port, every entry is its host
// with the ports 6170+S, 6170+S+1, ... (S servers), as Paddle numbers them.
std::vector<env::Endpoint> parse_workers(const std::string& value, int servers) {
  const std::vector<std::string> entries = env::split(value, ',');
  const bool hosts_only = std::any_of(entries.begin(), entries.end(), [](const std::string& e) {
    return !e.empty() && e.find(':') == std::string::npos;
  });
  if (!hosts_only) return parse_ps_endpoints("workers", value);
  std::string with_ports;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string host = entries[i].substr(0, entries[i].find(':'));
    with_ports += (i ? "," : "") + host + ":" +
                  std::to_string(kFleetStartPort + servers + static_cast<int>(i));
  }
  return parse_ps_endpoints("workers", with_ports);
}

// --run_mode: collective, ps or ps-heter; unset when not given.
std::optional<std::string> parse_run_mode(const GivenFlags& r) {
  if (!r.has("run_mode")) return std::nullopt;
  const std::string v = r.value("run_mode");
  if (v != "collective" && v != "ps" && v != "ps-heter") {
    bad_value("run_mode", v, "expected collective, ps or ps-heter (rpc is not supported)");
  }
  return v;
}

PsFlags parse_ps_flags(const GivenFlags& r, LaunchOptions& o) {
  PsFlags ps;
  ps.server_num = r.integer("server_num");
  ps.worker_num = r.integer("worker_num");
  const std::optional<std::string> mode = parse_run_mode(r);
  ps.paddle2_counts = mode && *mode != "collective";
  ps.heter_mode = mode == std::optional<std::string>("ps-heter");
  if (r.has("servers")) o.servers = parse_ps_endpoints("servers", r.value("servers"));
  if (ps.paddle2_counts && !ps.server_num && o.servers.empty()) ps.server_num = 1;
  if (r.has("workers")) {
    const int servers =
        o.servers.empty() ? ps.server_num.value_or(0) : static_cast<int>(o.servers.size());
    o.workers = parse_workers(r.value("workers"), servers);
  }
  ps.ps_job = ps.server_num || !o.servers.empty();
  ps.explicit_endpoints = !o.servers.empty() || !o.workers.empty();
  if (!ps.ps_job) {
    for (const char* flag : {"worker_num", "workers", "server_grace", "heter_worker_num",
                             "heter_workers", "heter_devices"}) {
      if (r.has(flag)) {
        bad_value(flag, r.value(flag), "a parameter-server job needs --server_num or --servers");
      }
    }
  }
  return ps;
}

// --cluster_node_ips, --node_ip and torchrun's --local_addr; returns whether a node list was
// given.
bool parse_node_addresses(const GivenFlags& r, LaunchOptions& o) {
  const std::optional<GivenFlag> ips = r.get("cluster_node_ips");
  if (ips) o.cluster_node_ips = parse_ips(ips->spelling, ips->value);
  if (r.has("node_ip")) {
    const std::string ip = r.value("node_ip");
    o.node_ip = check_ip("node_ip", ip, ip);
    o.node_ip_given = true;
  }
  if (r.has("local_addr")) {
    const std::string ip = r.value("local_addr");
    if (o.node_ip_given && ip != o.node_ip) {
      bad_value("local_addr", ip, "--node_ip='" + o.node_ip + "' names this node already");
    }
    o.node_ip = check_ip("local_addr", ip, ip);
    o.node_ip_given = true;
    // torchrun's flag names this node only; a single-node job is then that one address.
    if (!ips) o.cluster_node_ips = {ip};
  }
  return ips.has_value();
}

// --rdzv_conf=KEY=VALUE,...: last_call_timeout=S, and for etcd TLS and authentication in
// torchrun's spellings (its etcd backend's protocol/cacert/cert/key, its etcd-v2 backend's
// ca_cert/ssl_cert/ssl_cert_key) and python-etcd's username/password.
void parse_rdzv_conf(const std::string& v, LaunchOptions& o) {
  const char* expected =
      "KEY=VALUE,... with KEY last_call_timeout, protocol, cacert (ca_cert), cert (ssl_cert), "
      "key (ssl_cert_key), username (user) or password";
  std::optional<std::string> protocol;
  EtcdSecurity& sec = o.etcd_security;
  auto file = [&](const std::string& key, const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      bad_value("rdzv_conf", key + "=" + path, "a readable regular file (PEM)");
    }
    return path;
  };
  std::size_t start = 0;
  while (start <= v.size()) {
    const std::size_t comma = v.find(',', start);
    const std::string item = v.substr(start, comma == std::string::npos ? comma : comma - start);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) bad_value("rdzv_conf", v, expected);
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "last_call_timeout") {
      o.last_call_timeout = parse_seconds("rdzv_conf", value, true);
      o.last_call_timeout_given = true;
    } else if (key == "protocol") {
      if (value != "http" && value != "https") bad_value("rdzv_conf", item, "protocol=http|https");
      protocol = value;
    } else if (key == "cacert" || key == "ca_cert") {
      sec.ca_file = file(key, value);
    } else if (key == "cert" || key == "ssl_cert") {
      sec.cert_file = file(key, value);
    } else if (key == "key" || key == "ssl_cert_key") {
      sec.key_file = file(key, value);
    } else if (key == "username" || key == "user") {
      sec.user = value;
    } else if (key == "password") {
      sec.password = value;
    } else {
      bad_value("rdzv_conf", v, expected);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const bool files = !sec.ca_file.empty() || !sec.cert_file.empty() || !sec.key_file.empty();
  if (protocol == "http" && files) {
    bad_value("rdzv_conf", v, "certificates with protocol=https (or no protocol), not http");
  }
  if (sec.cert_file.empty() != sec.key_file.empty()) {
    bad_value("rdzv_conf", v, "a client certificate and its key together (cert= and key=)");
  }
  if (sec.user.empty() != sec.password.empty()) {
    bad_value("rdzv_conf", v, "username= and password= together");
  }
  sec.tls = protocol == "https" || files;
}

// --nnodes=N|MIN:MAX and --rdzv_conf.
void parse_node_count(const GivenFlags& r, LaunchOptions& o) {
  if (r.has("nnodes")) {
    const std::string v = r.value("nnodes");
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
  if (r.has("rdzv_conf")) parse_rdzv_conf(r.value("rdzv_conf"), o);
}

// Node 0 in each launcher's spelling: --master_addr/--master_port, --master, --rdzv_endpoint
// (with --rdzv_backend); or, instead of node 0, an etcd cluster (--rdzv_backend=etcd|etcd-v2 with
// --rdzv_endpoint, or --master=etcd://), which it returns; and the node rank.
std::optional<nodes::Etcd> parse_node_zero(const GivenFlags& r, LaunchOptions& o) {
  std::optional<nodes::Etcd> etcd;
  o.node_rank = r.integer("node_rank");
  if (r.has("master_addr")) {
    const std::string v = r.value("master_addr");
    o.master_addr = check_ip("master_addr", v, v);
  }
  o.master_port = r.integer("master_port");
  const std::optional<std::string> backend = r.choice("rdzv_backend");
  const bool c10d = backend == std::optional<std::string>("c10d");
  const bool etcd_backend = backend == std::optional<std::string>("etcd") ||
                            backend == std::optional<std::string>("etcd-v2");
  const auto no_master_flags = [&](const std::string& flag, const std::string& v) {
    if (o.master_addr || o.master_port) {
      bad_value(flag, v,
                "the etcd cluster hands out the node ranks; --master_addr/--master_port name "
                "no node here, drop them");
    }
  };
  if (r.has("master")) {
    const std::string v = r.value("master");
    if (v.rfind("etcd://", 0) == 0) {
      if (backend) {
        bad_value("master", v,
                  "an etcd:// master is Paddle's spelling; drop --rdzv_backend=" + *backend +
                      " (or give --rdzv_backend=etcd --rdzv_endpoint=HOST:PORT,... instead)");
      }
      if (r.has("rdzv_endpoint")) {
        bad_value("master", v,
                  "give the etcd endpoints once: --master=etcd://... or --rdzv_endpoint, not both");
      }
      no_master_flags("master", v);
      const std::string list = v.substr(7);
      if (list.find("etcd://") != std::string::npos) {
        bad_value("master", v, "write etcd:// once, before the list: etcd://HOST:PORT,HOST:PORT");
      }
      etcd = nodes::Etcd{parse_etcd_endpoints("master", v, list), "--master=etcd://"};
    } else {
      if (o.master_addr || o.master_port) {
        bad_value("master", v, "give either --master or --master_addr/--master_port, not both");
      }
      const std::string hostport = v.rfind("http://", 0) == 0 ? v.substr(7) : v;
      const auto colon = hostport.rfind(':');
      if (colon == std::string::npos) bad_value("master", v, "expected HOST:PORT of node 0");
      o.master_addr = check_ip("master", v, hostport.substr(0, colon));
      o.master_port = parse_int_flag("master", hostport.substr(colon + 1), 1, 65535);
    }
  }
  if (etcd_backend) {
    const std::string spelling = "--rdzv_backend=" + *backend;
    if (!r.has("rdzv_endpoint")) {
      bad_value("rdzv_backend", *backend,
                "needs --rdzv_endpoint=HOST[:PORT][,HOST[:PORT]...], the etcd cluster's client "
                "endpoints (port default 2379)");
    }
    const std::string v = r.value("rdzv_endpoint");
    if (r.has("master")) {
      bad_value("rdzv_endpoint", v,
                "give either --rdzv_endpoint (with " + spelling + ") or --master, not both");
    }
    no_master_flags("rdzv_endpoint", v);
    etcd = nodes::Etcd{parse_etcd_endpoints("rdzv_endpoint", v, v), spelling};
  } else if (r.has("rdzv_endpoint")) {
    const std::string v = r.value("rdzv_endpoint");
    if (o.master_addr || o.master_port) {
      bad_value(
          "rdzv_endpoint", v,
          "give either --rdzv_endpoint or --master_addr/--master_port (or --master), not both");
    }
    const auto colon = v.rfind(':');
    const std::string host = colon == std::string::npos ? v : v.substr(0, colon);
    o.master_addr = check_ip("rdzv_endpoint", v, host);
    o.master_port = colon == std::string::npos
                        ? kDefaultRendezvousPort
                        : parse_int_flag("rdzv_endpoint", v.substr(colon + 1), 1, 65535);
  }
  if (!etcd && (o.nnodes || o.node_rank || o.master_addr)) {
    o.nodes = nodes::ControlStore{r.has("master_addr") && !c10d, r.has("master") || c10d};
  }
  return etcd;
}

// --rank_mapping_file with --enable_auto_mapping: the file names the nodes and each node's ranks
// (the fleet launcher's lazy launch). As in Paddle, --cluster_node_ips and --nproc_per_node give
// way to it; --selected_gpus, when given, must cover this node's ranks (the first ones are used);
// the other ways of naming the nodes are refused.
void parse_rank_mapping_flags(const GivenFlags& r, const PsFlags& ps, const MachineCounts& machine,
                              LaunchOptions& o) {
  if (r.has("rank_mapping_file")) o.rank_mapping_file = r.value("rank_mapping_file");
  o.enable_auto_mapping = r.boolean("enable_auto_mapping");
  if (!o.enable_auto_mapping) return;
  if (!o.rank_mapping_file) {
    throw OptionsError(
        "--enable_auto_mapping needs --rank_mapping_file (the JSON file naming "
        "each node's ranks)");
  }
  const std::string& file = *o.rank_mapping_file;
  if (ps.ps_job) {
    throw OptionsError(
        "--rank_mapping_file places the ranks of a collective job; it cannot be "
        "combined with --server_num/--servers");
  }
  if (counted(o.nodes)) {
    throw OptionsError(
        "--rank_mapping_file names the nodes already; drop "
        "--nnodes/--node_rank/--master_addr/--master/--rdzv_endpoint");
  }
  o.rank_mapping = read_rank_mapping(file, "--" + r.get("rank_mapping_file")->spelling);
  const RankMapping& m = *o.rank_mapping;
  // A one-node mapping is this node, as in Paddle; with several, --node_ip says which one.
  if (m.nodes.size() == 1 && !o.node_ip_given) o.node_ip = m.nodes.front().host;
  const int node = m.node_index(o.node_ip);
  if (node == static_cast<int>(m.nodes.size())) {
    std::string hosts;
    for (const auto& h : m.hosts()) hosts += (hosts.empty() ? "" : ",") + h;
    throw OptionsError("--node_ip='" + o.node_ip + "' is not one of the nodes of " + file + " (" +
                       hosts + "); give --node_ip as the file names this node");
  }
  o.cluster_node_ips = m.hosts();
  o.nodes = nodes::RankMapped{};
  const int ranks = static_cast<int>(m.nodes[node].ranks.size());
  if (machine.gpus > 0 && ranks > machine.gpus) {
    throw OptionsError(file + " maps " + std::to_string(ranks) + " ranks to " + o.node_ip +
                       " but only " + std::to_string(machine.gpus) +
                       " GPU(s) are visible here (one rank per GPU)");
  }
  if (!o.selected_gpus.empty() && static_cast<int>(o.selected_gpus.size()) < ranks) {
    const auto g = r.get("selected_gpus");
    bad_value(g->spelling, g->value,
              file + " maps " + std::to_string(ranks) + " ranks to " + o.node_ip +
                  ": list at least that many GPUs (the i-th rank of the node takes the i-th)");
  }
  o.selected_gpus.resize(std::min(o.selected_gpus.size(), static_cast<std::size_t>(ranks)));
  o.nproc_per_node = ranks;
}

// This node's place among the nodes, once they are decided (decide_nodes).
void resolve_nodes(const PsFlags& ps, bool list_given, LaunchOptions& o) {
  if (counted(o.nodes)) {
    if (list_given && o.etcd()) {
      throw OptionsError(o.etcd()->spelling +
                         " makes etcd hand out the node ranks; --cluster_node_ips (a fixed node "
                         "list) cannot be combined with it: give --nnodes instead");
    }
    if (list_given) {
      throw OptionsError(
          "--cluster_node_ips and --nnodes/--node_rank/--master_addr describe the nodes twice; "
          "use one spelling");
    }
    const int nnodes = o.nnodes.value_or(1);
    if (o.node_rank.value_or(0) >= nnodes) {
      throw OptionsError("--node_rank=" + std::to_string(*o.node_rank) +
                         " is not below --nnodes=" + std::to_string(nnodes));
    }
    if (nnodes > 1 && !o.master_addr && !o.etcd()) {
      throw OptionsError("--nnodes=" + std::to_string(nnodes) +
                         " needs --master_addr (node 0's address, where the control store runs)");
    }
    // --node_ip is this node's own address here, not a member of a list. A single node given
    // --master_addr is that address (MASTER_ADDR as given, as torchrun's workers see it).
    if (!o.node_ip_given)
      o.node_ip = nnodes == 1 && o.master_addr ? *o.master_addr : kDefaultNodeIp;
    o.cluster_node_ips = {o.node_ip};
  } else if (ps.explicit_endpoints) {
    // --servers/--workers name every process's host: this node is --node_ip, whatever it is.
  } else if (std::find(o.cluster_node_ips.begin(), o.cluster_node_ips.end(), o.node_ip) ==
             o.cluster_node_ips.end()) {
    std::string list;
    for (const auto& ip : o.cluster_node_ips) list += (list.empty() ? "" : ",") + ip;
    throw OptionsError("--node_ip='" + o.node_ip + "' is not in --cluster_node_ips='" + list + "'");
  }
}

// How the command line describes the nodes (nodes.h), decided once: an etcd cluster; node 0's
// control store (torchrun's --nnodes/--node_rank/--master_addr, c10d's --rdzv_endpoint, Paddle
// 2.x's --master); a rank mapping; Paddle's node list (--cluster_node_ips, or --node_ip alone);
// else one node. Spellings of two of them together are refused.
void decide_nodes(const GivenFlags& r, const env::EnvMap& env, const PsFlags& ps,
                  const MachineCounts& machine, LaunchOptions& o) {
  const bool list_given = parse_node_addresses(r, o);
  if (list_given || o.node_ip_given) o.nodes = nodes::NodeList{list_given};
  parse_node_count(r, o);
  if (std::optional<nodes::Etcd> etcd = parse_node_zero(r, o)) o.nodes = std::move(*etcd);
  if (std::optional<nodes::Etcd> fleet = parse_fleet_elastic(r, env, list_given, o)) {
    if (ps.ps_job) {
      throw OptionsError(fleet->spelling +
                         ": Paddle's elastic mode runs collective jobs; a parameter-server job "
                         "(--server_num/--servers) cannot be elastic");
    }
    o.nodes = std::move(*fleet);
    resolve_nodes(ps, false, o);  // --ips placed this node; etcd gathers the nodes
    return;
  }
  parse_rank_mapping_flags(r, ps, machine, o);
  resolve_nodes(ps, list_given, o);
}

// --servers/--workers: the lists against the counts and the other node flags.
void resolve_explicit_endpoints(const GivenFlags& r, const PsFlags& ps, LaunchOptions& o) {
  if (counted(o.nodes) || r.has("cluster_node_ips")) {
    throw OptionsError(
        "--servers/--workers name every process's host; they cannot be combined with "
        "--cluster_node_ips or --nnodes/--node_rank/--master_addr (give --node_ip only)");
  }
  const auto list = [&](const char* flag) { return r.value(flag); };
  if (o.workers.empty()) bad_value("servers", list("servers"), "needs --workers as well");
  if (o.servers.empty()) bad_value("workers", list("workers"), "needs --servers as well");
  const int s_count = static_cast<int>(o.servers.size());
  const int w_count = static_cast<int>(o.workers.size());
  if (ps.server_num && *ps.server_num != s_count) {
    throw OptionsError("--server_num=" + std::to_string(*ps.server_num) + " does not match the " +
                       std::to_string(s_count) + " endpoint(s) of --servers='" + list("servers") +
                       "'");
  }
  if (ps.worker_num && *ps.worker_num != w_count) {
    throw OptionsError("--worker_num=" + std::to_string(*ps.worker_num) + " does not match the " +
                       std::to_string(w_count) + " endpoint(s) of --workers='" + list("workers") +
                       "'");
  }
  for (const env::Endpoint& e : o.workers) {
    if (std::find(o.servers.begin(), o.servers.end(), e) != o.servers.end()) {
      bad_value("workers", list("workers"), "endpoint '" + e.str() + "' is also in --servers");
    }
  }
  if (r.has("started_port")) {
    bad_value("started_port", r.value("started_port"),
              "--servers/--workers give every port already");
  }
  o.server_num = s_count;
  o.worker_num = w_count;
  o.cluster_node_ips = {o.node_ip};
}

// A parameter-server job's server and trainer counts, and this node's trainers.
void resolve_ps_job(const GivenFlags& r, const PsFlags& ps, std::optional<int> nproc,
                    LaunchOptions& o) {
  if (ps.explicit_endpoints) {
    resolve_explicit_endpoints(r, ps, o);
  } else {
    o.server_num = *ps.server_num;
    o.worker_num = ps.worker_num.value_or(ps.paddle2_counts ? 1 : o.nproc_per_node);
  }
  if (ps.paddle2_counts) {
    // Paddle 2.x's ps controller counts trainers with --trainer_num alone and gives them no
    // devices: the device flags are not used (and said so once).
    if (nproc) o.unused_flags.push_back("--nproc_per_node=" + r.value("nproc_per_node"));
    if (const auto g = r.get("selected_gpus")) {
      o.unused_flags.push_back("--" + g->spelling + "=" + g->value);
    }
    o.selected_gpus.clear();
    o.selected_gpus_given.clear();
  }
  const std::string w_source =
      ps.explicit_endpoints ? " (the entries of --workers)" : " trainers per node";
  const int nproc_given = nproc.value_or(0);
  if (nproc && !ps.paddle2_counts && nproc_given != o.worker_num) {
    throw OptionsError("--nproc_per_node=" + std::to_string(nproc_given) +
                       " does not match --worker_num=" + std::to_string(o.worker_num) + w_source +
                       ": a parameter-server job starts --worker_num trainers, --nproc_per_node "
                       "is not used");
  }
  if (!o.selected_gpus.empty() && !ps.explicit_endpoints &&
      static_cast<int>(o.selected_gpus.size()) != o.worker_num) {
    const auto g = r.get("selected_gpus");
    throw OptionsError("--" + g->spelling + "='" + g->value + "' gives " +
                       std::to_string(o.selected_gpus.size()) + " GPU(s) for --worker_num=" +
                       std::to_string(o.worker_num) + " trainers per node (one GPU per trainer)");
  }
  if (ps.explicit_endpoints) {
    o.nproc_per_node = static_cast<int>(
        std::count_if(o.workers.begin(), o.workers.end(),
                      [&](const env::Endpoint& e) { return e.host == o.node_ip; }));
  } else {
    o.nproc_per_node = o.worker_num;
  }
}

// The heter flags against each other and the job (see LaunchOptions::heter).
void parse_heter(const GivenFlags& r, const PsFlags& ps, LaunchOptions& o) {
  const bool counts = r.has("heter_worker_num");
  const bool lists = r.has("heter_workers");
  if (!counts && !lists) {
    if (r.has("heter_devices")) {
      bad_value("heter_devices", r.value("heter_devices"),
                "needs heter workers (--heter_worker_num or --heter_workers)");
    }
    if (ps.heter_mode) {
      bad_value("run_mode", "ps-heter", "needs --heter_worker_num or --heter_workers");
    }
    return;
  }
  if (lists && !ps.explicit_endpoints) {
    bad_value("heter_workers", r.value("heter_workers"),
              "lists endpoints: give every server's and trainer's too (--servers, --workers), "
              "or count the heter workers with --heter_worker_num");
  }
  if (!lists && ps.explicit_endpoints) {
    bad_value("heter_worker_num", r.value("heter_worker_num"),
              "--servers/--workers list every endpoint: list the heter workers' with "
              "--heter_workers");
  }
  if (lists) {
    const std::string v = r.value("heter_workers");
    for (const std::string& part : env::split(v, ';')) {
      LaunchOptions::HeterStage stage;
      stage.endpoints = parse_ps_endpoints("heter_workers", part);
      stage.count = static_cast<int>(stage.endpoints.size());
      o.heter.push_back(std::move(stage));
    }
  }
  if (counts) {
    const std::string v = r.value("heter_worker_num");
    const std::vector<std::string> parts = env::split(v, ';');
    if (lists && parts.size() != o.heter.size()) {
      bad_value("heter_worker_num", v,
                std::to_string(parts.size()) + " stage(s), but --heter_workers lists " +
                    std::to_string(o.heter.size()));
    }
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const int n = parse_int_flag("heter_worker_num", parts[k], 1, kMaxProcessesPerRole);
      if (!lists) o.heter.push_back(LaunchOptions::HeterStage{"gpu", n, {}});
      if (lists && o.heter[k].count != n) {
        bad_value("heter_worker_num", v,
                  "stage " + std::to_string(k + 2) + " has " + std::to_string(n) +
                      " but --heter_workers lists " + std::to_string(o.heter[k].count));
      }
    }
  }
  if (r.has("heter_devices")) {
    const std::string v = r.value("heter_devices");
    const std::vector<std::string> devices = env::split(v, ';');
    if (devices.size() != o.heter.size()) {
      bad_value("heter_devices", v,
                "one device per heter stage: " + std::to_string(o.heter.size()) + " stage(s)");
    }
    for (std::size_t k = 0; k < devices.size(); ++k) {
      o.heter[k].device = parse_name("heter_devices", devices[k]);
    }
  }
  std::vector<env::Endpoint> seen = o.servers;
  seen.insert(seen.end(), o.workers.begin(), o.workers.end());
  for (const LaunchOptions::HeterStage& stage : o.heter) {
    for (const env::Endpoint& e : stage.endpoints) {
      if (std::find(seen.begin(), seen.end(), e) != seen.end()) {
        bad_value("heter_workers", r.value("heter_workers"),
                  "endpoint '" + e.str() + "' is listed twice (or also in --servers/--workers)");
      }
      seen.push_back(e);
    }
  }
}

// --started_port: every port this node's processes need must exist.
void parse_started_port(const GivenFlags& r, bool ps_job, LaunchOptions& o) {
  o.started_port = r.integer("started_port");
  if (!o.started_port) return;
  const std::string v = r.value("started_port");
  // Per node: the workers of a collective job; a parameter-server job's servers, trainers, then
  // heter workers.
  const int per_node = ps_job           ? o.server_num + o.worker_num + o.heter_per_node()
                       : o.rank_mapping ? o.rank_mapping->max_ranks_per_node()
                                        : o.nproc_per_node;
  const std::string heter =
      o.heter.empty() ? "" : " and " + std::to_string(o.heter_per_node()) + " heter workers";
  const std::string what = ps_job ? std::to_string(o.server_num) + " servers" +
                                        (heter.empty() ? " and " : ", ") +
                                        std::to_string(o.worker_num) + " trainers" + heter
                                  : std::to_string(per_node) + " workers";
  if (*o.started_port + per_node - 1 > 65535) {
    bad_value(
        "started_port", v,
        what + " need ports up to " + std::to_string(*o.started_port + per_node - 1) + " > 65535");
  }
}

// How WORKER is run: -m, --run_path, --no_python, --python.
void parse_worker_run(const GivenFlags& r, LaunchOptions& o) {
  o.module = r.has("module");
  o.run_path = r.has("run_path");
  // torchrun: --run_path takes precedence over --no_python.
  o.no_python = r.has("no_python") && !o.run_path;
  if (o.module && o.run_path) {
    throw OptionsError("--module and --run_path were both given: WORKER is a module or a script");
  }
  if (r.has("signals_to_handle")) {
    const std::string v = r.value("signals_to_handle");
    const std::set<std::string> forwarded = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"};
    const auto parts = split_commas(v);
    if (std::set<std::string>(parts.begin(), parts.end()) != forwarded) {
      bad_value("signals_to_handle", v,
                "launch always forwards SIGTERM,SIGINT,SIGHUP,SIGQUIT (torchrun's default) and "
                "dumps stacks on SIGUSR1; other sets are not supported");
    }
  }
  if (r.has("event_log_handler") && r.value("event_log_handler") != "null") {
    bad_value("event_log_handler", r.value("event_log_handler"),
              "only 'null': launch has no event log handlers (its run report is --report)");
  }
  if (o.module && o.no_python) {
    throw OptionsError("--module and --no_python were both given: a module needs the interpreter");
  }
  if (r.has("python")) {
    const std::string v = r.value("python");
    if (v.empty()) bad_value("python", v, "expected an interpreter (a path or a name on PATH)");
    if (o.no_python) bad_value("python", v, "--no_python runs WORKER without an interpreter");
    o.python = v;
  }
}

// The console (--local_ranks_filter, --tee, --redirects) and torchrun's accepted-only flags.
void parse_console(const GivenFlags& r, LaunchOptions& o) {
  if (r.has("local_ranks_filter")) {
    o.local_ranks_filter = parse_rank_list("local_ranks_filter", r.value("local_ranks_filter"));
  }
  if (r.has("tee")) o.tee = parse_streams("tee", r.value("tee"));
  if (r.has("redirects")) o.redirects = parse_streams("redirects", r.value("redirects"));
  if (r.has("log_line_prefix_template") && !r.value("log_line_prefix_template").empty()) {
    o.log_line_prefix_template = r.value("log_line_prefix_template");
  }
  o.virtual_local_rank = r.has("virtual_local_rank");
  const std::pair<const char*, std::vector<std::string>*> filter_flags[] = {
      {"stdout", &o.duplicate_stdout_filters}, {"stderr", &o.duplicate_stderr_filters}};
  for (const auto& [stream, filters] : filter_flags) {
    const std::string flag = std::string("duplicate_") + stream + "_filters";
    if (!r.has(flag)) continue;
    *filters = parse_filter_list(r.value(flag));
    if (!filters->empty() && !o.log_dir) {
      o.warnings.push_back("--" + flag + " copies console lines to LOG_DIR/filtered_" + stream +
                           ".log: without --log_dir nothing is copied");
    }
  }
  if (const auto interval = r.seconds("monitor_interval")) {
    o.monitor_interval = static_cast<double>(interval->count()) / 1000.0;
  }
  if (const auto method = r.choice("start_method")) o.start_method = *method;
}

// --hostfile/--hosts and their narrowing flags; the nodes' own flags come from the host list.
void parse_fanout(const GivenFlags& r, LaunchOptions& o) {
  o.exit_with_stdin = r.has("exit_with_stdin");
  if (r.has("hostfile")) o.hostfile = r.value("hostfile");
  if (r.has("hosts")) o.hosts = r.value("hosts");
  if (r.has("include")) o.include_hosts = r.value("include");
  if (r.has("exclude")) o.exclude_hosts = r.value("exclude");
  o.num_nodes = r.integer("num_nodes");
  o.num_gpus = r.integer("num_gpus");
  o.ssh_port = r.integer("ssh_port");
  if (r.has("forward_env")) o.forward_env = split_commas(r.value("forward_env"));
  if (!o.fanout()) {
    for (const char* f :
         {"include", "exclude", "num_nodes", "num_gpus", "ssh_port", "forward_env"}) {
      if (r.has(f)) throw OptionsError(std::string("--") + f + " needs --hostfile or --hosts");
    }
    return;
  }
  if (o.hostfile && o.hosts) throw OptionsError("--hostfile and --hosts were both given; give one");
  for (const char* f :
       {"nnodes", "node_rank", "master_addr", "rdzv_endpoint", "master", "cluster_node_ips",
        "node_ip", "local_addr", "nproc_per_node", "selected_gpus", "standalone", "use_paddlecloud",
        "rank_mapping_file", "exit_with_stdin"}) {
    if (r.has(f)) {
      throw OptionsError(std::string("--") + f + " cannot be given with " +
                         (o.hostfile ? "--hostfile" : "--hosts") +
                         ": the host list places the nodes and their workers");
    }
  }
}

// --standalone and --run_mode against the rest of the job.
void check_job_kind(const GivenFlags& r, bool ps_job, LaunchOptions& o) {
  if (r.has("standalone") &&
      (o.nnodes.value_or(1) > 1 || o.node_rank.value_or(0) > 0 || r.has("cluster_node_ips") ||
       r.has("master") || r.has("rdzv_endpoint"))) {
    throw OptionsError(
        "--standalone is a single-node job: it cannot be combined with --nnodes above 1, "
        "--node_rank, --master, --rdzv_endpoint or --cluster_node_ips");
  }
  // ps and ps-heter made the job a parameter-server job (parse_ps_flags).
  if (r.has("run_mode") && r.value("run_mode") == "collective" && ps_job) {
    bad_value("run_mode", "collective",
              "--server_num/--servers make this a parameter-server job (ps)");
  }
  if (o.elastic() && ps_job) {
    throw OptionsError("--nnodes=" + std::to_string(*o.min_nnodes) + ":" +
                       std::to_string(*o.nnodes) +
                       ": elastic node counts are for collective jobs; a parameter-server job "
                       "needs a fixed --nnodes");
  }
}

// --backend (the fleet launcher's; its values and errors as Paddle's launch_utils.check_backend
// and launch.py give them): auto keeps launch's choice, gloo makes the workers CPU workers, nccl
// needs GPUs (every visible one when none are selected); the device backends launch cannot drive
// are refused by name. Runs after parse_devices().
void parse_backend(const GivenFlags& r, bool ps_job, const MachineCounts& machine,
                   LaunchOptions& o) {
  if (!r.has("backend")) return;
  const std::string v = r.value("backend");
  static const std::map<std::string, std::string> kForeign = {
      {"bkcl", "Kunlun XPUs (BKCL)"},
      {"hccl", "Ascend NPUs (HCCL)"},
      {"cncl", "Cambricon MLUs (CNCL)"},
      {"xccl", "custom devices (XCCL, PADDLE_XCCL_BACKEND)"},
      {"heter", "heterogeneous GPU/XPU collectives (HeterParallelContext)"}};
  if (const auto it = kForeign.find(v); it != kForeign.end()) {
    bad_value("backend", v,
              "that backend drives " + it->second +
                  ", which launch cannot; launch runs gloo (CPU workers) and nccl (NVIDIA GPUs), "
                  "or auto");
  }
  if (v != "auto" && v != "gloo" && v != "nccl") {
    bad_value("backend", v,
              "ValueError: the backend is one of 'nccl', 'gloo', 'bkcl', 'auto', 'heter', "
              "'xccl', 'hccl', 'cncl' (Paddle's names; launch runs auto, gloo and nccl)");
  }
  if (v != "auto" && ps_job) {
    bad_value("backend", v,
              "AssertionError: with a backend other than 'auto' the run mode must be collective "
              "(--server_num/--servers make this a parameter-server job)");
  }
  if (v == "gloo" && !o.selected_gpus.empty()) {
    bad_value("backend", v,
              "gloo runs CPU workers, but " + std::to_string(o.selected_gpus.size()) +
                  " GPU(s) are selected (drop --gpus/--selected_gpus/--devices or "
                  "--nproc_per_node=gpu|auto, or use --backend=nccl)");
  }
  if (v == "nccl" && o.selected_gpus.empty()) {
    if (machine.gpus < 1) {
      bad_value("backend", v, "nccl needs GPUs: none is selected and none is visible here");
    }
    if (r.has("nproc_per_node") && o.nproc_per_node != machine.gpus) {
      bad_value("backend", v,
                "nccl runs one worker per GPU: --nproc_per_node=" +
                    std::to_string(o.nproc_per_node) + " but " + std::to_string(machine.gpus) +
                    " GPU(s) are visible (select them with --gpus)");
    }
    for (int id = 0; id < machine.gpus; ++id) o.selected_gpus.push_back(id);
    o.nproc_per_node = machine.gpus;
  }
  o.backend = v;
}

// --log_level and the timeouts.
void parse_levels_and_timeouts(const GivenFlags& r, LaunchOptions& o) {
  if (r.has("log_level")) {
    const std::string v = r.value("log_level");
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
  if (const auto kill = r.seconds("kill_timeout")) o.kill_timeout = *kill;
  o.rendezvous_timeout = r.seconds("rendezvous_timeout");
  o.server_grace = r.seconds("server_grace");
  if (const auto restarts = r.integer("max_restarts")) o.max_restarts = *restarts;
  if (const auto level = r.integer("elastic_level")) {
    // Paddle 2.x's controller stops at a failure unless the level is 1 or more; then it restarts
    // up to --max_restart times (its default 3).
    o.elastic_level = level;
    if (*level <= 0 && o.max_restarts > 0) {
      o.warnings.push_back("--elastic_level=" + std::to_string(*level) + ": a failure ends the " +
                           "job, --max_restart=" + std::to_string(o.max_restarts) +
                           " is not used (--elastic_level=1 restarts)");
      o.max_restarts = 0;
    } else if (*level >= 1 && !r.has("max_restarts")) {
      o.max_restarts = kPaddleDefaultMaxRestart;
    }
  }
  if (const auto wait = r.seconds("elastic_timeout")) {
    if (o.last_call_timeout_given) {
      throw OptionsError(
          "--elastic_timeout and --rdzv_conf last_call_timeout both say how long an elastic "
          "job waits for more nodes; give one");
    }
    o.last_call_timeout = *wait;
  }
  if (const auto hang = r.seconds("hang_timeout")) o.hang_timeout = *hang;
  if (const auto mode = r.choice("straggler")) {
    o.pace.stragglers = *mode != "off";
    o.pace.evict = *mode == "evict";
  }
  if (r.has("straggler_ratio")) {
    o.pace.straggler_ratio =
        parse_number("straggler_ratio", r.value("straggler_ratio"), 1.0, false);
  }
  if (r.has("step_timeout_factor")) {
    o.pace.step_timeout_factor =
        parse_number("step_timeout_factor", r.value("step_timeout_factor"), 0.0, true);
  }
  if (const auto floor = r.seconds("step_timeout_floor")) o.pace.step_timeout_floor = *floor;
  if (const auto n = r.integer("no_progress_restarts")) o.no_progress_restarts = *n;
  if (const auto mode = r.choice("preflight")) {
    // The flag table admits only the three spellings.
    o.preflight.mode = preflight_mode_named(*mode).value_or(PreflightMode::kAuto);
  }
  if (r.has("preflight_ratio")) {
    o.preflight.ratio = parse_number("preflight_ratio", r.value("preflight_ratio"), 1.0, false);
  }
}

}  // namespace

namespace {

LaunchOptions parse_command_line(const CommandLine& command_line, const env::EnvMap& env,
                                 const MachineCounts& machine) {
  const GivenFlags& r = command_line.flags;
  LaunchOptions o;
  o.from_environment = command_line.from_environment;
  o.help = r.has("help");
  o.version = r.has("version");
  if (o.help || o.version) return o;
  o.dialect = decide_dialect(command_line);
  if (r.has("legacy") && r.boolean("legacy")) o.dialect = Dialect::kFleetrun;  // Paddle 2.x's
  parse_fanout(r, o);  // before the nodes: a host list describes them itself

  const std::optional<int> nproc = parse_devices(r, env, machine, o);
  const PsFlags ps = parse_ps_flags(r, o);
  parse_backend(r, ps.ps_job, machine, o);
  if (r.has("log_dir")) {
    const std::string dir = r.value("log_dir");
    if (dir.empty()) bad_value("log_dir", dir, "expected a directory");
    o.log_dir = dir;
  } else if (o.dialect == Dialect::kPaddle2 || o.dialect == Dialect::kFleetrun) {
    o.log_dir = "log";  // Paddle 2.x and the fleet launcher write their logs to ./log by default
  }
  o.quiet = r.has("quiet");
  decide_nodes(r, env, ps, machine, o);
  o.rdzv_id = r.name_value("rdzv_id");
  if (!o.job_id) o.job_id = r.name_value("job_id");  // unless the elastic mode set it
  if (auto role = r.name_value("role")) o.role = *role;
  if (ps.ps_job) resolve_ps_job(r, ps, nproc, o);
  if (ps.ps_job) parse_heter(r, ps, o);
  parse_started_port(r, ps.ps_job, o);
  if (o.etcd_security.any() && !o.etcd()) {
    throw OptionsError(
        "--rdzv_conf's TLS and authentication keys (protocol, cacert, cert, key, username, "
        "password) are for an etcd control plane (--rdzv_backend=etcd|etcd-v2 or "
        "--master=etcd://); this job has none");
  }
  o.use_paddlecloud = r.has("use_paddlecloud");
  if (o.use_paddlecloud && o.etcd()) {
    throw OptionsError(
        "--use_paddlecloud takes the nodes from PaddleCloud's variables; it cannot be combined "
        "with " +
        o.etcd()->spelling + " (etcd hands out the node ranks)");
  }
  o.require_secret = r.has("require_secret");
  o.print_config = r.boolean("print_config");
  o.report = r.boolean("report");
  if (const auto bind = r.choice("bind")) {
    o.bind = *bind == "core" ? CpuBind::kCore : *bind == "numa" ? CpuBind::kNuma : CpuBind::kNone;
  }
  o.numa_binding = r.choice("numa_binding");
  if (o.numa_binding && o.bind != CpuBind::kNone) {
    throw OptionsError("--numa-binding=" + *o.numa_binding + " and --bind=" +
                       cpu_bind_name(o.bind) + " both pin the workers to CPUs; give one");
  }
  // Every Paddle launcher opens its workers' logs for appending.
  const bool paddle = o.dialect == Dialect::kPaddle18 || o.dialect == Dialect::kFleetrun ||
                      o.dialect == Dialect::kPaddle2;
  o.log_overwrite = r.has("log_overwrite") ? r.boolean("log_overwrite") : !paddle;
  o.enable_gpu_log = r.boolean("enable_gpu_log");
  o.sort_ip = r.boolean("sort_ip");
  if (const auto port = r.integer("gloo_port")) o.gloo_port = *port;
  // The fleet launcher gives PADDLE_WITH_GLOO's value (default 0), Paddle 2.x its --with_gloo (1).
  o.with_gloo = r.integer("with_gloo").value_or(o.dialect == Dialect::kFleetrun ? 0 : 1);
  parse_worker_run(r, o);
  parse_console(r, o);
  check_job_kind(r, ps.ps_job, o);
  parse_levels_and_timeouts(r, o);
  apply_fleet_elastic_defaults(r, o);
  // Paddle 1.8 and the fleet launcher give CPU workers an empty FLAGS_selected_gpus (so do
  // launch's own defaults); Paddle 2.x and torchrun set none.
  o.empty_gpus_on_cpu = o.dialect == Dialect::kOurs || o.dialect == Dialect::kPaddle18 ||
                        o.dialect == Dialect::kFleetrun;
  if (o.backend) o.distri_backend = o.resolved_backend();

  if (command_line.worker.empty()) throw OptionsError("missing WORKER program (see launch --help)");
  o.worker = command_line.worker.front();
  if (o.worker.empty()) throw OptionsError("WORKER is an empty string (see launch --help)");
  o.worker_args.assign(command_line.worker.begin() + 1, command_line.worker.end());
  return o;
}

}  // namespace

LaunchOptions parse_options(int argc, const char* const argv[], const env::EnvMap& env,
                            const MachineCounts& machine) {
  const CommandLine command_line = read_command_line(argc, argv, env);
  try {
    return parse_command_line(command_line, env, machine);
  } catch (const BadValueError& e) {
    // A value from PET_NNODES or PADDLE_*: the user set a variable, not the flag, so name it.
    const auto variable = command_line.flags.variable_of(e.flag, e.value);
    if (!variable) throw;
    throw OptionsError(*variable + "='" + e.value + "' (for --" + e.flag + "): " + e.expected);
  }
}

std::string describe_options(const LaunchOptions& o) {
  // Every flag's --print_config line, and the worker's, in alphabetical order.
  std::map<std::string, std::string> fields;
  for (const FlagSpec& f : flag_table()) {
    if (!f.config) continue;
    if (auto value = f.config(o)) fields[f.name] = *value;
  }
  fields["training_script"] = o.worker;
  fields["dialect"] = dialect_name(o.dialect);
  std::string args = "[";
  for (std::size_t i = 0; i < o.worker_args.size(); ++i) {
    args += (i ? ", '" : "'") + o.worker_args[i] + "'";
  }
  fields["training_script_args"] = args + "]";
  std::ostringstream os;
  os << "-----------  Configuration Arguments -----------\n";
  for (const auto& [name, value] : fields) os << name << ": " << value << "\n";
  os << "------------------------------------------------\n";
  return os.str();
}

}  // namespace ddl::launcher
