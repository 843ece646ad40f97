#include "launcher/cluster/static_job.h"

#include <cstdint>
#include <optional>

namespace ddl::launcher {
namespace {

// Each host's `count` processes at port, port+1, ...
std::vector<env::Endpoint> consecutive_ports(const JobConfig& config,
                                             const std::vector<std::string>& hosts, int port,
                                             const std::string& from) {
  const int count = local_endpoint_count(config);
  if (port < 1 || port + count - 1 > 65535) {
    throw PlanError(from + " gives the first port " + std::to_string(port) + ": " +
                    std::to_string(count) + " process(es) per node leave the port range 1..65535");
  }
  JobConfig fixed = config;
  fixed.started_port = port;
  std::vector<env::Endpoint> all;
  for (const std::string& host : hosts) {
    const std::vector<env::Endpoint> local = local_endpoints(fixed, host, {});
    all.insert(all.end(), local.begin(), local.end());
  }
  return all;
}

std::vector<env::Endpoint> cloud_endpoints(const JobConfig& config,
                                           const env::PaddleCloudNode& cloud) {
  const int count = local_endpoint_count(config);
  const int nodes = static_cast<int>(cloud.node_ips.size());
  if (!cloud.endpoints.empty()) {
    const int ports_num = cloud.endpoints_per_node;
    if (ports_num < count) {
      const std::string given =
          cloud.ports_num
              ? std::string(env::kTrainerPortsNum) + "=" + std::to_string(ports_num) + " gives"
              : std::string(env::kDistributedTrainerEndpoints) + " split over the nodes gives";
      throw PlanError(given + " each node " + std::to_string(ports_num) + " endpoint(s) of " +
                      env::kDistributedTrainerEndpoints + ", fewer than its " +
                      std::to_string(count) + " trainer(s)");
    }
    std::vector<env::Endpoint> all;
    for (int k = 0; k < nodes; ++k) {
      const auto block = cloud.endpoints.begin() + static_cast<std::ptrdiff_t>(k) * ports_num;
      all.insert(all.end(), block, block + count);
    }
    return all;
  }
  std::optional<int> port = config.started_port;
  std::string from = port ? "--started_port" : "PaddleCloud's default";
  if (nodes > 1 && cloud.paddle_port && cloud.ports_num && *cloud.ports_num >= count) {
    port = cloud.paddle_port;
    from = env::kServerPort;
  }
  return consecutive_ports(config, cloud.node_ips, port.value_or(kPaddleCloudPort), from);
}

}  // namespace

std::vector<env::Endpoint> static_endpoints(const JobConfig& config, const NodeTopology& topology) {
  if (topology.cloud()) return cloud_endpoints(config, *topology.cloud());
  return consecutive_ports(config, topology.hosts, config.started_port.value_or(kPaddleStaticPort),
                           config.started_port ? "--started_port" : "Paddle's default");
}

std::string derived_job_id(const std::string& description) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (unsigned char c : description) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string id = "static-";
  for (int shift = 60; shift >= 0; shift -= 4) id += kDigits[(hash >> shift) & 0xfu];
  return id;
}

}  // namespace ddl::launcher
