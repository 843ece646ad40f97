// The command line as the planner sees it: job_config() maps the parsed options
// (launcher/options/options.h) onto a launcher/cluster/plan.h JobConfig. It is the one place
// that knows which flag sets which field of the plan's input.
#pragma once

#include "launcher/cluster/plan.h"
#include "launcher/options/options.h"

namespace ddl::launcher {

// The JobConfig of `options`: the node list (--cluster_node_ips/--ips) and this node's address
// (--node_ip), --nproc_per_node, the selected GPUs, --started_port, --master_port as rank 0's
// port, the parameter-server counts and lists (--server_num, --worker_num, --servers, --workers),
// the names the workers are told (--rdzv_id, --role, --job_id), the workers' --log_level,
// --rendezvous_timeout and --max_restarts.
JobConfig job_config(const LaunchOptions& options);

}  // namespace ddl::launcher
