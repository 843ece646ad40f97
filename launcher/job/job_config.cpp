#include "launcher/job/job_config.h"

namespace ddl::launcher {

JobConfig job_config(const LaunchOptions& options) {
  JobConfig config;
  config.node_ips = options.cluster_node_ips;
  config.node_ip = options.node_ip;
  config.nproc_per_node = options.nproc_per_node;
  config.selected_gpus = options.selected_gpus;
  config.started_port = options.started_port;
  // The planner puts it first only on a single node that picks its ports (no --started_port).
  config.rank0_port = options.master_port;
  config.server_num = options.server_num;
  config.worker_num = options.worker_num;
  config.servers = options.servers;
  config.workers = options.workers;
  for (const LaunchOptions::HeterStage& stage : options.heter) {
    config.heter.push_back(JobConfig::HeterStage{stage.device, stage.count, stage.endpoints});
  }
  config.run_id = options.rdzv_id;
  config.role_name = options.role;
  config.paddle_job_id = options.job_id;
  config.log_level = options.log_level_name;
  config.rendezvous_timeout = options.rendezvous_timeout;
  config.max_restarts = options.max_restarts;
  // Paddle 1.8 and the fleet launcher give CPU workers an empty FLAGS_selected_gpus (so do
  // launch's own defaults); Paddle 2.x and torchrun set none.
  config.empty_gpus_on_cpu = options.dialect == Dialect::kOurs ||
                             options.dialect == Dialect::kPaddle18 ||
                             options.dialect == Dialect::kFleetrun;
  if (options.backend) config.distri_backend = options.resolved_backend();
  config.rank_mapping = options.rank_mapping;
  return config;
}

}  // namespace ddl::launcher
