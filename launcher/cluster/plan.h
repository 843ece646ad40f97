// The cluster plan: which workers this node starts and what each is told.
//
// make_plan() is a pure function of a JobConfig (the job as the planner sees it, below) and a few
// facts about the machine (core count, the caller's environment, a way to pick free ports, the
// job's identity), so every rule here is testable without starting a process:
// - ranks are node-major: node k of `node_ips` owns ranks [k*n, (k+1)*n), n workers each;
// - with `started_port` P every node's endpoints are ip:P..P+n-1; without it a single node asks
//   the port picker for n free ports (rank 0's first when `master_port` is set);
// - a multi-node job passes the endpoints every node published through the control store
//   (launcher/coord/engine.h) as `cluster_endpoints`, with this node's `node_rank`: the plan then
//   takes the node list from them, whatever the config says;
// - each local worker gets the env::WorkerContract variables, plus OMP_NUM_THREADS and (trainers)
//   TORCH_NCCL_ASYNC_ERROR_HANDLING=1 when the caller has not set them, plus DDL_LOG_LEVEL when
//   `log_level_name` is set.
// A parameter-server job (config.ps_job()) plans servers and trainers (`local`: this node's
// servers first, then its trainers; a server's contract.rank is its server index):
// - with server_num=S, worker_num=W every node runs S servers and W trainers; node k owns
//   servers k*S..k*S+S-1 and trainers k*W..k*W+W-1. Its ports: started_port P gives the servers
//   P..P+S-1 and the trainers P+S..P+S+W-1; without it one node asks the picker for S+W ports,
//   and a multi-node job passes every node's S+W endpoints (servers first) as cluster_endpoints;
// - with explicit `servers`/`workers` lists this node runs exactly the entries whose host is
//   `node_ip`, with the indices of their positions in the lists (PlanError when there is none);
// - heter workers (`heter`, stages 2..): with counts every node runs each stage's count after its
//   trainers (its block is S servers, W trainers, then each stage's workers, with the ports in
//   that order); with lists the stages' endpoints are given like `servers`. A heter worker's index
//   is its position among all heter workers, stage by stage (each stage node-major).
// A job placed by a rank mapping file (`rank_mapping`, the fleet launcher's lazy launch) takes
// its nodes from the file and gives node k's i-th rank r (in file order) local rank i, device
// selected_gpus[i] (else i) and the i-th endpoint of node k (started_port+i, picked ports on a
// single node, or the i-th endpoint node k published); `endpoints` are in rank order all the
// same. Nodes may run different numbers of ranks; `nproc_per_node` is not read.
// The planner's errors name the command-line flags (--started_port, --node_ip, ...) that set the
// fields, as the user wrote them (the parsed command line is a JobConfig, job_config.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/contract.h"
#include "env/error.h"
#include "launcher/cluster/generation.h"
#include "launcher/cluster/job_config.h"
#include "launcher/options/rank_mapping.h"

namespace ddl::launcher {

// A job that cannot be turned into a plan (e.g. several nodes without --started_port).
// `launch` prints it as one line and exits 2.
class PlanError : public Error {
 public:
  explicit PlanError(const std::string& what) : Error(kExitUsage, "cannot plan the job", what) {}
};

// Returns `count` distinct ports that can be bound on `host` right now. May throw.
using PortPicker = std::function<std::vector<std::uint16_t>(const std::string& host, int count)>;

struct PlanInputs {
  int cores = 1;           // usable cores of this machine
  env::EnvMap caller_env;  // the launcher's own environment
  PortPicker pick_ports;   // used only when JobConfig::started_port is unset
  // The job's id; every worker gets DDL_JOB_ID = generation.job_id(job_id).
  std::string job_id;
  std::string job_secret;  // DDL_JOB_SECRET for every worker
  Generation generation;   // DDL_RESTART_COUNT: its index
  // Multi-node: every rank's endpoint in rank order (nnodes * nproc_per_node of them; in a
  // parameter-server job each node's S server endpoints then its W trainer endpoints), as agreed
  // through the control store, and this node's index. Unset: the plan comes from the config.
  std::optional<std::vector<env::Endpoint>> cluster_endpoints;
  int node_rank = 0;
  // Where each trainer's TORCHELASTIC_ERROR_FILE goes (DIR/error.<rank>.json); empty: not set.
  std::string error_file_dir;
};

// One worker of this node as the plan makes it (docs/ARCHITECTURE.md, "One worker's names"):
// the job turns it into a launcher/supervise/worker.h Worker.
struct PlannedWorker {
  env::WorkerContract contract;      // rank, local rank, endpoints, gpu, ...
  env::EnvMap env;                   // variables set on top of the caller's environment
  std::vector<std::string> removed;  // the caller's variables the process does not get
};

struct ClusterPlan {
  int world_size = 1;                           // trainers in the job
  std::vector<env::Endpoint> endpoints;         // all trainers, rank order
  std::vector<env::Endpoint> server_endpoints;  // all servers, index order; empty: collective
  std::vector<env::Endpoint> heter_endpoints;   // all heter workers, index (stage) order
  std::vector<env::HeterStage> heter_stages;    // stages 2.. with their endpoints
  // Every trainer's device, rank order (env::WorkerContract::world_device_ids).
  std::vector<int> world_device_ids;
  // This node's processes: servers (index order), then trainers (local rank order), then heter
  // workers (index order).
  std::vector<PlannedWorker> local;
  // OMP_NUM_THREADS the plan sets, when the caller had not set it (to be reported once).
  std::optional<int> omp_threads_defaulted;
};

// Throws PlanError (or env::EnvError for an inconsistent contract, a bug) when no plan exists.
ClusterPlan make_plan(const JobConfig& config, const PlanInputs& inputs);

// `env` with `overrides` applied (the plan wins over the caller).
env::EnvMap merge_env(env::EnvMap env, const env::EnvMap& overrides,
                      const std::vector<std::string>& removed = {});

// `bytes` random bytes from std::random_device as lowercase hex (job ids and secrets).
std::string random_hex(std::size_t bytes);

// The endpoints this node publishes to the other nodes of a multi-node job, given its address
// and (without started_port) `free_ports`: nproc_per_node trainers, or in a parameter-server
// job server_num servers, worker_num trainers, then each heter stage's workers. The number of ports
// it needs is local_endpoint_count(config).
int local_endpoint_count(const JobConfig& config);
std::vector<env::Endpoint> local_endpoints(const JobConfig& config, const std::string& host,
                                           const std::vector<std::uint16_t>& free_ports);

// Makes `wanted` the first of `ports` (rank 0's, or server 0's), swapping it out of a later place
// when the picker chose it too, so the ports stay distinct. `ports` must not be empty.
void put_port_first(std::vector<std::uint16_t>& ports, std::uint16_t wanted);

// Each local process's variables for --print_config: the first process of each role in full,
// the others by the variables that differ from it. The job secret is masked.
std::string describe_plan(const ClusterPlan& plan);

}  // namespace ddl::launcher
