// A static multi-node job: Paddle's spellings of the node list (--cluster_node_ips with
// --node_ip, PaddleCloud's variables) run without DDL_JOB_SECRET as Paddle runs them. No control
// store: every node computes every endpoint and the job id by itself, from what every node is
// given alike, so the nodes agree without talking.
//
// The endpoints, node-major (node k's processes in its block, in a parameter-server job its
// servers then its trainers, as launcher/cluster/plan.h orders them):
// - --cluster_node_ips: node k's processes at ip_k:P, P+1, ...; P = --started_port, else
//   FLAGS_START_PORT (both already in JobConfig::started_port), else kPaddleStaticPort (Paddle
//   1.8's utils.get_cluster_from_args and the fleet launcher's, for several nodes).
// - PaddleCloud (env/scheduler.h, python/paddle/distributed{,/fleet}/cloud_utils.py): node k's
//   first nproc entries of its TRAINER_PORTS_NUM-long block of DISTRIBUTED_TRAINER_ENDPOINTS
//   when that is set (fewer than nproc is an error, as Paddle asserts); else node k's IP at P,
//   P+1, ... with P = PADDLE_PORT when there are several nodes and TRAINER_PORTS_NUM (set) >= nproc,
//   else --started_port / FLAGS_START_PORT, else kPaddleCloudPort.
#pragma once

#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/cluster/plan.h"
#include "launcher/cluster/topology.h"

namespace ddl::launcher {

inline constexpr int kPaddleStaticPort = 6070;  // Paddle's first port of a node list
inline constexpr int kPaddleCloudPort = 6170;   // PaddleCloud's, without PADDLE_PORT

// Every endpoint of the static job `topology` describes (topology.paddle_static). Throws
// PlanError for ports beyond 65535 or a DISTRIBUTED_TRAINER_ENDPOINTS too short for the workers.
std::vector<env::Endpoint> static_endpoints(const JobConfig& config, const NodeTopology& topology);

// "static-" and 16 hex digits of a 64-bit FNV-1a hash of `description` (what every node of the
// job is given alike: endpoints, counts, program): the same on every node, different for jobs
// that differ in any of it.
std::string derived_job_id(const std::string& description);

}  // namespace ddl::launcher
