#include "worker/ps/sharding.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace ddl::ps {

std::vector<int> assign_shards(const std::vector<std::int64_t>& sizes, int servers) {
  if (servers < 1) {
    throw std::invalid_argument("a parameter-server job needs at least one server, got " +
                                std::to_string(servers));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) {
      throw std::invalid_argument("tensor " + std::to_string(i) + " has a negative size " +
                                  std::to_string(sizes[i]));
    }
  }
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(servers), 0);
  std::vector<int> assignment(sizes.size(), 0);
  for (std::size_t tensor : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    assignment[tensor] = static_cast<int>(lightest);
    load[static_cast<std::size_t>(lightest)] += sizes[tensor];
  }
  return assignment;
}

std::vector<int> shard_of(const std::vector<int>& assignment, int server) {
  std::vector<int> mine;
  for (std::size_t i = 0; i < assignment.size(); ++i) {
    if (assignment[i] == server) mine.push_back(static_cast<int>(i));
  }
  return mine;
}

std::vector<std::int64_t> shard_sizes(const std::vector<std::int64_t>& sizes,
                                      const std::vector<int>& assignment, int servers) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max(servers, 0)), 0);
  for (std::size_t i = 0; i < sizes.size() && i < assignment.size(); ++i) {
    const int s = assignment[i];
    if (s >= 0 && s < servers) out[static_cast<std::size_t>(s)] += sizes[i];
  }
  return out;
}

}  // namespace ddl::ps
