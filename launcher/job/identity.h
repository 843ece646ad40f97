// Which identity and authentication a job gets: the one decision of "does this job need
// DDL_JOB_SECRET, and what does it run without one" (docs/multi-node.md, "Job id and secret").
// The rule: never refuse a job that the launcher whose flags were used would run.
//
// - One node: the caller's DDL_JOB_SECRET, else a random one (nothing outside the node joins).
// - Several nodes with DDL_JOB_SECRET: node 0's control store, authenticated by it, and the
//   workers' stores by it too (cross-node fail-fast, job-wide restarts, elastic membership).
// - Paddle's static spellings without it (--cluster_node_ips, PaddleCloud): as Paddle runs them,
//   no control store; every node computes the endpoints and the job id itself
//   (launcher/cluster/static_job.h); the workers' store admits any client of the job id.
//   --servers/--workers across hosts never had a control store: static whatever the secret.
// - Every other multi-node spelling without it (torchrun's --nnodes/--master_addr or
//   --rdzv_endpoint, Paddle 2.x's --master, mpirun, Slurm): as torchrun runs them, the control
//   store and the workers' stores with an empty secret, so anyone who reaches their ports can join.
// - --require_secret, or DDL_REQUIRE_SECRET=1: a multi-node job without the secret is refused.
// - Inside a Slurm job without it (and without etcd): munge credentials admit the launchers to
//   node 0's control store (Slurm's munged shares one key across the cluster), and node 0's
//   random secret reaches the other nodes' workers through that store
//   (launcher/coord/munge_auth.h). This satisfies --require_secret too.
#pragma once

#include <optional>
#include <string>

#include "env/contract.h"

namespace ddl::launcher {

enum class IdentityMode {
  kSingleNode,        // one node; its own secret
  kControlStore,      // several nodes, DDL_JOB_SECRET: node 0's authenticated control store
  kOpenControlStore,  // several nodes, no secret: the same, unauthenticated (torchrun's way)
  kStatic,            // Paddle's static spellings: no control store; the caller's secret or none
  kMunge,  // several nodes under Slurm, no secret: munge admits the launchers to the control
           // store, node 0's random secret (this one, on node 0) reaches the others through it
};

// What the decision reads: the job's shape and the caller's wishes.
struct IdentityRequest {
  int nnodes = 1;              // nodes (or, with --servers/--workers, hosts) of the job
  bool paddle_static = false;  // the node list is Paddle's (NodeTopology::paddle_static)
  bool listed_hosts = false;   // --servers/--workers name hosts: no node hosts a control store
  std::optional<std::string> caller_secret;  // DDL_JOB_SECRET, when set and not empty
  bool require_secret = false;               // --require_secret or DDL_REQUIRE_SECRET
  std::string source;                        // how the nodes were given, for the refusal
  std::optional<std::string> slurm_job;      // SLURM_JOB_ID, when launch runs in a Slurm job
  // The control plane is an etcd cluster: no node 0 store decodes munge credentials, so Slurm
  // does not make it a munge job.
  bool etcd = false;
};

struct Identity {
  IdentityMode mode = IdentityMode::kSingleNode;
  std::string secret;  // what the workers' store (and the control store) demand; may be empty
};

// Throws PlanError (exit 2) for a multi-node job without a secret when one is required.
Identity choose_identity(const IdentityRequest& request);

// True when DDL_REQUIRE_SECRET in `env` is 1, true or yes (any case). Throws env::EnvError for
// any other non-empty value.
bool secret_required_by(const env::EnvMap& env);

// The one line a node of a job without a secret prints: what runs unauthenticated, what a
// secret adds and how to set it. Empty for the modes with a secret or a single node.
std::string without_secret_notice(IdentityMode mode, const std::string& control_endpoint);

}  // namespace ddl::launcher
