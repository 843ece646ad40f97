// Reading a Slurm allocation from the environment (srun sets these in every task).
//
// Inside `srun launch ...` with one task per node, each task's SLURM_JOB_NODELIST names every node
// of the allocation in Slurm's hostlist syntax, SLURM_NNODES counts them and SLURM_NODEID is this
// node's index; `launch` turns that into its node list and node rank when no node flags are given
// (launcher/cluster/topology.h). Like env/contract.h, this is the one place that knows these names; values
// are read from an EnvMap snapshot, never with getenv.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "env/contract.h"

namespace ddl::env {

inline constexpr const char* kSlurmJobNodelist = "SLURM_JOB_NODELIST";  // e.g. "node[01-04]"
inline constexpr const char* kSlurmNnodes = "SLURM_NNODES";              // nodes in the allocation
inline constexpr const char* kSlurmNodeId = "SLURM_NODEID";              // this node, 0-based
inline constexpr const char* kSlurmNtasksPerNode = "SLURM_NTASKS_PER_NODE";  // srun tasks per node
inline constexpr const char* kSlurmJobId = "SLURM_JOB_ID";  // messages; env/scheduler.h: ids, ports
// Slurm's configuration file (srun passes it on); unset: kDefaultSlurmConf. Its AuthInfo names
// the munged socket Slurm uses (launcher/coord/munge_auth.h).
inline constexpr const char* kSlurmConf = "SLURM_CONF";
inline constexpr const char* kDefaultSlurmConf = "/etc/slurm/slurm.conf";

// Longest node list expand_hostlist() produces (a typo such as "n[0-99999999]" must not eat memory).
inline constexpr std::size_t kMaxHostlistHosts = 65'536;

// Expands Slurm's hostlist syntax into host names, in order:
//   "node[01-04]"        -> node01 node02 node03 node04   (the lower bound's width is kept: zeros)
//   "a[1,3-5]b"          -> a1b a3b a4b a5b
//   "gpu[1-2],cpu7,x[9-10]" -> gpu1 gpu2 cpu7 x9 x10      (comma-separated groups; commas inside
//                                                            brackets belong to the bracket)
//   "r[1-2]n[1-2]"       -> r1n1 r1n2 r2n1 r2n2           (several brackets: every combination)
//   "plain"              -> plain
// Throws EnvError quoting `text` (and naming `what`, e.g. the variable) for an empty list or
// group, unbalanced brackets, a range that is not digits or runs backwards, or more than
// kMaxHostlistHosts hosts.
std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what);

// The part of a Slurm allocation `launch` uses.
struct SlurmNodes {
  std::vector<std::string> hosts;  // every node, in Slurm's order (= node rank order)
  int node_rank = 0;               // SLURM_NODEID
  std::string job_id;              // SLURM_JOB_ID, empty if unset (messages only)
};

// The allocation described by `env`:
// - std::nullopt unless SLURM_JOB_NODELIST, SLURM_NNODES and SLURM_NODEID are all set;
// - throws EnvError naming the variable and its value when one is malformed, when SLURM_NNODES
//   differs from the number of hosts in the list, when SLURM_NODEID >= SLURM_NNODES, or when
//   SLURM_NTASKS_PER_NODE is set and not 1 (`launch` starts the node's workers itself, so it must
//   run once per node: `srun --ntasks-per-node=1 launch ...`).
std::optional<SlurmNodes> slurm_nodes(const EnvMap& env);

}  // namespace ddl::env
