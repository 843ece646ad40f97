// The job as the planner sees it (launcher/cluster/plan.h): exactly what make_plan() and
// local_endpoints() read, as plain values. The parsed command line is one
// (launcher/options/options.h: LaunchOptions extends it), so every value the planner reads is
// written once, by parse_options, under the flag's own name; tests build it directly. The
// defaults are a one-trainer collective job on a single node at 127.0.0.1.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/options/rank_mapping.h"

namespace ddl::launcher {

struct JobConfig {
  // --cluster_node_ips / --ips: every node's address (IPv4 or host name), node rank order. When
  // the nodes publish their endpoints through the control store (PlanInputs::cluster_endpoints)
  // the plan ignores it.
  std::vector<std::string> cluster_node_ips{"127.0.0.1"};
  // --node_ip: this node's address: one of cluster_node_ips, or with explicit
  // `servers`/`workers` the host of this node's entries.
  std::string node_ip = "127.0.0.1";
  int nproc_per_node = 1;          // trainers per node in a collective job
  std::vector<int> selected_gpus;  // each local trainer's GPU, local rank order; empty: none
  // --started_port: every node's first port: its processes take started_port, started_port+1,
  // ...; unset: a single node asks the port picker for free ones.
  std::optional<int> started_port;
  // --master_port. To the planner: on a single collective node that picks its ports (no
  // started_port), the port rank 0 must have (so MASTER_PORT is what the caller asked for); the
  // picked ports stay distinct from it. Unset: rank 0 takes the picker's first port.
  std::optional<int> master_port;

  // A parameter-server job: server_num > 0. Either counts per node (every node runs server_num
  // servers and worker_num trainers) or explicit endpoint lists (`servers` and `workers`, both
  // given; this node runs the entries whose host is node_ip).
  int server_num = 0;  // servers per node (or the length of `servers`); 0: a collective job
  int worker_num = 0;  // trainers per node (or the length of `workers`)
  std::vector<env::Endpoint> servers;  // every server, index order; empty: counts
  std::vector<env::Endpoint> workers;  // every trainer, rank order; given exactly with `servers`
  // Heter workers (the fleet launcher's --heter_worker_num, --heter_workers, --heter_devices),
  // stages 2.. in order: each stage's device type and either its count per node (counts) or its
  // endpoints (with `servers`/`workers` lists). Empty: no heter workers.
  struct HeterStage {
    std::string device = "gpu";            // --heter_devices' entry for the stage
    int count = 0;                         // per node (counts); with lists: endpoints.size()
    std::vector<env::Endpoint> endpoints;  // with lists: the stage's workers
  };
  std::vector<HeterStage> heter;

  // What every worker is told besides its place (env::WorkerContract).
  std::optional<std::string> rdzv_id;  // --rdzv_id: TORCHELASTIC_RUN_ID; unset: the job id
  std::string role = "default";        // --role: ROLE_NAME
  std::optional<std::string> job_id;   // --job_id: PADDLE_JOB_ID; unset: "default"
  // --log_level as a level name: the workers' DDL_LOG_LEVEL; unset: not set.
  std::optional<std::string> log_level_name;
  // --rendezvous_timeout: DDL_RENDEZVOUS_TIMEOUT_MS; unset: the contract's default.
  std::optional<std::chrono::milliseconds> rendezvous_timeout;
  int max_restarts = 0;  // --max_restarts: TORCHELASTIC_MAX_RESTARTS
  // A collective job's trainers without a GPU get FLAGS_selected_gpus="" (an empty device list,
  // as Paddle 1.8 and the fleet launcher give CPU workers; parse_options sets it for those and
  // launch's own flags); false: not set (Paddle 2.x, torchrun).
  bool empty_gpus_on_cpu = false;
  // PADDLE_DISTRI_BACKEND for a collective job's trainers (--backend made concrete); unset:
  // "gloo" for those without a GPU only (env::to_env).
  std::optional<std::string> distri_backend;
  // A parameter-server job's Gloo rendezvous, as Paddle's launchers hand it to every process:
  // PADDLE_WITH_GLOO=with_gloo, PADDLE_GLOO_RENDEZVOUS=3 (HTTP), PADDLE_GLOO_HTTP_ENDPOINT the
  // first server's host at gloo_port, PADDLE_GLOO_FS_PATH a fresh path per job and node.
  int with_gloo = 1;     // --with_gloo
  int gloo_port = 6767;  // --gloo_port / --http_port
  // Paddle's fleet elastic mode (launcher/options/fleet_elastic.h): trainers also get
  // PADDLE_TRAINERS (the members' hosts, node order) and DISTRIBUTED_TRAINER_ENDPOINTS (every
  // trainer's endpoint), as its manager exports them before each start.
  bool paddle_elastic = false;
  // --rank_mapping_file: set, the nodes and each node's ranks come from it (plan.h);
  // cluster_node_ips are then its hosts.
  std::optional<RankMapping> rank_mapping;

  // This node's index in cluster_node_ips (cluster_node_ips.size() when it is not there).
  int node_index() const {
    const auto it = std::find(cluster_node_ips.begin(), cluster_node_ips.end(), node_ip);
    return static_cast<int>(it - cluster_node_ips.begin());
  }
  // True for a parameter-server job.
  bool ps_job() const { return server_num > 0; }
  // True when `servers`/`workers` list the endpoints.
  bool explicit_endpoints() const { return !servers.empty(); }
  // Heter workers of one node with counts (the sum of the stages' counts).
  int heter_per_node() const {
    int total = 0;
    for (const HeterStage& stage : heter) total += stage.count;
    return total;
  }
};

}  // namespace ddl::launcher
