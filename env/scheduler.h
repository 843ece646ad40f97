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

// PaddleCloud's node variables (Paddle 1.8 launch.py --use_paddlecloud, and the fleet launcher's
// automatic switch, python/paddle/distributed{,/fleet}/cloud_utils.py): the platform sets them in
// every node's pod; `launch` then starts this node's trainers without talking to the others.
inline constexpr const char* kPaddleTrainers = "PADDLE_TRAINERS";       // node IPs, node order
inline constexpr const char* kTrainerPortsNum = "TRAINER_PORTS_NUM";    // ports per node
inline constexpr const char* kDistributedTrainerEndpoints = "DISTRIBUTED_TRAINER_ENDPOINTS";
// Also read: POD_IP (this node, kPodIp), PADDLE_TRAINER_ID (node rank, kTrainerId),
// PADDLE_TRAINERS_NUM (kTrainersNum: Paddle uses the cloud's nodes only when it is not 1, its
// default) and PADDLE_PORT (kServerPort: the nodes' first port).

// A node of a PaddleCloud job, as the platform describes it.
struct PaddleCloudNode {
  std::vector<std::string> node_ips;  // PADDLE_TRAINERS
  std::string pod_ip;                 // POD_IP
  int node_rank = 0;                  // PADDLE_TRAINER_ID
  std::optional<int> ports_num;       // TRAINER_PORTS_NUM
  int trainers_num = 1;               // PADDLE_TRAINERS_NUM (1 when unset, as Paddle reads it)
  std::optional<int> paddle_port;     // PADDLE_PORT
  // DISTRIBUTED_TRAINER_ENDPOINTS (paddlecloud >= 1.8.4): every node's TRAINER_PORTS_NUM
  // endpoints, node after node; empty when unset.
  std::vector<Endpoint> endpoints;
  // The length of each node's block of `endpoints`: TRAINER_PORTS_NUM, or when it is unset the
  // list split evenly over the nodes (as Paddle 1.8 does); 0 without endpoints.
  int endpoints_per_node = 0;

  // Paddle takes the job from these variables only when PADDLE_TRAINERS_NUM is not 1.
  bool in_use() const { return trainers_num != 1; }
};

// std::nullopt unless PADDLE_TRAINERS, POD_IP and PADDLE_TRAINER_ID are all set (the launchers'
// test for PaddleCloud; Paddle's own cloud tests leave TRAINER_PORTS_NUM unset in their abort
// case, and later fleet launchers ask for it too: it is read when set). Malformed values, a node
// rank outside the node list, DISTRIBUTED_TRAINER_ENDPOINTS with a length other than
// nodes x TRAINER_PORTS_NUM (or, without it, not a multiple of the nodes) throw EnvError naming
// the variable.
std::optional<PaddleCloudNode> paddle_cloud_node(const EnvMap& env);

// The variables paddle_cloud_node() needs that `env` lacks (empty when none), for the message
// of --use_paddlecloud without them.
std::vector<std::string> missing_paddle_cloud_variables(const EnvMap& env);

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
