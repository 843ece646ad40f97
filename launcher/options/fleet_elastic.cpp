#include "launcher/options/fleet_elastic.h"

#include <chrono>
#include <string>
#include <vector>

#include "env/text.h"
#include "launcher/options/values.h"

namespace ddl::launcher {
namespace {

// The variable that asks for a level (spelt as Paddle spells it).
constexpr const char* kLevelVariable = "PADDLE_ELASTIC_FAULT_TOLERANC_LEVEL";
constexpr std::chrono::seconds kFleetElasticTimeout{120};  // its ELASTIC_TIMEOUT

std::optional<std::string> variable(const env::EnvMap& env, const char* name) {
  const std::optional<std::string> v = env::lookup(env, name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

// --np N or MIN:MAX into o.nnodes (MAX) and o.min_nnodes (MIN, elastic when below MAX).
void parse_np(const std::string& v, LaunchOptions& o) {
  const auto colon = v.find(':');
  if (colon == std::string::npos) {
    o.nnodes = parse_int_flag("np", v, 1, kMaxNodes);
    return;
  }
  const int lo = parse_int_flag("np", v.substr(0, colon), 1, kMaxNodes);
  const int hi = parse_int_flag("np", v.substr(colon + 1), 1, kMaxNodes);
  if (lo > hi) bad_value("np", v, "N, or MIN:MAX with MIN <= MAX");
  o.nnodes = hi;
  if (lo < hi) o.min_nnodes = lo;
}

}  // namespace

std::optional<nodes::Etcd> parse_fleet_elastic(const GivenFlags& r, const env::EnvMap& env,
                                               bool list_given, LaunchOptions& o) {
  std::optional<std::string> server;
  std::string server_spelling = "--elastic_server";
  std::vector<env::Endpoint> endpoints;
  if (r.has("elastic_server")) {
    server = r.value("elastic_server");
    if (auto from = r.variable_of("elastic_server", *server)) server_spelling = *from;
    endpoints = parse_etcd_endpoints("elastic_server", *server, *server);
  } else if (auto host = variable(env, "PADDLE_ELASTIC_ETCD_SERVICE_HOST")) {
    // Kubernetes' variables of a service named paddle-elastic-etcd, as Paddle reads them.
    if (auto port = variable(env, "PADDLE_ELASTIC_ETCD_SERVICE_PORT")) {
      server = *host + ":" + *port;
      server_spelling = "PADDLE_ELASTIC_ETCD_SERVICE_HOST/_PORT";
      endpoints = parse_etcd_endpoints("elastic_server", *server, *server);
    }
  }
  std::optional<std::string> job = r.name_value("job_id");
  if (!job) {
    if (auto v = variable(env, "PADDLE_ELASTIC_JOB_ID")) job = parse_name("job_id", *v);
  }
  const bool np = r.has("np");
  if (!server || !job || !np) {
    std::vector<std::string> missing;
    if (!server) missing.push_back("an etcd server (--elastic_server, PADDLE_ELASTIC_SERVER)");
    if (!job) missing.push_back("a job id (--job_id, PADDLE_ELASTIC_JOB_ID)");
    if (!np) missing.push_back("a node count (--np, PADDLE_ELASTIC_NP)");
    // Only the job id alone is an ordinary Paddle 2.x flag; the others ask for the elastic mode.
    if (server || np) {
      o.warnings.push_back("Paddle's elastic mode is off, as in Paddle: it needs " +
                           env::join(missing, " and ") + " as well; the job runs as a static one");
    }
    return std::nullopt;
  }
  const std::string np_value = r.value("np");
  if (counted(o.nodes) || r.has("rank_mapping_file")) {
    throw OptionsError(server_spelling +
                       " (Paddle's elastic mode) makes etcd gather the nodes; "
                       "drop --nnodes/--node_rank/--master/--rdzv_endpoint/--rank_mapping_file "
                       "(--np=" +
                       np_value + " counts the nodes)");
  }
  parse_np(np_value, o);
  o.fleet_level = o.min_nnodes ? kFleetElastic : kFleetFaultTolerance;
  if (auto level = variable(env, kLevelVariable)) {
    if (*level != "1" && *level != "2") {
      throw OptionsError(std::string(kLevelVariable) + "='" + *level +
                         "': expected 1 (fault tolerance) or 2 (elastic)");
    }
    // As Paddle's manager, the count decides: N is fault tolerance, MIN:MAX elastic.
    if (std::stoi(*level) != o.fleet_level) {
      o.warnings.push_back(
          std::string(kLevelVariable) + "=" + *level + " is not used: --np=" + np_value +
          " makes the job " +
          (o.fleet_level == kFleetElastic ? "elastic (level 2)" : "fault-tolerant (level 1)") +
          ", as Paddle's elastic manager decides");
    }
  }
  o.job_id = job;
  o.paddle_elastic = true;
  if (!o.node_ip_given) {
    if (auto pod_ip = variable(env, "POD_IP")) {
      o.node_ip = check_ip("node_ip", *pod_ip, *pod_ip);
      o.node_ip_given = true;
    }
  }
  // A node keeps its place: its index from Paddle's operator, else in --ips; else etcd numbers
  // the nodes in the order they come.
  if (auto id = variable(env, "PADDLE_TRAINER_ID")) {
    o.node_rank = parse_int_flag("node_rank", *id, 0, *o.nnodes - 1);
  } else if (list_given && o.node_ip_given) {
    for (std::size_t i = 0; i < o.cluster_node_ips.size(); ++i) {
      if (o.cluster_node_ips[i] == o.node_ip && static_cast<int>(i) < *o.nnodes) {
        o.node_rank = static_cast<int>(i);
      }
    }
  }
  return nodes::Etcd{std::move(endpoints), server_spelling};
}

void apply_fleet_elastic_defaults(const GivenFlags& r, LaunchOptions& o) {
  if (!o.paddle_elastic) return;
  if (!r.has("elastic_timeout") && !o.last_call_timeout_given) {
    o.last_call_timeout = kFleetElasticTimeout;
  }
  if (!r.has("max_restarts") && !o.elastic_level) o.max_restarts = kPaddleDefaultMaxRestart;
}

}  // namespace ddl::launcher
