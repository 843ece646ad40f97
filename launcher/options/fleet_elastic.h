// The fleet launcher's elastic mode (Paddle's fleet/elastic manager, `fleetrun` and
// paddle.distributed.launch of Paddle 2.0 to 2.2) read onto launch's etcd control plane: its
// variables and flags become an etcd job's (docs/multi-node.md, "Paddle's elastic variables").
#pragma once

#include <optional>

#include "env/contract.h"
#include "launcher/options/command_line.h"
#include "launcher/options/nodes.h"
#include "launcher/options/options.h"

namespace ddl::launcher {

// On, as Paddle's enable_elastic() decides, when all three are given: an etcd server
// (--elastic_server, PADDLE_ELASTIC_SERVER, or Kubernetes' PADDLE_ELASTIC_ETCD_SERVICE_HOST and
// _PORT), a job id (--job_id, PADDLE_ELASTIC_JOB_ID) and a node count (--np, PADDLE_ELASTIC_NP:
// N, or MIN:MAX). Then it returns the etcd cluster and sets on `o`: nnodes (and min_nnodes for
// MIN:MAX), the fleet level, job_id, node_rank from PADDLE_TRAINER_ID (Paddle's operator gives
// each pod its index) or from this node's place in --ips, node_ip from POD_IP when --host is not
// given. Only some of the three given: nullopt with a warning saying what is missing (Paddle
// then runs the job as a static one, silently). Another description of the nodes (--nnodes,
// --master, --rdzv_endpoint, a rank mapping) with it is an OptionsError; so are a malformed count
// and a level other than 1 or 2. `list_given`: --ips was given.
std::optional<nodes::Etcd> parse_fleet_elastic(const GivenFlags& r, const env::EnvMap& env,
                                               bool list_given, LaunchOptions& o);

// After the timeouts and restarts are read: the fleet manager's defaults where the command line
// and the variables said nothing, 120 s to wait for more nodes (its ELASTIC_TIMEOUT) and
// Paddle's 3 restarts.
void apply_fleet_elastic_defaults(const GivenFlags& r, LaunchOptions& o);

}  // namespace ddl::launcher
