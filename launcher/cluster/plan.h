// The cluster plan: which workers this node starts and what each is told.
//
// make_plan() is a pure function of a JobConfig (the job as the planner sees it, below) and a few
// facts about the machine (core count, the caller's environment, a way to pick free ports, the
// job's identity), so every rule here is testable without starting a process:
// - ranks are node-major: node k of `node_ips` owns ranks [k*n, (k+1)*n), n workers each;
// - with `started_port` P every node's endpoints are ip:P..P+n-1; without it a single node asks
//   the port picker for n free ports (rank 0's first when `rank0_port` is set);
// - a multi-node job passes the endpoints every node published through the control store
//   (launcher/coord/engine.h) as `cluster_endpoints`, with this node's `node_rank`: the plan then
//   takes the node list from them, whatever the config says;
// - each local worker gets the env::WorkerContract variables, plus OMP_NUM_THREADS and (trainers)
//   TORCH_NCCL_ASYNC_ERROR_HANDLING=1 when the caller has not set them, plus DDL_LOG_LEVEL when
//   `log_level` is set.
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
// fields, as the user wrote them; launcher/job/job_config.h maps the flags onto the fields.
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
#include "launcher/options/rank_mapping.h"

namespace ddl::launcher {

// A job that cannot be turned into a plan (e.g. several nodes without --started_port).
// `launch` prints it as one line and exits 2.
class PlanError : public Error {
 public:
  explicit PlanError(const std::string& what) : Error(kExitUsage, "cannot plan the job", what) {}
};

// The job as the planner sees it: exactly what make_plan() and local_endpoints() read, as plain
// values without the command line's spellings or defaults. `launch` builds it from the parsed
// command line with job_config() (launcher/job/job_config.h); tests build it directly. The
// defaults are a one-trainer collective job on a single node at 127.0.0.1.
struct JobConfig {
  // Every node's address (IPv4 or host name), node rank order. When the nodes publish their
  // endpoints through the control store (PlanInputs::cluster_endpoints) the plan ignores it.
  std::vector<std::string> node_ips{"127.0.0.1"};
  // This node's address: one of node_ips, or with explicit `servers`/`workers` the host of this
  // node's entries.
  std::string node_ip = "127.0.0.1";
  int nproc_per_node = 1;          // trainers per node in a collective job
  std::vector<int> selected_gpus;  // each local trainer's GPU, local rank order; empty: none
  // Every node's first port: its processes take started_port, started_port+1, ...; unset: a
  // single node asks the port picker for free ones.
  std::optional<int> started_port;
  // A single collective node that picks its ports (no started_port): the port rank 0 must have
  // (so MASTER_PORT is what the caller asked for); the picked ports stay distinct from it.
  // Unset: rank 0 takes the picker's first port.
  std::optional<int> rank0_port;

  // A parameter-server job: server_num > 0. Either counts per node (every node runs server_num
  // servers and worker_num trainers) or explicit endpoint lists (`servers` and `workers`, both
  // given; this node runs the entries whose host is node_ip).
  int server_num = 0;  // servers per node (or the length of `servers`); 0: a collective job
  int worker_num = 0;  // trainers per node (or the length of `workers`)
  std::vector<env::Endpoint> servers;  // every server, index order; empty: counts
  std::vector<env::Endpoint> workers;  // every trainer, rank order; given exactly with `servers`
  // Heter workers, stages 2.. in order: each stage's device type and either its count per node
  // (counts) or its endpoints (with `servers`/`workers` lists). Empty: no heter workers.
  struct HeterStage {
    std::string device;
    int count = 0;                          // per node (counts); with lists: endpoints.size()
    std::vector<env::Endpoint> endpoints;  // with lists: the stage's workers
  };
  std::vector<HeterStage> heter;

  // What every worker is told besides its place (env::WorkerContract).
  std::optional<std::string> run_id;         // TORCHELASTIC_RUN_ID; unset: PlanInputs::job_id
  std::string role_name = "default";         // ROLE_NAME
  std::optional<std::string> paddle_job_id;  // PADDLE_JOB_ID; unset: "default"
  std::optional<std::string> log_level;      // DDL_LOG_LEVEL (a level name); unset: not set
  // DDL_RENDEZVOUS_TIMEOUT_MS; unset: the contract's default.
  std::optional<std::chrono::milliseconds> rendezvous_timeout;
  int max_restarts = 0;  // TORCHELASTIC_MAX_RESTARTS
  // A collective job's trainers without a GPU get FLAGS_selected_gpus="" (an empty device list,
  // as Paddle 1.8 and the fleet launcher give CPU workers); false: not set (Paddle 2.x, torchrun).
  bool empty_gpus_on_cpu = false;
  // PADDLE_DISTRI_BACKEND for a collective job's trainers (--backend); unset: "gloo" for those
  // without a GPU only (env::to_env).
  std::optional<std::string> distri_backend;
  // Set: the nodes and each node's ranks come from it (see above); node_ips must be its hosts.
  std::optional<RankMapping> rank_mapping;

  // This node's index in node_ips (node_ips.size() when it is not there).
  int node_index() const;
  // True for a parameter-server job.
  bool ps_job() const { return server_num > 0; }
  // True when `servers`/`workers` list the endpoints.
  bool explicit_endpoints() const { return !servers.empty(); }
  // Heter workers of one node with counts (the sum of the stages' counts).
  int heter_per_node() const;
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
  env::WorkerContract contract;  // rank, local rank, endpoints, gpu, ...
  env::EnvMap env;               // variables set on top of the caller's environment
  std::vector<std::string> removed;  // the caller's variables the process does not get
};

struct ClusterPlan {
  int world_size = 1;                    // trainers in the job
  std::vector<env::Endpoint> endpoints;  // all trainers, rank order
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
// job server_num servers, worker_num trainers, then each heter stage's workers. The number of ports it needs is
// local_endpoint_count(config).
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
