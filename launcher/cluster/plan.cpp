#include "launcher/cluster/plan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "env/file.h"
#include "env/scheduler.h"
#include "env/text.h"

namespace ddl::launcher {
namespace {

// Every endpoint of explicit lists: the servers, the trainers, then the heter workers.
std::vector<env::Endpoint> listed_endpoints(const JobConfig& config) {
  std::vector<env::Endpoint> all = config.servers;
  all.insert(all.end(), config.workers.begin(), config.workers.end());
  for (const JobConfig::HeterStage& stage : config.heter) {
    all.insert(all.end(), stage.endpoints.begin(), stage.endpoints.end());
  }
  return all;
}

// The distinct hosts of `endpoints`, in order of first appearance.
std::vector<std::string> hosts_in_order(const std::vector<env::Endpoint>& endpoints) {
  std::vector<std::string> hosts;
  for (const env::Endpoint& e : endpoints) {
    if (std::find(hosts.begin(), hosts.end(), e.host) == hosts.end()) hosts.push_back(e.host);
  }
  return hosts;
}

std::string join_hosts(const std::vector<env::Endpoint>& endpoints) {
  std::string out;
  for (const std::string& h : hosts_in_order(endpoints)) out += (out.empty() ? "" : ",") + h;
  return out;
}

// This node's `count` ports, for the `what` it starts ("workers", "servers and trainers"):
// started_port .. started_port+count-1, or, on a single node without it, free ones from the port
// picker (distinct and non-zero).
std::vector<std::uint16_t> pick_local_ports(const JobConfig& config, const PlanInputs& inputs,
                                            int nodes, int count, const std::string& what) {
  std::vector<std::uint16_t> ports;
  if (config.started_port) {
    if (*config.started_port < 1 || *config.started_port + count - 1 > 65535) {
      throw PlanError("--started_port=" + std::to_string(*config.started_port) + " with " +
                      std::to_string(count) + " " + what +
                      " per node leaves the port range 1..65535");
    }
    for (int i = 0; i < count; ++i) {
      ports.push_back(static_cast<std::uint16_t>(*config.started_port + i));
    }
    return ports;
  }
  if (nodes > 1) {
    throw PlanError("--cluster_node_ips lists " + std::to_string(nodes) +
                    " nodes but --started_port is not set: nodes cannot learn each other's "
                    "free ports, so give every node the same --started_port");
  }
  if (!inputs.pick_ports) throw PlanError("no --started_port and no way to pick free ports");
  ports = inputs.pick_ports(config.node_ip, count);
  std::set<std::uint16_t> unique(ports.begin(), ports.end());
  if (static_cast<int>(ports.size()) != count || static_cast<int>(unique.size()) != count ||
      unique.count(0) > 0) {
    throw PlanError("the port picker returned " + std::to_string(ports.size()) + " ports (" +
                    std::to_string(unique.size()) + " distinct, non-zero) for " +
                    std::to_string(count) + " " + what + " on " + config.node_ip);
  }
  return ports;
}

// Every trainer's device in rank order (env::WorkerContract::world_device_ids): the GPU its
// local index takes from selected_gpus (the same list on every node), else that index. The
// local index is rank % per_node for node-major blocks of per_node trainers; with per_node 0
// (explicit `workers` lists) it counts the earlier trainers on the same host.
std::vector<int> world_device_ids(const JobConfig& config,
                                  const std::vector<env::Endpoint>& trainers, int per_node) {
  std::vector<int> ids;
  for (std::size_t r = 0; r < trainers.size(); ++r) {
    int local = 0;
    if (per_node > 0) {
      local = static_cast<int>(r) % per_node;
    } else {
      for (std::size_t q = 0; q < r; ++q) local += trainers[q].host == trainers[r].host;
    }
    const bool has_gpu = static_cast<std::size_t>(local) < config.selected_gpus.size();
    ids.push_back(has_gpu ? config.selected_gpus[local] : local);
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
// Paddle's launchers hand every process of a parameter-server job the Gloo rendezvous its role
// maker builds: an HTTP store (rendezvous 3) that server 0's role maker serves on the first
// server's host, and a file-system path (a fresh one per job and node, not created).
void add_gloo_rendezvous(const JobConfig& config, const PlanInputs& inputs, const ClusterPlan& plan,
                         env::EnvMap& env) {
  env[env::kPaddleWithGloo] = std::to_string(config.with_gloo);
  env[env::kPaddleGlooRendezvous] = "3";
  env[env::kPaddleGlooFsPath] =
      (std::filesystem::temp_directory_path() /
       ("ddl-gloo-" + env::safe_file_name(inputs.generation.job_id(inputs.job_id), "job")))
          .string();
  const std::string host =
      plan.server_endpoints.empty() ? config.node_ip : plan.server_endpoints.front().host;
  env[env::kPaddleGlooHttpEndpoint] = host + ":" + std::to_string(config.gloo_port);
}

PlannedWorker make_spec(env::WorkerContract c, const JobConfig& config, const PlanInputs& inputs,
                        const ClusterPlan& plan, NodePlace place) {
  c.job_id = inputs.generation.job_id(inputs.job_id);
  c.secret = inputs.job_secret;
  c.restart_count = inputs.generation.index();
  if (config.rendezvous_timeout) c.rendezvous_timeout = *config.rendezvous_timeout;
  c.node_rank = place.node;
  c.nnodes = place.nodes;
  c.role_name = config.role;
  c.run_id = config.rdzv_id.value_or(inputs.job_id.empty() ? std::string("none") : inputs.job_id);
  c.max_restarts = config.max_restarts;
  c.paddle_job_id = config.job_id.value_or("default");
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
  if (config.log_level_name) w.env[env::kLogLevel] = *config.log_level_name;
  if (w.contract.role == env::Role::kTrainer && !config.ps_job()) {
    if (!w.contract.gpu && config.empty_gpus_on_cpu) w.env[env::kSelectedGpus] = "";
    if (config.distri_backend) w.env[env::kPaddleDistriBackend] = *config.distri_backend;
  }
  if (config.ps_job()) add_gloo_rendezvous(config, inputs, plan, w.env);
  if (config.paddle_elastic && w.contract.role == env::Role::kTrainer) {
    // As Paddle's elastic manager exports them before each start: the nodes' hosts in node
    // order, and every trainer's endpoint.
    const env::WorkerContract& k = w.contract;
    const int per_node = k.world_size / std::max(k.nnodes, 1);
    std::vector<std::string> hosts;
    for (int n = 0; n < k.nnodes; ++n) {
      hosts.push_back(k.endpoints[static_cast<std::size_t>(n * per_node)].host);
    }
    w.env[env::kPaddleTrainers] = env::join(hosts, ",");
    w.env[env::kDistributedTrainerEndpoints] = env::join_endpoints(k.endpoints);
  }
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

// Which of a parameter-server job's processes this node starts, and where it stands.
struct PsLocal {
  std::vector<int> servers;                // server indices this node starts
  std::vector<int> trainers;               // trainer ids this node starts
  std::vector<std::pair<int, int>> heter;  // heter workers this node starts: index, stage (2..)
  NodePlace place;
};

// Explicit `servers`/`workers` lists (see plan.h): they are the job's endpoints; this node starts
// the entries whose host is its address.
PsLocal plan_listed_ps(const JobConfig& config, ClusterPlan& plan) {
  PsLocal local;
  plan.server_endpoints = config.servers;
  plan.endpoints = config.workers;
  for (int i = 0; i < static_cast<int>(config.servers.size()); ++i) {
    if (config.servers[i].host == config.node_ip) local.servers.push_back(i);
  }
  for (int i = 0; i < static_cast<int>(config.workers.size()); ++i) {
    if (config.workers[i].host == config.node_ip) local.trainers.push_back(i);
  }
  for (std::size_t k = 0; k < config.heter.size(); ++k) {
    const int stage = static_cast<int>(k) + 2;
    plan.heter_stages.push_back(env::HeterStage{config.heter[k].device, config.heter[k].endpoints});
    for (const env::Endpoint& e : config.heter[k].endpoints) {
      if (e.host == config.node_ip) {
        local.heter.emplace_back(static_cast<int>(plan.heter_endpoints.size()), stage);
      }
      plan.heter_endpoints.push_back(e);
    }
  }
  const std::vector<env::Endpoint> listed = listed_endpoints(config);
  if (local.servers.empty() && local.trainers.empty() && local.heter.empty()) {
    throw PlanError("--node_ip='" + config.node_ip + "' is the host of no entry of --servers" +
                    (config.heter.empty() ? " or --workers" : ", --workers or --heter_workers") +
                    " (their hosts: " + join_hosts(listed) +
                    "), so this node would start nothing; run launch with --node_ip set to "
                    "one of them");
  }
  // The nodes are the hosts of the lists, in order of first appearance.
  const std::vector<std::string> hosts = hosts_in_order(listed);
  local.place.nodes = static_cast<int>(hosts.size());
  local.place.node =
      static_cast<int>(std::find(hosts.begin(), hosts.end(), config.node_ip) - hosts.begin());
  plan.world_device_ids = world_device_ids(config, plan.endpoints, 0);
  return local;
}

// Counts per node (see plan.h): node-major blocks of S servers then W trainers, from the
// endpoints the nodes published or from this node's ports.
PsLocal plan_counted_ps(const JobConfig& config, const PlanInputs& inputs, ClusterPlan& plan) {
  const int servers = config.server_num;
  const int trainers = config.worker_num;
  const int per_node = servers + trainers + config.heter_per_node();
  int nodes = static_cast<int>(config.cluster_node_ips.size());
  int node = config.node_index();
  std::vector<env::Endpoint> all;  // node-major blocks: S servers, then W trainers
  if (inputs.cluster_endpoints) {
    all = *inputs.cluster_endpoints;
    if (all.empty() || all.size() % static_cast<std::size_t>(per_node) != 0) {
      throw PlanError("the nodes published " + std::to_string(all.size()) +
                      " endpoints, not a multiple of " + std::to_string(servers) + " servers + " +
                      std::to_string(trainers) + " trainers + " +
                      std::to_string(config.heter_per_node()) + " heter workers per node");
    }
    nodes = static_cast<int>(all.size()) / per_node;
    node = inputs.node_rank;
    if (node < 0 || node >= nodes) {
      throw PlanError("node rank " + std::to_string(node) + " is not below the " +
                      std::to_string(nodes) + " nodes of the job");
    }
  } else {
    if (node >= nodes) {
      throw PlanError("--node_ip='" + config.node_ip + "' is not one of --cluster_node_ips");
    }
    const std::vector<std::uint16_t> local_ports =
        pick_local_ports(config, inputs, nodes, per_node, "servers and trainers");
    for (int k = 0; k < nodes; ++k) {
      for (int i = 0; i < per_node; ++i) {
        all.push_back(env::Endpoint{config.cluster_node_ips[k], local_ports[i]});
      }
    }
  }
  for (int k = 0; k < nodes; ++k) {
    const auto block = all.begin() + static_cast<std::ptrdiff_t>(k) * per_node;
    plan.server_endpoints.insert(plan.server_endpoints.end(), block, block + servers);
    plan.endpoints.insert(plan.endpoints.end(), block + servers, block + servers + trainers);
  }
  PsLocal local;
  for (int i = 0; i < servers; ++i) local.servers.push_back(node * servers + i);
  for (int i = 0; i < trainers; ++i) local.trainers.push_back(node * trainers + i);
  // Each heter stage: node-major, from the stage's place in every node's block.
  int offset = servers + trainers;
  for (std::size_t j = 0; j < config.heter.size(); ++j) {
    const int count = config.heter[j].count;
    env::HeterStage stage{config.heter[j].device, {}};
    for (int k = 0; k < nodes; ++k) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(k) * per_node + offset;
      if (k == node) {
        for (int i = 0; i < count; ++i) {
          local.heter.emplace_back(static_cast<int>(plan.heter_endpoints.size()) + i,
                                   static_cast<int>(j) + 2);
        }
      }
      plan.heter_endpoints.insert(plan.heter_endpoints.end(), first, first + count);
      stage.endpoints.insert(stage.endpoints.end(), first, first + count);
    }
    plan.heter_stages.push_back(std::move(stage));
    offset += count;
  }
  local.place = NodePlace{node, nodes};
  plan.world_device_ids = world_device_ids(config, plan.endpoints, trainers);
  return local;
}

// Adds this node's processes of one role to `plan`: `ids` are their global indices (with their
// stage: heter workers), local ranks count within the role; trainers take the selected GPUs in
// order, servers and heter workers none.
void add_local_ps(env::Role role, const std::vector<std::pair<int, int>>& ids,
                  const JobConfig& config, const PlanInputs& inputs, NodePlace place,
                  ClusterPlan& plan) {
  const bool server = role == env::Role::kServer;
  const bool heter = role == env::Role::kHeterTrainer;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    env::WorkerContract c;
    c.role = role;
    c.rank = ids[j].first;
    c.stage = ids[j].second;
    c.world_size = plan.world_size;
    c.endpoints = plan.endpoints;
    c.server_endpoints = plan.server_endpoints;
    c.heter_endpoints = plan.heter_endpoints;
    c.heter_stages = plan.heter_stages;
    c.current = server  ? plan.server_endpoints[c.rank]
                : heter ? plan.heter_endpoints[c.rank]
                        : plan.endpoints[c.rank];
    c.local_rank = static_cast<int>(j);
    c.local_world_size = static_cast<int>(ids.size());
    if (role == env::Role::kTrainer && !config.selected_gpus.empty()) {
      c.gpu = config.selected_gpus[j];
    }
    plan.local.push_back(make_spec(std::move(c), config, inputs, plan, place));
  }
}

// Global indices with stage 1 (servers and trainers have none of their own).
std::vector<std::pair<int, int>> in_stage_one(const std::vector<int>& ids) {
  std::vector<std::pair<int, int>> out;
  for (int id : ids) out.emplace_back(id, 1);
  return out;
}

// A parameter-server job (see plan.h): every server and trainer endpoint, and which of them
// this node starts.
ClusterPlan make_ps_plan(const JobConfig& config, const PlanInputs& inputs) {
  const int servers = config.server_num;
  const int trainers = config.worker_num;
  if (servers < 1 || trainers < 1) {
    throw PlanError("a parameter-server job needs at least one server and one trainer, got " +
                    std::to_string(servers) + " server(s) and " + std::to_string(trainers) +
                    " trainer(s)");
  }
  ClusterPlan plan;
  const PsLocal local = config.explicit_endpoints() ? plan_listed_ps(config, plan)
                                                    : plan_counted_ps(config, inputs, plan);
  plan.world_size = static_cast<int>(plan.endpoints.size());
  if (!config.selected_gpus.empty() && config.selected_gpus.size() != local.trainers.size()) {
    throw PlanError("--selected_gpus lists " + std::to_string(config.selected_gpus.size()) +
                    " GPU(s) but this node (" + config.node_ip + ") starts " +
                    std::to_string(local.trainers.size()) + " trainer(s): one GPU per trainer");
  }

  const int local_processes =
      static_cast<int>(local.servers.size() + local.trainers.size() + local.heter.size());
  if (!env::lookup(inputs.caller_env, env::kOmpNumThreads)) {
    plan.omp_threads_defaulted = env::default_omp_threads(inputs.cores, local_processes);
  }
  add_local_ps(env::Role::kServer, in_stage_one(local.servers), config, inputs, local.place, plan);
  add_local_ps(env::Role::kTrainer, in_stage_one(local.trainers), config, inputs, local.place,
               plan);
  add_local_ps(env::Role::kHeterTrainer, local.heter, config, inputs, local.place, plan);
  return plan;
}

// Every node's endpoints under a rank mapping, node order, each node's in its local rank order:
// as the nodes published them, or from --started_port (any number of nodes) or the port picker
// (one node).
std::vector<std::vector<env::Endpoint>> mapped_node_endpoints(const JobConfig& config,
                                                              const PlanInputs& inputs) {
  const RankMapping& m = *config.rank_mapping;
  std::vector<std::vector<env::Endpoint>> out(m.nodes.size());
  if (inputs.cluster_endpoints) {
    const std::vector<env::Endpoint>& all = *inputs.cluster_endpoints;
    if (static_cast<int>(all.size()) != m.world_size()) {
      throw PlanError("the nodes published " + std::to_string(all.size()) +
                      " endpoints but the rank mapping has " + std::to_string(m.world_size()) +
                      " ranks");
    }
    auto next = all.begin();
    for (std::size_t k = 0; k < m.nodes.size(); ++k) {
      out[k].assign(next, next + static_cast<std::ptrdiff_t>(m.nodes[k].ranks.size()));
      next += static_cast<std::ptrdiff_t>(m.nodes[k].ranks.size());
    }
    return out;
  }
  const int nodes = static_cast<int>(m.nodes.size());
  const int node = m.node_index(config.node_ip);
  for (int k = 0; k < nodes; ++k) {
    const int count = static_cast<int>(m.nodes[k].ranks.size());
    if (k == node || config.started_port) {
      JobConfig one = config;  // the ports of node k: its rank count, on its host
      one.node_ip = m.nodes[k].host;
      for (std::uint16_t port : pick_local_ports(one, inputs, nodes, count, "workers")) {
        out[k].push_back(env::Endpoint{m.nodes[k].host, port});
      }
    } else {
      throw PlanError("the rank mapping names " + std::to_string(nodes) +
                      " nodes but --started_port is not set: nodes cannot learn each other's "
                      "free ports, so give every node the same --started_port");
    }
  }
  return out;
}

// A collective job placed by a rank mapping file (see plan.h).
ClusterPlan make_mapped_plan(const JobConfig& config, const PlanInputs& inputs) {
  const RankMapping& m = *config.rank_mapping;
  const int nodes = static_cast<int>(m.nodes.size());
  const int node = inputs.cluster_endpoints ? inputs.node_rank : m.node_index(config.node_ip);
  if (node < 0 || node >= nodes) {
    throw PlanError("--node_ip='" + config.node_ip + "' is not one of the nodes of the rank " +
                    "mapping (" + m.str() + ")");
  }
  const std::vector<std::vector<env::Endpoint>> per_node = mapped_node_endpoints(config, inputs);
  ClusterPlan plan;
  plan.world_size = m.world_size();
  plan.endpoints.resize(plan.world_size);
  plan.world_device_ids.resize(plan.world_size);
  const auto device_of = [&](std::size_t i) {
    return i < config.selected_gpus.size() ? config.selected_gpus[i] : static_cast<int>(i);
  };
  for (int k = 0; k < nodes; ++k) {
    for (std::size_t i = 0; i < m.nodes[k].ranks.size(); ++i) {
      plan.endpoints[m.nodes[k].ranks[i]] = per_node[k][i];
      plan.world_device_ids[m.nodes[k].ranks[i]] = device_of(i);
    }
  }
  const std::vector<int>& ranks = m.nodes[node].ranks;
  const int local_count = static_cast<int>(ranks.size());
  if (!env::lookup(inputs.caller_env, env::kOmpNumThreads)) {
    plan.omp_threads_defaulted = env::default_omp_threads(inputs.cores, local_count);
  }
  for (int i = 0; i < local_count; ++i) {
    env::WorkerContract c;
    c.rank = ranks[i];
    c.world_size = plan.world_size;
    c.local_rank = i;
    c.local_world_size = local_count;
    c.endpoints = plan.endpoints;
    c.current = plan.endpoints[c.rank];
    c.gpu = device_of(static_cast<std::size_t>(i));
    plan.local.push_back(make_spec(std::move(c), config, inputs, plan, NodePlace{node, nodes}));
  }
  return plan;
}

}  // namespace

int local_endpoint_count(const JobConfig& config) {
  if (config.rank_mapping && !config.ps_job()) {
    const int node = config.rank_mapping->node_index(config.node_ip);
    if (node < static_cast<int>(config.rank_mapping->nodes.size())) {
      return static_cast<int>(config.rank_mapping->nodes[node].ranks.size());
    }
  }
  return config.ps_job() ? config.server_num + config.worker_num + config.heter_per_node()
                         : config.nproc_per_node;
}

std::vector<env::Endpoint> local_endpoints(const JobConfig& config, const std::string& host,
                                           const std::vector<std::uint16_t>& free_ports) {
  const int count = local_endpoint_count(config);
  if (!config.started_port && static_cast<int>(free_ports.size()) != count) {
    throw PlanError("this node needs " + std::to_string(count) + " free ports on " + host +
                    ", got " + std::to_string(free_ports.size()));
  }
  std::vector<env::Endpoint> local;
  for (int i = 0; i < count; ++i) {
    local.push_back(env::Endpoint{host, config.started_port
                                            ? static_cast<std::uint16_t>(*config.started_port + i)
                                            : free_ports[i]});
  }
  return local;
}

void put_port_first(std::vector<std::uint16_t>& ports, std::uint16_t wanted) {
  const auto clash = std::find(ports.begin() + 1, ports.end(), wanted);
  if (clash != ports.end()) *clash = ports[0];
  ports[0] = wanted;
}

ClusterPlan make_plan(const JobConfig& config, const PlanInputs& inputs) {
  if (config.ps_job()) return make_ps_plan(config, inputs);
  if (config.rank_mapping) return make_mapped_plan(config, inputs);
  const int per_node = config.nproc_per_node;
  if (per_node < 1)
    throw PlanError("--nproc_per_node must be >= 1, got " + std::to_string(per_node));
  int nodes = static_cast<int>(config.cluster_node_ips.size());
  int node = config.node_index();
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
    throw PlanError("--node_ip='" + config.node_ip + "' is not one of --cluster_node_ips");
  }
  plan.world_size = per_node * nodes;

