#include "launcher/coord/control_plane.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <utility>

#include "env/text.h"
#include "launcher/coord/engine.h"
#include "launcher/supervise/worker_lookup.h"

namespace ddl::launcher {
namespace {

// The etcd store, from the module ddl_etcd_store (launcher/CMakeLists.txt says why it is one):
// beside this program (the build tree), else where it is installed (DDL_ETCD_MODULE_INSTALLED,
// relative to this program's folder). The module stays loaded for the life of the process.
std::unique_ptr<ControlStore> load_etcd_control_store(const ControlOptions& options) {
  using Factory = ControlStore* (*)(const ControlOptions&);
  static const char* const kModule = "ddl_etcd_store.so";
  const std::string here = launcher_directory();
  std::vector<std::string> tried;
  std::string why;
  for (const std::string dir : {".", DDL_ETCD_MODULE_INSTALLED}) {
    const std::string path = (std::filesystem::path(here) / dir / kModule).lexically_normal();
    tried.push_back(path);
    void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module == nullptr) {
      why = ::dlerror();
      continue;
    }
    if (auto make = reinterpret_cast<Factory>(::dlsym(module, "ddl_make_etcd_control_store"))) {
      return std::unique_ptr<ControlStore>(make(options));
    }
    why = path + " has no ddl_make_etcd_control_store";
  }
  throw ControlError("an etcd control plane needs launch's etcd module " + std::string(kModule) +
                     ", which could not be loaded (looked for " + env::join(tried, ", ") +
                     "; last error: " + why + ")");
}

}  // namespace

std::string node_list(const std::set<int>& nodes) {
  return env::join(std::vector<int>(nodes.begin(), nodes.end()), ", ");
}

std::optional<std::vector<int>> ready_members(
    const ControlOptions& options, const GenerationCandidates& c,
    std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point deadline,
    std::optional<std::chrono::steady_clock::time_point>& last_call, const std::string& where,
    const std::string& lost_how) {
  const std::string what = "generation " + std::to_string(c.generation);
  std::set<int> missing;
  for (int n : c.expected) {
    if (!c.joined.count(n)) missing.insert(n);
  }
  if (!options.elastic()) {
    std::set<int> gone;
    for (int n : missing) {
      if (c.lost.count(n)) gone.insert(n);
    }
    if (!gone.empty() && !options.wait_for_replacement) {
      throw ControlError("node(s) " + node_list(gone) + " of " + std::to_string(options.nnodes) +
                         " were lost" + lost_how + "; a job with a fixed --nnodes cannot start " +
                         what + " without them (--nnodes=MIN:MAX lets it go on with fewer)");
    }
  } else {
    for (int n : c.lost) missing.erase(n);
  }
  const int count = static_cast<int>(c.joined.size());
  const std::vector<int> members(c.joined.begin(), c.joined.end());
  if (count >= options.min_nodes()) {
    if (missing.empty()) return members;
    if (!last_call) last_call = now + options.last_call_timeout;
    if (now >= *last_call || now >= deadline) {
      spdlog::info("{}: starting with {} node(s) ({}); node(s) {} did not join in time", what,
                   count, node_list(c.joined), node_list(missing));
      return members;
    }
  } else if (now >= deadline) {
    throw ControlError(std::to_string(count) + " node(s) (" + node_list(c.joined) + ") joined " +
                       what + " " + where + " within the rendezvous deadline (" +
                       seconds_text(options.rendezvous_timeout) + " s), " +
                       std::to_string(options.min_nodes()) +
                       " are needed; missing: " + node_list(missing));
  }
  return std::nullopt;
}

namespace {

// Orders hosts as --sort_ip does: IPv4 addresses by their value, before host names by their text.
std::pair<std::uint64_t, std::string> address_key(const std::string& host) {
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) return {ntohl(a.s_addr), ""};
  return {std::uint64_t{1} << 32, host};
}

}  // namespace

Membership membership_of(const Members& members, int me, bool equal_node_sizes, bool by_address) {
  std::vector<std::size_t> order(members.nodes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto host_of = [&](std::size_t i) {
    return members.endpoints[i].empty() ? std::string() : members.endpoints[i].front().host;
  };
  if (by_address) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return address_key(host_of(a)) < address_key(host_of(b));
    });
  }
  Membership m;
  m.generation = Generation(members.generation);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t i = order[k];
    const int node = members.nodes[i];
    if (node == me) m.position = static_cast<int>(k);
    const std::vector<env::Endpoint>& theirs = members.endpoints[i];
    if (equal_node_sizes && k > 0 && theirs.size() * k != m.endpoints.size()) {
      throw ControlError("node " + std::to_string(node) + " published " +
                         std::to_string(theirs.size()) + " endpoint(s), node " +
                         std::to_string(m.nodes[0]) + " " + std::to_string(m.endpoints.size() / k));
    }
    m.nodes.push_back(node);
    m.endpoints.insert(m.endpoints.end(), theirs.begin(), theirs.end());
    m.hosts.push_back(host_of(i));
  }
  return m;
}

Heartbeat heartbeat_for(int nnodes) {
  const int stretch = std::max(1, (nnodes + kHeartbeatNodes - 1) / kHeartbeatNodes);
  return Heartbeat{kHeartbeatInterval * stretch, kHeartbeatTimeout * stretch};
}

std::unique_ptr<Control> make_control(const ControlOptions& options) {
  ControlOptions o = options;
  // The TCP store may make this launcher node 0 (kAutoNodeRank).
  std::unique_ptr<ControlStore> store =
      o.etcd() ? load_etcd_control_store(o) : make_tcp_control_store(o);
  return std::make_unique<ControlEngine>(o, std::move(store));
}

}  // namespace ddl::launcher
