// Worker contracts written by a scheduler that starts every rank itself, without `launch`:
// Slurm's `srun -n4 train_mnist` and Open MPI's `mpirun -np 2 train_mnist`.
//
// Each rank then knows its rank, the world size and its place on its node from the scheduler's
// variables, and finds the store where torchrun-on-Slurm recipes and Horovod users put it:
// MASTER_ADDR:MASTER_PORT when set, else a default said below. Like env/contract.h, this is the
// one place that knows these names; values are read from an EnvMap snapshot.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"

namespace ddl::env {

// Slurm task variables (srun sets them in every task of a step).
inline constexpr const char* kSlurmProcId = "SLURM_PROCID";    // global task rank
inline constexpr const char* kSlurmNtasks = "SLURM_NTASKS";    // tasks in the step
inline constexpr const char* kSlurmLocalId = "SLURM_LOCALID";  // task index on its node
inline constexpr const char* kSlurmStepId = "SLURM_STEP_ID";   // set in srun steps only
inline constexpr const char* kSlurmStepNodelist = "SLURM_STEP_NODELIST";
inline constexpr const char* kSlurmStepTasksPerNode = "SLURM_STEP_TASKS_PER_NODE";  // "2(x3),1"
inline constexpr const char* kSlurmdNodename = "SLURMD_NODENAME";  // this task's node
inline constexpr const char* kSlurmRestartCount = "SLURM_RESTART_COUNT";
// Open MPI's (mpirun sets them in every process).
inline constexpr const char* kOmpiRank = "OMPI_COMM_WORLD_RANK";
inline constexpr const char* kOmpiSize = "OMPI_COMM_WORLD_SIZE";
inline constexpr const char* kOmpiLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
inline constexpr const char* kOmpiLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
inline constexpr const char* kOmpiJobId = "OMPI_MCA_ess_base_jobid";

// Without MASTER_PORT: Slurm steps use kSlurmPortBase + SLURM_JOB_ID % kSlurmPortSpan (two jobs
// sharing a node then rarely collide), Open MPI jobs torchrun's default port.
inline constexpr int kSlurmPortBase = 20000;
inline constexpr int kSlurmPortSpan = 10000;
inline constexpr int kMpiDefaultPort = 29500;

// One process of an Open MPI job, from OMPI_COMM_WORLD_* (mpirun sets them in every process).
struct MpiProcess {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;  // processes of the job on this machine
  std::string job_id;  // OMPI_MCA_ess_base_jobid; empty when unset

  bool one_host() const { return local_size == size; }
};

// std::nullopt without OMPI_COMM_WORLD_RANK; a partial or malformed set throws EnvError naming
// the variable. `launch` started by mpirun uses it for its node rank (launcher/cluster/topology.h).
std::optional<MpiProcess> mpi_process(const EnvMap& env);

// Expands Slurm's tasks-per-node syntax: "2(x3),1" -> {2, 2, 2, 1}. Throws EnvError quoting
// `text` and naming `what`.
std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& what);

// The contract of a rank started by a scheduler, or std::nullopt when none started it:
// - Open MPI: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE. The store is on MASTER_ADDR (on
//   one node, 127.0.0.1 when unset; across nodes it must be set: `mpirun -x MASTER_ADDR=...`).
// - else Slurm, in an srun step (SLURM_STEP_ID set; a batch script's own shell is not a rank):
//   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, this node's entry of SLURM_STEP_TASKS_PER_NODE
//   (by SLURMD_NODENAME's position in SLURM_STEP_NODELIST). The store is on MASTER_ADDR, else the
//   step's first node; this rank's host is SLURMD_NODENAME.
// The job id is "slurm-<job>.<step>" or "mpi-<jobid>", the secret DDL_JOB_SECRET (required when
// the ranks span machines, as `launch` requires it across nodes),
// the rendezvous timeout DDL_RENDEZVOUS_TIMEOUT_MS when set. A partial or malformed set of
// variables throws EnvError naming the variable and its value.
std::optional<WorkerContract> scheduler_contract(const EnvMap& env);

}  // namespace ddl::env