  // Endpoints published through the control store are known already.
  std::vector<std::uint16_t> local_ports =
      inputs.cluster_endpoints ? std::vector<std::uint16_t>()
                               : pick_local_ports(config, inputs, nodes, per_node, "workers");
  // A single node told rank 0's port (torchrun's --master_port) hosts the workers' store there:
  // rank 0's endpoint is MASTER_ADDR:MASTER_PORT, so they appear as given.
  if (nodes == 1 && !inputs.cluster_endpoints && config.master_port && !config.started_port &&
      !local_ports.empty()) {
    put_port_first(local_ports, static_cast<std::uint16_t>(*config.master_port));
  }

  for (int k = 0; k < nodes && !inputs.cluster_endpoints; ++k) {
    for (int i = 0; i < per_node; ++i) {
      const std::uint16_t port =
          k == node ? local_ports[i] : static_cast<std::uint16_t>(*config.started_port + i);
      plan.endpoints.push_back(env::Endpoint{config.cluster_node_ips[k], port});
    }
  }

  const bool caller_has_omp = env::lookup(inputs.caller_env, env::kOmpNumThreads).has_value();
  if (!caller_has_omp)
    plan.omp_threads_defaulted = env::default_omp_threads(inputs.cores, per_node);

  plan.world_device_ids = world_device_ids(config, plan.endpoints, per_node);
  for (int i = 0; i < per_node; ++i) {
    env::WorkerContract c;
    c.rank = node * per_node + i;
    c.world_size = plan.world_size;
    c.local_rank = i;
    c.local_world_size = per_node;
    c.endpoints = plan.endpoints;
    c.current = plan.endpoints[c.rank];
    if (!config.selected_gpus.empty()) c.gpu = config.selected_gpus[i];
    plan.local.push_back(make_spec(std::move(c), config, inputs, plan, NodePlace{node, nodes}));
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
  std::map<env::Role, const PlannedWorker*> first;
  for (const PlannedWorker& w : plan.local) {
    const env::Role role = w.contract.role;
    const std::string noun = role == env::Role::kTrainer ? "rank " : env::role_noun(role) + " ";
    os << "----------- " << noun << w.contract.rank << " (local " << noun << w.contract.local_rank
       << ") environment";
    const PlannedWorker*& base = first[role];
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
