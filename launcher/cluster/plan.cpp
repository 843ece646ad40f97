#include "launcher/cluster/plan.h"

#include <algorithm>
#include <random>
#include <set>
#include <sstream>

namespace ddl::launcher {
namespace {

// The distinct hosts of `a` then `b`, in order of first appearance.
std::vector<std::string> hosts_in_order(const std::vector<env::Endpoint>& a,
                                        const std::vector<env::Endpoint>& b) {
  std::vector<std::string> hosts;
  for (const auto* list : {&a, &b}) {
    for (const env::Endpoint& e : *list) {
      if (std::find(hosts.begin(), hosts.end(), e.host) == hosts.end()) hosts.push_back(e.host);
    }
  }
  return hosts;
}

std::string join_hosts(const std::vector<env::Endpoint>& a, const std::vector<env::Endpoint>& b) {
  std::string out;
  for (const std::string& h : hosts_in_order(a, b)) out += (out.empty() ? "" : ",") + h;
  return out;
}

// The variables of one planned process: its contract's, then the plan's additions.
// This node's `count` ports, for the `what` it starts ("workers", "servers and trainers"):
// --started_port .. --started_port+count-1, or, on a single node without it, free ones from the
// port picker (distinct and non-zero).
std::vector<std::uint16_t> pick_local_ports(const LaunchOptions& options,
                                            const PlanInputs& inputs, int nodes, int count,
                                            const std::string& what) {
  std::vector<std::uint16_t> ports;
  if (options.started_port) {
    if (*options.started_port < 1 || *options.started_port + count - 1 > 65535) {
      throw PlanError("--started_port=" + std::to_string(*options.started_port) + " with " +
                      std::to_string(count) + " " + what +
                      " per node leaves the port range 1..65535");
    }
    for (int i = 0; i < count; ++i) {
      ports.push_back(static_cast<std::uint16_t>(*options.started_port + i));
    }
    return ports;
  }
  if (nodes > 1) {
    throw PlanError("--cluster_node_ips lists " + std::to_string(nodes) +
                    " nodes but --started_port is not set: nodes cannot learn each other's "
                    "free ports, so give every node the same --started_port");
  }
  if (!inputs.pick_ports) throw PlanError("no --started_port and no way to pick free ports");
  ports = inputs.pick_ports(options.node_ip, count);
  std::set<std::uint16_t> unique(ports.begin(), ports.end());
  if (static_cast<int>(ports.size()) != count || static_cast<int>(unique.size()) != count ||
      unique.count(0) > 0) {
    throw PlanError("the port picker returned " + std::to_string(ports.size()) + " ports (" +
                    std::to_string(unique.size()) + " distinct, non-zero) for " +
                    std::to_string(count) + " " + what + " on " + options.node_ip);
  }
  return ports;
}

// Every trainer's device in rank order (env::WorkerContract::world_device_ids): the GPU its
// local index takes from --selected_gpus (the same list on every node), else that index. The
// local index is rank % per_node for node-major blocks of per_node trainers; with per_node 0
// (explicit --workers lists) it counts the earlier trainers on the same host.
std::vector<int> world_device_ids(const LaunchOptions& options,
                                  const std::vector<env::Endpoint>& trainers, int per_node) {
  std::vector<int> ids;
  for (std::size_t r = 0; r < trainers.size(); ++r) {
    int local = 0;
    if (per_node > 0) {
      local = static_cast<int>(r) % per_node;
    } else {
      for (std::size_t q = 0; q < r; ++q) local += trainers[q].host == trainers[r].host;
    }
    const bool has_gpu = static_cast<std::size_t>(local) < options.selected_gpus.size();
    ids.push_back(has_gpu ? options.selected_gpus[local] : local);
  }
  return ids;
}

// Where the job stands, for one process: `node` of `nodes`.
struct NodePlace {
  int node = 0;
  int nodes = 1;
};

// A planned process's variables: its contract (completed with what every process of the job
// shares) written out, then the plan's additions.
PlannedWorker make_spec(env::WorkerContract c, const LaunchOptions& options,
                        const PlanInputs& inputs, const ClusterPlan& plan, NodePlace place) {
  c.job_id = inputs.generation.job_id(inputs.job_id);
  c.secret = inputs.job_secret;
  c.restart_count = inputs.generation.index();
  if (options.rendezvous_timeout) c.rendezvous_timeout = *options.rendezvous_timeout;
  c.node_rank = place.node;
  c.nnodes = place.nodes;
  c.role_name = options.role;
  c.run_id = options.rdzv_id.value_or(inputs.job_id.empty() ? std::string("none") : inputs.job_id);
  c.max_restarts = options.max_restarts;
  c.paddle_job_id = options.job_id.value_or("default");
  c.world_device_ids = plan.world_device_ids;
  if (!inputs.error_file_dir.empty() && c.role == env::Role::kTrainer) {
    c.error_file = inputs.error_file_dir + "/error." + std::to_string(c.rank) + ".json";
  }
  PlannedWorker w;
  w.env = env::to_env(c);
  w.contract = std::move(c);
  if (plan.omp_threads_defaulted) {
    w.env[env::kOmpNumThreads] = std::to_string(*plan.omp_threads_defaulted);
  }
  if (w.contract.role == env::Role::kTrainer &&
      !env::lookup(inputs.caller_env, env::kNcclAsyncErrorHandling)) {
    w.env[env::kNcclAsyncErrorHandling] = "1";  // torchrun's default
  }
  if (options.log_level_name) w.env[env::kLogLevel] = *options.log_level_name;
  // As torchrun runs scripts with -u: output arrives line by line (the hang guard and the
  // console see it), also from a Python program started by the worker.
  if (!env::lookup(inputs.caller_env, env::kPythonUnbuffered)) w.env[env::kPythonUnbuffered] = "1";
  // As both Paddle launchers: a proxy would carry the workers' local HTTP rendezvous away; the
  // values stay available under our names.
  for (const auto& [proxy, saved] : env::kRemovedProxies) {
    if (auto v = env::lookup(inputs.caller_env, proxy)) {
      w.removed.emplace_back(proxy);
      w.env[saved] = *v;
    }
  }
  return w;
}

// A parameter-server job (see plan.h): every server and trainer endpoint, and which of them
// this node starts.
ClusterPlan make_ps_plan(const LaunchOptions& options, const PlanInputs& inputs) {
  const int servers = options.server_num;
  const int trainers = options.worker_num;
  if (servers < 1 || trainers < 1) {
    throw PlanError("a parameter-server job needs at least one server and one trainer, got " +
                    std::to_string(servers) + " server(s) and " + std::to_string(trainers) +
                    " trainer(s)");
  }
  ClusterPlan plan;
  std::vector<int> local_servers;   // server indices this node starts
  std::vector<int> local_trainers;  // trainer ids this node starts
  NodePlace place;
  if (options.explicit_endpoints()) {
    plan.server_endpoints = options.servers;
    plan.endpoints = options.workers;
    for (int i = 0; i < static_cast<int>(options.servers.size()); ++i) {
      if (options.servers[i].host == options.node_ip) local_servers.push_back(i);
    }
    for (int i = 0; i < static_cast<int>(options.workers.size()); ++i) {
      if (options.workers[i].host == options.node_ip) local_trainers.push_back(i);
    }
    if (local_servers.empty() && local_trainers.empty()) {
      throw PlanError("--node_ip='" + options.node_ip +
                      "' is the host of no entry of --servers or --workers (their hosts: " +
                      join_hosts(options.servers, options.workers) +
                      "), so this node would start nothing; run launch with --node_ip set to "
                      "one of them");
    }
    // The nodes are the hosts of the lists, in order of first appearance.
    const std::vector<std::string> hosts = hosts_in_order(options.servers, options.workers);
    place.nodes = static_cast<int>(hosts.size());
    place.node = static_cast<int>(std::find(hosts.begin(), hosts.end(), options.node_ip) -
                                  hosts.begin());
    plan.world_device_ids = world_device_ids(options, plan.endpoints, 0);
  } else {
    const int per_node = servers + trainers;
    int nodes = static_cast<int>(options.cluster_node_ips.size());
    int node = options.node_index();
    std::vector<env::Endpoint> all;  // node-major blocks: S servers, then W trainers
    if (inputs.cluster_endpoints) {
      all = *inputs.cluster_endpoints;
      if (all.empty() || all.size() % static_cast<std::size_t>(per_node) != 0) {
        throw PlanError("the nodes published " + std::to_string(all.size()) +
                        " endpoints, not a multiple of " + std::to_string(servers) +
                        " servers + " + std::to_string(trainers) + " trainers per node");
      }
      nodes = static_cast<int>(all.size()) / per_node;
      node = inputs.node_rank;
      if (node < 0 || node >= nodes) {
        throw PlanError("node rank " + std::to_string(node) + " is not below the " +
                        std::to_string(nodes) + " nodes of the job");
      }
    } else {
      if (node >= nodes) {
        throw PlanError("--node_ip='" + options.node_ip + "' is not one of --cluster_node_ips");
      }
      const std::vector<std::uint16_t> local_ports =
          pick_local_ports(options, inputs, nodes, per_node, "servers and trainers");
      for (int k = 0; k < nodes; ++k) {
        for (int i = 0; i < per_node; ++i) {
          all.push_back(env::Endpoint{options.cluster_node_ips[k], local_ports[i]});
        }
      }
    }
    for (int k = 0; k < nodes; ++k) {
      const auto block = all.begin() + static_cast<std::ptrdiff_t>(k) * per_node;
      plan.server_endpoints.insert(plan.server_endpoints.end(), block, block + servers);
      plan.endpoints.insert(plan.endpoints.end(), block + servers, block + per_node);
    }
    for (int i = 0; i < servers; ++i) local_servers.push_back(node * servers + i);
    for (int i = 0; i < trainers; ++i) local_trainers.push_back(node * trainers + i);
    place = NodePlace{node, nodes};
    plan.world_device_ids = world_device_ids(options, plan.endpoints, trainers);
  }
  plan.world_size = static_cast<int>(plan.endpoints.size());
  if (!options.selected_gpus.empty() &&
      options.selected_gpus.size() != local_trainers.size()) {
    throw PlanError("--selected_gpus lists " + std::to_string(options.selected_gpus.size()) +
                    " GPU(s) but this node (" + options.node_ip + ") starts " +
                    std::to_string(local_trainers.size()) + " trainer(s): one GPU per trainer");
  }

  const int local_processes = static_cast<int>(local_servers.size() + local_trainers.size());
  if (!env::lookup(inputs.caller_env, env::kOmpNumThreads)) {
    plan.omp_threads_defaulted = env::default_omp_threads(inputs.cores, local_processes);
  }
  // This node's processes of one role: `ids` are their global indices, local ranks count within
  // the role; trainers take the selected GPUs in order, servers none.
  auto add_local = [&](env::Role role, const std::vector<int>& ids) {
    const bool server = role == env::Role::kServer;
    for (std::size_t j = 0; j < ids.size(); ++j) {
      env::WorkerContract c;
      c.role = role;
      c.rank = ids[j];
      c.world_size = plan.world_size;
      c.endpoints = plan.endpoints;
      c.server_endpoints = plan.server_endpoints;
      c.current = server ? plan.server_endpoints[c.rank] : plan.endpoints[c.rank];
      c.local_rank = static_cast<int>(j);
      c.local_world_size = static_cast<int>(ids.size());
      if (!server && !options.selected_gpus.empty()) c.gpu = options.selected_gpus[j];
      plan.local.push_back(make_spec(std::move(c), options, inputs, plan, place));
    }
  };
  add_local(env::Role::kServer, local_servers);
  add_local(env::Role::kTrainer, local_trainers);
  return plan;
}

}  // namespace

int local_endpoint_count(const LaunchOptions& options) {
  return options.ps_job() ? options.server_num + options.worker_num : options.nproc_per_node;
}

std::vector<env::Endpoint> local_endpoints(const LaunchOptions& options, const std::string& host,
                                           const std::vector<std::uint16_t>& free_ports) {
  const int count = local_endpoint_count(options);
  if (!options.started_port && static_cast<int>(free_ports.size()) != count) {
    throw PlanError("this node needs " + std::to_string(count) + " free ports on " + host +
                    ", got " + std::to_string(free_ports.size()));
  }
  std::vector<env::Endpoint> local;
  for (int i = 0; i < count; ++i) {
    local.push_back(env::Endpoint{
        host, options.started_port ? static_cast<std::uint16_t>(*options.started_port + i)
                                   : free_ports[i]});
  }
  return local;
}

void put_port_first(std::vector<std::uint16_t>& ports, std::uint16_t wanted) {
  const auto clash = std::find(ports.begin() + 1, ports.end(), wanted);
  if (clash != ports.end()) *clash = ports[0];
  ports[0] = wanted;
}

ClusterPlan make_plan(const LaunchOptions& options, const PlanInputs& inputs) {
  if (options.ps_job()) return make_ps_plan(options, inputs);
  const int per_node = options.nproc_per_node;
  if (per_node < 1)
    throw PlanError("--nproc_per_node must be >= 1, got " + std::to_string(per_node));
  int nodes = static_cast<int>(options.cluster_node_ips.size());
  int node = options.node_index();
  ClusterPlan plan;
  if (inputs.cluster_endpoints) {
    const auto& all = *inputs.cluster_endpoints;
    if (all.empty() || all.size() % static_cast<std::size_t>(per_node) != 0) {
      throw PlanError("the nodes published " + std::to_string(all.size()) +
                      " endpoints, not a multiple of " + std::to_string(per_node) +
                      " workers per node");
    }
    nodes = static_cast<int>(all.size()) / per_node;
    node = inputs.node_rank;
    if (node < 0 || node >= nodes) {
      throw PlanError("node rank " + std::to_string(node) + " is not below the " +
                      std::to_string(nodes) + " nodes of the job");
    }
    plan.endpoints = all;
  } else if (node >= nodes) {
    throw PlanError("--node_ip='" + options.node_ip + "' is not one of --cluster_node_ips");
  }
  plan.world_size = per_node * nodes;

  // Endpoints published through the control store are known already.
  std::vector<std::uint16_t> local_ports =
      inputs.cluster_endpoints ? std::vector<std::uint16_t>()
                               : pick_local_ports(options, inputs, nodes, per_node, "workers");
  // A single node given --master_port (torchrun's spelling) hosts the workers' store there: rank
  // 0's endpoint is MASTER_ADDR:MASTER_PORT, so they appear as given.
  if (nodes == 1 && !inputs.cluster_endpoints && options.master_port && !options.started_port &&
      !local_ports.empty()) {
    put_port_first(local_ports, static_cast<std::uint16_t>(*options.master_port));
  }

  for (int k = 0; k < nodes && !inputs.cluster_endpoints; ++k) {
    for (int i = 0; i < per_node; ++i) {
      const std::uint16_t port =
          k == node ? local_ports[i] : static_cast<std::uint16_t>(*options.started_port + i);
      plan.endpoints.push_back(env::Endpoint{options.cluster_node_ips[k], port});
    }
  }

  const bool caller_has_omp = env::lookup(inputs.caller_env, env::kOmpNumThreads).has_value();
  if (!caller_has_omp)
    plan.omp_threads_defaulted = env::default_omp_threads(inputs.cores, per_node);

  plan.world_device_ids = world_device_ids(options, plan.endpoints, per_node);
  for (int i = 0; i < per_node; ++i) {
    env::WorkerContract c;
    c.rank = node * per_node + i;
    c.world_size = plan.world_size;
    c.local_rank = i;
    c.local_world_size = per_node;
    c.endpoints = plan.endpoints;
    c.current = plan.endpoints[c.rank];
    if (!options.selected_gpus.empty()) c.gpu = options.selected_gpus[i];
    plan.local.push_back(make_spec(std::move(c), options, inputs, plan, NodePlace{node, nodes}));
  }
  return plan;
}

env::EnvMap merge_env(env::EnvMap env, const env::EnvMap& overrides,
                      const std::vector<std::string>& removed) {
  for (const std::string& name : removed) env.erase(name);
  for (const auto& [name, value] : overrides) env[name] = value;
  return env;
}

std::string random_hex(std::size_t bytes) {
  std::random_device device;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (std::size_t i = 0; i < bytes; ++i) {
    const unsigned byte = device() & 0xffu;
    out += kDigits[byte >> 4];
    out += kDigits[byte & 0xfu];
  }
  return out;
}

std::string describe_plan(const ClusterPlan& plan) {
  std::ostringstream os;
  auto value_of = [](const std::string& name, const std::string& value) {
    return name == env::kJobSecret ? std::string("<hidden>") : value;
  };
  // The first process of each role is printed whole, the others by what differs from it.
  const PlannedWorker* first[2] = {nullptr, nullptr};
  for (const PlannedWorker& w : plan.local) {
    const bool server = w.contract.role == env::Role::kServer;
    const std::string noun = server ? "server " : "rank ";
    os << "----------- " << noun << w.contract.rank << " (local " << noun << w.contract.local_rank
       << ") environment";
    const PlannedWorker*& base = first[server ? 1 : 0];
    if (base == nullptr) {
      base = &w;
      os << " -----------\n";
      for (const auto& [name, value] : w.env) os << name << "=" << value_of(name, value) << "\n";
      continue;
    }
    os << ": as " << noun << base->contract.rank << " except -----------\n";
    for (const auto& [name, value] : w.env) {
      const auto it = base->env.find(name);
      if (it == base->env.end() || it->second != value) {
        os << name << "=" << value_of(name, value) << "\n";
      }
    }
    for (const auto& [name, value] : base->env) {
      if (w.env.count(name) == 0) os << "(" << name << " not set)\n";
    }
  }
  if (!plan.local.empty()) os << "------------------------------------------------\n";
  return os.str();
}

}  // namespace ddl::launcher
