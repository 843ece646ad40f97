#include "env/scheduler.h"

#include <algorithm>

#include "env/host.h"
#include "env/slurm.h"

namespace ddl::env {
namespace {

int required_int(const EnvMap& env, const char* name, const std::string& family) {
  const auto v = lookup(env, name);
  if (!v) {
    throw EnvError("partial " + family + " environment: " + name + " is not set");
  }
  return parse_non_negative_int(*v, name);
}

// MASTER_ADDR:MASTER_PORT, each from the variable when set, else the fallbacks.
Endpoint store_endpoint(const EnvMap& env, const std::optional<std::string>& host, int port) {
  Endpoint e;
  if (auto a = lookup(env, kMasterAddr)) {
    e.host = check_host(*a, kMasterAddr, *a);
  } else if (host) {
    e.host = *host;
  }
  if (auto p = lookup(env, kMasterPort)) {
    e = parse_endpoint(e.host + ":" + *p, kMasterPort);
  } else {
    e.port = static_cast<std::uint16_t>(port);
  }
  return e;
}

// `spans_hosts`: the store listens on a network interface, so a secret must admit the ranks
// (as `launch` requires across nodes).
void common_fields(const EnvMap& env, WorkerContract& c, bool spans_hosts,
                   const std::string& forward_hint) {
  if (auto v = lookup(env, kJobSecret)) c.secret = *v;
  if (spans_hosts && c.secret.empty()) {
    throw EnvError("a job across machines (contract from " + source_name(c.source) + ") needs " +
                   kJobSecret +
                   " set to the same value in every rank: it admits "
                   "the ranks to rank 0's store (" +
                   forward_hint + ")");
  }
  if (auto v = lookup(env, kRendezvousTimeoutMs)) {
    const int ms = parse_non_negative_int(*v, kRendezvousTimeoutMs);
    if (ms == 0) throw EnvError(std::string(kRendezvousTimeoutMs) + "='0': expected > 0");
    c.rendezvous_timeout = std::chrono::milliseconds(ms);
  }
}

std::optional<WorkerContract> mpi_contract(const EnvMap& env) {
  const std::optional<MpiProcess> mpi = mpi_process(env);
  if (!mpi) return std::nullopt;
  WorkerContract c;
  c.source = WorkerContract::Source::kMpi;
  c.rank = mpi->rank;
  c.world_size = mpi->size;
  c.local_rank = mpi->local_rank;
  c.local_world_size = mpi->local_size;
  const bool one_node = mpi->one_host();
  if (!one_node && !lookup(env, kMasterAddr)) {
    throw EnvError(std::string(kOmpiSize) + "=" + std::to_string(c.world_size) + " spans nodes (" +
                   kOmpiLocalSize + "=" + std::to_string(c.local_world_size) + ") but " +
                   kMasterAddr + " is not set: pass rank 0's host, e.g. mpirun -x " + kMasterAddr +
                   "=<host>");
  }
  const Endpoint store = store_endpoint(
      env, one_node ? std::optional<std::string>("127.0.0.1") : std::nullopt, kMpiDefaultPort);
  c.endpoints = {store};
  // On one node every rank listens where the store is; across nodes on this machine's name.
  c.current = Endpoint{one_node ? store.host : std::string(), 0};
  if (c.rank == 0) c.current = store;
  c.job_id = "mpi-" + (mpi->job_id.empty() ? std::string("job") : mpi->job_id);
  common_fields(env, c, !one_node, std::string("mpirun -x ") + kJobSecret);
  c.validate();
  return c;
}

std::optional<WorkerContract> slurm_contract(const EnvMap& env) {
  if (!lookup(env, kSlurmProcId) || !lookup(env, kSlurmStepId)) return std::nullopt;
  const std::string family = "Slurm task";
  WorkerContract c;
  c.source = WorkerContract::Source::kSlurm;
  c.rank = required_int(env, kSlurmProcId, family);
  c.world_size = required_int(env, kSlurmNtasks, family);
  c.local_rank = required_int(env, kSlurmLocalId, family);
  const auto nodelist = lookup(env, kSlurmStepNodelist);
  const auto per_node = lookup(env, kSlurmStepTasksPerNode);
  if (!nodelist || !per_node) {
    throw EnvError("partial " + family + " environment: " + kSlurmStepNodelist + " and " +
                   kSlurmStepTasksPerNode + " must be set (srun sets both)");
  }
  const std::vector<std::string> nodes = expand_hostlist(*nodelist, kSlurmStepNodelist);
  for (const std::string& node : nodes) check_host(node, kSlurmStepNodelist, *nodelist);
  const std::vector<int> tasks = expand_tasks_per_node(*per_node, kSlurmStepTasksPerNode);
  if (tasks.size() != nodes.size()) {
    throw EnvError(std::string(kSlurmStepTasksPerNode) + "='" + *per_node + "' gives " +
                   std::to_string(tasks.size()) + " nodes but " + kSlurmStepNodelist + "='" +
                   *nodelist + "' has " + std::to_string(nodes.size()));
  }
  const std::string host = lookup(env, kSlurmdNodename).value_or(nodes.size() == 1 ? nodes[0] : "");
  const auto at = std::find(nodes.begin(), nodes.end(), host);
  if (at == nodes.end()) {
    throw EnvError(std::string(kSlurmdNodename) + "='" + host + "' is not in " +
                   kSlurmStepNodelist + "='" + *nodelist + "'");
  }
  c.local_world_size = tasks[static_cast<std::size_t>(at - nodes.begin())];
  const std::string job = lookup(env, kSlurmJobId).value_or("0");
  const int job_number = parse_non_negative_int(job, kSlurmJobId);
  const Endpoint store =
      store_endpoint(env, nodes.front(), kSlurmPortBase + job_number % kSlurmPortSpan);
  c.endpoints = {store};
  c.current = c.rank == 0 ? store : Endpoint{host, 0};
  c.job_id = "slurm-" + job + "." + *lookup(env, kSlurmStepId);
  if (auto v = lookup(env, kSlurmRestartCount)) {
    c.restart_count = parse_non_negative_int(*v, kSlurmRestartCount);
  }
  common_fields(env, c, nodes.size() > 1,
                std::string("export it before srun, which passes the environment on"));
  c.validate();
  return c;
}

}  // namespace

std::optional<MpiProcess> mpi_process(const EnvMap& env) {
  if (!lookup(env, kOmpiRank)) return std::nullopt;
  const std::string family = "Open MPI";
  MpiProcess p;
  p.rank = required_int(env, kOmpiRank, family);
  p.size = required_int(env, kOmpiSize, family);
  p.local_rank = required_int(env, kOmpiLocalRank, family);
  p.local_size = required_int(env, kOmpiLocalSize, family);
  if (p.size < 1 || p.rank >= p.size || p.local_size < 1 || p.local_rank >= p.local_size ||
      p.local_size > p.size) {
    throw EnvError(family + " environment is inconsistent: " + kOmpiRank + "=" +
                   std::to_string(p.rank) + ", " + kOmpiSize + "=" + std::to_string(p.size) + ", " +
                   kOmpiLocalRank + "=" + std::to_string(p.local_rank) + ", " + kOmpiLocalSize +
                   "=" + std::to_string(p.local_size));
  }
  p.job_id = lookup(env, kOmpiJobId).value_or("");
  return p;
}

std::vector<std::string> missing_paddle_cloud_variables(const EnvMap& env) {
  std::vector<std::string> missing;
  for (const char* name : {kPaddleTrainers, kPodIp, kTrainerId}) {
    if (!lookup(env, name)) missing.emplace_back(name);
  }
  return missing;
}

std::optional<PaddleCloudNode> paddle_cloud_node(const EnvMap& env) {
  if (!missing_paddle_cloud_variables(env).empty()) return std::nullopt;
  PaddleCloudNode n;
  const std::string trainers = *lookup(env, kPaddleTrainers);
  std::size_t start = 0;
  while (start <= trainers.size()) {
    const std::size_t comma = trainers.find(',', start);
    const std::string ip =
        trainers.substr(start, comma == std::string::npos ? comma : comma - start);
    if (ip.empty()) {
      throw EnvError(std::string(kPaddleTrainers) + "='" + trainers + "': empty entry");
    }
    n.node_ips.push_back(check_host(ip, kPaddleTrainers, trainers));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const std::string pod_ip = *lookup(env, kPodIp);
  n.pod_ip = check_host(pod_ip, kPodIp, pod_ip);
  n.node_rank = parse_non_negative_int(*lookup(env, kTrainerId), kTrainerId);
  if (auto v = lookup(env, kTrainerPortsNum); v && !v->empty()) {
    n.ports_num = parse_non_negative_int(*v, kTrainerPortsNum);
  }
  if (auto v = lookup(env, kTrainersNum)) n.trainers_num = parse_non_negative_int(*v, kTrainersNum);
  if (auto v = lookup(env, kServerPort); v && !v->empty()) {
    n.paddle_port = parse_non_negative_int(*v, kServerPort);
    if (*n.paddle_port < 1 || *n.paddle_port > 65535) {
      throw EnvError(std::string(kServerPort) + "='" + *v + "': expected a port 1..65535");
    }
  }
  const int nodes = static_cast<int>(n.node_ips.size());
  if (n.node_rank >= nodes) {
    throw EnvError(std::string(kTrainerId) + "=" + std::to_string(n.node_rank) +
                   " is not below the " + std::to_string(nodes) + " node(s) of " + kPaddleTrainers +
                   "='" + trainers + "'");
  }
  if (auto v = lookup(env, kDistributedTrainerEndpoints)) {
    n.endpoints = parse_endpoint_list(*v, kDistributedTrainerEndpoints);
    if (!n.ports_num) {
      // Paddle 1.8 splits the list evenly over the nodes when TRAINER_PORTS_NUM is unset.
      if (n.endpoints.size() % static_cast<std::size_t>(nodes) != 0) {
        throw EnvError(std::string(kDistributedTrainerEndpoints) + " lists " +
                       std::to_string(n.endpoints.size()) +
                       " endpoint(s), not the same number for " + "each of " + kPaddleTrainers +
                       "'s " + std::to_string(nodes) + " node(s) (set " + kTrainerPortsNum +
                       " to say how many each has)");
      }
      n.endpoints_per_node = static_cast<int>(n.endpoints.size()) / nodes;
    } else if (n.endpoints.size() != static_cast<std::size_t>(nodes) * *n.ports_num) {
      throw EnvError(std::string(kDistributedTrainerEndpoints) + " lists " +
                     std::to_string(n.endpoints.size()) + " endpoint(s), but " + kPaddleTrainers +
                     "'s " + std::to_string(nodes) + " node(s) x " + kTrainerPortsNum + "=" +
                     std::to_string(*n.ports_num) + " make " +
                     std::to_string(nodes * *n.ports_num));
    } else {
      n.endpoints_per_node = *n.ports_num;
    }
  }
  return n;
}

std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& what) {
  auto bad = [&](const std::string& why) {
    throw EnvError(what + "='" + text + "': " + why + " (expected e.g. 2(x3),1)");
  };
  if (text.empty()) bad("empty");
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    const std::size_t paren = item.find("(x");
    int repeat = 1;
    std::string count = item;
    if (paren != std::string::npos) {
      if (item.back() != ')') bad("unbalanced '('");
      count = item.substr(0, paren);
      repeat = parse_non_negative_int(item.substr(paren + 2, item.size() - paren - 3), what);
      if (repeat < 1) bad("a repeat count must be >= 1");
    }
    const int n = parse_non_negative_int(count, what);
    if (n < 1) bad("a node runs at least one task");
    if (out.size() + static_cast<std::size_t>(repeat) > kMaxHostlistHosts) bad("too many nodes");
    out.insert(out.end(), static_cast<std::size_t>(repeat), n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<WorkerContract> scheduler_contract(const EnvMap& env) {
  // mpirun inside a Slurm allocation runs its processes through Slurm too: Open MPI's variables
  // describe the ranks then.
  if (auto c = mpi_contract(env)) return c;
  return slurm_contract(env);
}

}  // namespace ddl::env
