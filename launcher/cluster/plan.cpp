#include "launcher/cluster/plan.h"

#include <random>
#include <set>
#include <sstream>

namespace ddl::launcher {

ClusterPlan make_plan(const LaunchOptions& options, const PlanInputs& inputs) {
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

  std::vector<std::uint16_t> local_ports;
  if (inputs.cluster_endpoints) {
    // Endpoints are known already.
  } else if (options.started_port) {
    if (*options.started_port < 1 || *options.started_port + per_node - 1 > 65535) {
      throw PlanError("--started_port=" + std::to_string(*options.started_port) + " with " +
                      std::to_string(per_node) +
                      " workers per node leaves the port range 1..65535");
    }
    for (int i = 0; i < per_node; ++i) {
      local_ports.push_back(static_cast<std::uint16_t>(*options.started_port + i));
    }
  } else {
    if (nodes > 1) {
      throw PlanError("--cluster_node_ips lists " + std::to_string(nodes) +
                      " nodes but --started_port is not set: nodes cannot learn each other's "
                      "free ports, so give every node the same --started_port");
    }
    if (!inputs.pick_ports) throw PlanError("no --started_port and no way to pick free ports");
    local_ports = inputs.pick_ports(options.node_ip, per_node);
    std::set<std::uint16_t> unique(local_ports.begin(), local_ports.end());
    if (static_cast<int>(local_ports.size()) != per_node ||
        static_cast<int>(unique.size()) != per_node || unique.count(0) > 0) {
      throw PlanError("the port picker returned " + std::to_string(local_ports.size()) +
                      " ports (" + std::to_string(unique.size()) + " distinct, non-zero) for " +
                      std::to_string(per_node) + " workers on " + options.node_ip);
    }
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

  for (int i = 0; i < per_node; ++i) {
    WorkerSpec w;
    env::WorkerContract& c = w.contract;
    c.rank = node * per_node + i;
    c.world_size = plan.world_size;
    c.local_rank = i;
    c.local_world_size = per_node;
    c.endpoints = plan.endpoints;
    c.current = plan.endpoints[c.rank];
    if (!options.selected_gpus.empty()) c.gpu = options.selected_gpus[i];
    c.job_id = inputs.generation.job_id(inputs.job_id);
    c.secret = inputs.job_secret;
    c.restart_count = inputs.generation.index();
    if (options.rendezvous_timeout) c.rendezvous_timeout = *options.rendezvous_timeout;
    w.env = env::to_env(c);
    if (plan.omp_threads_defaulted) {
      w.env[env::kOmpNumThreads] = std::to_string(*plan.omp_threads_defaulted);
    }
    if (options.log_level_name) w.env[env::kLogLevel] = *options.log_level_name;
    plan.local.push_back(std::move(w));
  }
  return plan;
}

env::EnvMap merge_env(env::EnvMap env, const env::EnvMap& overrides) {
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
  for (const WorkerSpec& w : plan.local) {
    os << "----------- rank " << w.contract.rank << " (local rank " << w.contract.local_rank
       << ") environment -----------\n";
    for (const auto& [name, value] : w.env) {
      os << name << "=" << (name == env::kJobSecret ? std::string("<hidden>") : value) << "\n";
    }
  }
  if (!plan.local.empty()) os << "------------------------------------------------\n";
  return os.str();
}

}  // namespace ddl::launcher
