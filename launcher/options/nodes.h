// How a job's nodes are described: one type, with one case per way a job can be described
// (docs/multi-node.md). The command line decides among its own spellings once, in
// parse_options (launcher/options/options.h); a job whose command line names no node list may
// then be described by its environment instead (PaddleCloud's or a scheduler's variables), which
// resolve_topology (launcher/cluster/topology.h) decides, once. Nothing else asks which spelling
// was used: everything downstream visits this type or asks it one of the questions below.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "env/contract.h"
#include "env/scheduler.h"

namespace ddl::launcher::nodes {

// No node flag: this machine alone (--standalone included).
struct OneNode {};
// Paddle's static node list, --cluster_node_ips/--ips (or --node_ip alone): node rank = this
// node's index; every node computes every endpoint itself when there is no secret.
struct NodeList {
  bool hosts_given = true;  // false: only --node_ip (or --local_addr) was given
};
// --rank_mapping_file with --enable_auto_mapping: a node list whose nodes run the ranks the file
// names (LaunchOptions::rank_mapping).
struct RankMapped {};
// PaddleCloud's variables (PADDLE_TRAINERS, POD_IP, PADDLE_TRAINER_ID): a static node list.
struct PaddleCloud {
  env::PaddleCloudNode cloud;
};
// torchrun's --nnodes/--node_rank/--master_addr, its c10d --rdzv_endpoint, Paddle 2.x's --master,
// or Open MPI's processes: node 0 hosts the control store at the master's address.
struct ControlStore {
  // torchrun's static rendezvous (--master_addr, not c10d): MASTER_ADDR:MASTER_PORT is rank 0's
  // store, as given (LaunchOptions::workers_master()).
  bool static_master = false;
  // Without --node_rank, node 0 hands the node ranks out in the order the launchers reach it
  // (c10d, Paddle 2.x's --master); otherwise a missing --node_rank is node 0.
  bool ranks_from_node0 = false;
};
// An etcd cluster is the control plane (--rdzv_backend=etcd|etcd-v2 --rdzv_endpoint=..., or
// Paddle 2.x's --master=etcd://...); no node hosts a store; etcd hands out missing node ranks.
struct Etcd {
  std::vector<env::Endpoint> endpoints;  // its members' client endpoints, tried in order
  std::string spelling;  // for messages: "--rdzv_backend=etcd", "--rdzv_backend=etcd-v2",
                         // "--master=etcd://"
};
// A scheduler's variables: Slurm's allocation (every host known, node 0 hosts the store) or
// Open MPI's processes (node 0 at MASTER_ADDR, the others publish their addresses).
struct Scheduler {
  bool hosts_known = true;  // Slurm: true; Open MPI: false
};

}  // namespace ddl::launcher::nodes

namespace ddl::launcher {

using NodeDescription =
    std::variant<nodes::OneNode, nodes::NodeList, nodes::RankMapped, nodes::PaddleCloud,
                 nodes::ControlStore, nodes::Etcd, nodes::Scheduler>;

template <typename Case>
bool described_as(const NodeDescription& d) {
  return std::holds_alternative<Case>(d);
}
// The etcd cluster, when it is the control plane; else nullptr.
inline const nodes::Etcd* etcd_of(const NodeDescription& d) { return std::get_if<nodes::Etcd>(&d); }
// Paddle's static spellings: the nodes are listed, and without a secret each node computes every
// endpoint (launcher/cluster/static_job.h) instead of talking to the others.
inline bool paddle_static(const NodeDescription& d) {
  return described_as<nodes::NodeList>(d) || described_as<nodes::RankMapped>(d) ||
         described_as<nodes::PaddleCloud>(d);
}
// The command line counts the nodes (torchrun's and Paddle 2.x's spellings) instead of listing
// them.
inline bool counted(const NodeDescription& d) {
  return described_as<nodes::ControlStore>(d) || described_as<nodes::Etcd>(d);
}

}  // namespace ddl::launcher
