// Which nodes form the job and which one this is: the launcher's three spellings mapped onto one
// description (a pure function of the options and the environment; launcher/coord/engine.h does the
// talking).
//
// - Paddle's: --cluster_node_ips=A,B,... (IPv4 addresses or host names) and --node_ip=B: node
//   rank = B's index; node 0 is A.
// - torchrun's: --nnodes=N --node_rank=K --master_addr=A [--node_ip=B]: node 0 is at A; the other
//   nodes' addresses are not given, so every node publishes its own endpoints through the control
//   store. This node's address is --node_ip, else the local address the kernel routes towards A
//   (found at start, see ports.h).
// - Slurm's (no node flag at all, and SLURM_JOB_NODELIST, SLURM_NNODES, SLURM_NODEID set; see
//   env/slurm.h): the expanded node list and SLURM_NODEID, as if given with Paddle's flags. A
//   one-node allocation is a single-node job like any other.
// - Open MPI's (no node flag, launch started by mpirun with 2+ processes; env/scheduler.h): each
//   mpirun process is a node, its rank OMPI_COMM_WORLD_RANK, as with torchrun's spelling; node 0
//   is at MASTER_ADDR (127.0.0.1 when every process is on this machine), the control port
//   --master_port, else MASTER_PORT, else the default below. Checked before Slurm's: mpirun
//   inside an allocation starts its processes through Slurm.
// - PaddleCloud's (env/scheduler.h: PADDLE_TRAINERS, POD_IP, PADDLE_TRAINER_ID, used when
//   PADDLE_TRAINERS_NUM is not 1): with --use_paddlecloud (Paddle 1.8), or without it when all
//   three are set and no torchrun or Paddle 2.x node flag is given (the fleet launcher's
//   switch); collective jobs only. Checked first: --cluster_node_ips/--node_ip given alongside
//   are ignored, as Paddle ignores them. The node list is PADDLE_TRAINERS, the node rank
//   PADDLE_TRAINER_ID.
// Paddle's node lists (--cluster_node_ips, a rank mapping and PaddleCloud) are `paddle_static`:
// without a secret every node computes the endpoints itself (launcher/cluster/static_job.h).
// --nnodes=MIN:MAX (torchrun's elastic spelling) gives nnodes = MAX and min_nnodes = MIN; each
// node still names itself with --node_rank (< MAX), and node 0 hosts the control store.
// - An etcd cluster (--rdzv_backend=etcd|etcd-v2 --rdzv_endpoint=H:P,..., or Paddle 2.x's
//   --master=etcd://H:P,...): `etcd` holds its endpoints and no node hosts a control store
//   (`control` is unset); --nnodes and --node_rank as in torchrun's spelling, the ranks handed out
//   by etcd when --node_rank is not given. It combines with no other spelling: the node flags,
//   Slurm, MPI and PaddleCloud are not consulted.
// The command line's case (LaunchOptions::nodes) is decided by parse_options; resolve_topology
// decides, once, whether the environment describes the nodes instead: PaddleCloud's variables
// (as above), then, for a command line without node flags, Open MPI's and Slurm's.
// With more than one node and no etcd, node 0's launcher hosts the control store at
// <node 0's address>:<control port>, the port being --master_port, else --started_port - 1, else
// kDefaultControlPort (29500).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/scheduler.h"
#include "launcher/options/options.h"

namespace ddl::launcher {

// The nodes as this launcher runs them: how they are described (the case decided, with its own
// data), and what every case comes down to.
struct NodeTopology {
  NodeDescription how = nodes::OneNode{};
  int nnodes = 1;      // elastic: the most nodes (MAX of --nnodes=MIN:MAX)
  int min_nnodes = 1;  // the fewest nodes the job runs on (nnodes unless elastic)
  int node_rank = 0;
  // No node rank given where the spelling lets node 0 or etcd hand them out (LaunchOptions::
  // auto_node_rank): node_rank is known once the control plane is up (launcher/coord/engine.h,
  // kAutoNodeRank).
  bool auto_node_rank = false;
  std::vector<std::string> hosts;  // every node's address, when given (not when counted)
  // This node's address in its workers' endpoints; unset: find the route towards control.host.
  std::optional<std::string> local_host;
  env::Endpoint control;  // node 0's control store; meaningful when nnodes > 1 without etcd
  std::string source;     // how the nodes were given, for messages ("--cluster_node_ips", ...)

  bool multi_node() const { return nnodes > 1; }
  bool elastic() const { return min_nnodes < nnodes; }
  const nodes::Etcd* etcd() const { return etcd_of(how); }
  const env::PaddleCloudNode* cloud() const {
    const auto* c = std::get_if<nodes::PaddleCloud>(&how);
    return c ? &c->cloud : nullptr;
  }
  bool paddle_static() const { return launcher::paddle_static(how); }
};

// Throws PlanError (launcher/cluster/plan.h) for a control port out of range or --use_paddlecloud
// without PaddleCloud's variables, env::EnvError for a malformed Slurm or PaddleCloud environment.
NodeTopology resolve_topology(const LaunchOptions& options, const env::EnvMap& env);

}  // namespace ddl::launcher
