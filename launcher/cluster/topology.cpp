#include "launcher/cluster/topology.h"

#include "env/host.h"
#include "env/scheduler.h"
#include "env/slurm.h"
#include "env/text.h"
#include "launcher/cluster/plan.h"

namespace ddl::launcher {
namespace {

std::uint16_t control_port(const LaunchOptions& o) {
  if (o.master_port) return static_cast<std::uint16_t>(*o.master_port);
  if (o.started_port) {
    if (*o.started_port <= 1) {
      throw PlanError("--started_port=" + std::to_string(*o.started_port) +
                      " leaves no port below it for the control store (started_port - 1); "
                      "give --master_port");
    }
    return static_cast<std::uint16_t>(*o.started_port - 1);
  }
  return static_cast<std::uint16_t>(kDefaultControlPort);
}

// PaddleCloud's nodes, when they describe this job (see topology.h).
std::optional<env::PaddleCloudNode> cloud_nodes(const LaunchOptions& o, const env::EnvMap& env) {
  if (o.ps_job() || o.etcd()) return std::nullopt;
  if (!o.use_paddlecloud && counted(o.nodes)) return std::nullopt;
  std::optional<env::PaddleCloudNode> cloud = env::paddle_cloud_node(env);
  if (o.use_paddlecloud && !cloud) {
    const auto trainers = env::lookup(env, env::kTrainersNum);
    if (!trainers || *trainers == "1") return std::nullopt;  // Paddle: one trainer, no cloud
    throw PlanError("--use_paddlecloud with " + std::string(env::kTrainersNum) + "=" + *trainers +
                    " needs PaddleCloud's variables, but " +
                    env::join(env::missing_paddle_cloud_variables(env), ",") + " not set");
  }
  if (!cloud || !cloud->in_use()) return std::nullopt;
  return cloud;
}

// A node list (Paddle's flags, PaddleCloud's, a rank mapping's, Slurm's): node 0 hosts the
// control store when there is one.
NodeTopology listed(NodeDescription how, std::string source, std::vector<std::string> hosts,
                    int node_rank, const std::string& local_host, const LaunchOptions& o) {
  NodeTopology t;
  t.how = std::move(how);
  t.source = std::move(source);
  t.hosts = std::move(hosts);
  t.nnodes = t.min_nnodes = static_cast<int>(t.hosts.size());
  t.node_rank = node_rank;
  t.local_host = local_host;
  t.control = env::Endpoint{t.hosts.front(), control_port(o)};
  return t;
}

// Counted nodes (torchrun's and Paddle 2.x's flags, an etcd cluster): --nnodes and --node_rank.
NodeTopology counted_nodes(NodeDescription how, std::string source, const LaunchOptions& o) {
  NodeTopology t;
  t.how = std::move(how);
  t.source = std::move(source);
  t.nnodes = o.nnodes.value_or(1);
  t.min_nnodes = o.min_nnodes.value_or(t.nnodes);
  t.node_rank = o.node_rank.value_or(0);
  t.auto_node_rank = o.auto_node_rank() && t.nnodes > 1;
  if (o.node_ip_given || t.nnodes == 1) t.local_host = o.node_ip;
  return t;
}

NodeTopology control_store_nodes(const nodes::ControlStore& how, const LaunchOptions& o) {
  NodeTopology t = counted_nodes(how, "--nnodes/--node_rank/--master_addr", o);
  std::uint16_t port = control_port(o);
  if (o.workers_master() && t.nnodes > 1) {
    // MASTER_PORT is rank 0's (its torch store binds it, as under torchrun): ours is next to it.
    if (o.workers_master_port() >= 65535) {
      throw PlanError(
          "--master_port=65535 leaves no port above it for launch's control store "
          "(master_port + 1 in a multi-node job)");
    }
    port = static_cast<std::uint16_t>(o.workers_master_port() + 1);
  }
  t.control = env::Endpoint{o.master_addr.value_or(kDefaultNodeIp), port};
  return t;
}

// Started by mpirun (`mpirun -np N launch ...`): every mpirun process is one node of the job,
// like torchrun's spelling with --nnodes=N --node_rank=<its MPI rank>.
NodeTopology mpi_nodes(const env::MpiProcess& mpi, const LaunchOptions& o, const env::EnvMap& env) {
  NodeTopology t;
  t.how = nodes::Scheduler{false};
  t.source = std::string("Open MPI (") + env::kOmpiSize + "=" + std::to_string(mpi.size) + ", " +
             env::kOmpiRank + "=" + std::to_string(mpi.rank) + ")";
  t.nnodes = t.min_nnodes = mpi.size;
  t.node_rank = mpi.rank;
  std::string host = kDefaultNodeIp;
  if (auto addr = env::lookup(env, env::kMasterAddr); addr && !addr->empty()) {
    host = env::check_host(*addr, env::kMasterAddr, *addr);
  } else if (!mpi.one_host()) {
    throw PlanError(t.source + " spans machines (" + env::kOmpiLocalSize + "=" +
                    std::to_string(mpi.local_size) + ") but " + env::kMasterAddr +
                    " is not set: pass node 0's address, e.g. mpirun -x " + env::kMasterAddr +
                    "=<host> (or give --master_addr)");
  }
  if (mpi.one_host()) t.local_host = kDefaultNodeIp;
  std::uint16_t port = control_port(o);
  if (!o.master_port && !o.started_port) {
    if (auto p = env::lookup(env, env::kMasterPort)) {
      port = env::parse_endpoint(host + ":" + *p, env::kMasterPort).port;
    }
  }
  t.control = env::Endpoint{host, port};
  return t;
}

// No node flag: a scheduler's processes or allocation, else this machine alone.
NodeTopology unflagged_nodes(const LaunchOptions& o, const env::EnvMap& env) {
  if (auto mpi = env::mpi_process(env); mpi && mpi->size > 1) return mpi_nodes(*mpi, o, env);
  if (auto slurm = env::slurm_nodes(env); slurm && slurm->hosts.size() > 1) {
    const std::string local = slurm->hosts[slurm->node_rank];
    return listed(nodes::Scheduler{true},
                  "Slurm" + (slurm->job_id.empty() ? std::string() : " job " + slurm->job_id) +
                      " (" + env::kSlurmJobNodelist + "=" + env::join(slurm->hosts, ",") + ", " +
                      env::kSlurmNodeId + "=" + std::to_string(slurm->node_rank) + ")",
                  slurm->hosts, slurm->node_rank, local, o);
  }
  NodeTopology t;
  t.source = "single node";
  t.hosts = o.cluster_node_ips;
  t.local_host = o.node_ip;
  t.control = env::Endpoint{o.node_ip, control_port(o)};
  return t;
}

template <typename... Cases>
struct Visitor : Cases... {
  using Cases::operator()...;
};
template <typename... Cases>
Visitor(Cases...) -> Visitor<Cases...>;

}  // namespace

NodeTopology resolve_topology(const LaunchOptions& o, const env::EnvMap& env) {
  // PaddleCloud's variables, where they apply, describe the nodes whatever else is given.
  if (auto cloud = cloud_nodes(o, env)) {
    const std::string source = "PaddleCloud (" + std::string(env::kPaddleTrainers) + "=" +
                               env::join(cloud->node_ips, ",") + ", " + env::kTrainerId + "=" +
                               std::to_string(cloud->node_rank) + ")";
    const std::vector<std::string> hosts = cloud->node_ips;
    const int rank = cloud->node_rank;
    return listed(nodes::PaddleCloud{std::move(*cloud)}, source, hosts, rank, hosts[rank], o);
  }
  return std::visit(
      Visitor{
          [&](const nodes::Etcd& etcd) {
            return counted_nodes(etcd, etcd.spelling.empty() ? "etcd" : etcd.spelling, o);
          },
          [&](const nodes::ControlStore& store) { return control_store_nodes(store, o); },
          [&](const nodes::NodeList& list) {
            return listed(list, "--cluster_node_ips", o.cluster_node_ips, o.node_index(), o.node_ip,
                          o);
          },
          [&](const nodes::RankMapped&) {
            return listed(nodes::RankMapped{}, "--rank_mapping_file", o.cluster_node_ips,
                          o.node_index(), o.node_ip, o);
          },
          [&](const auto&) { return unflagged_nodes(o, env); },
      },
      o.nodes);
}

}  // namespace ddl::launcher
