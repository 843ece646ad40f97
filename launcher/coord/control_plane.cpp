#include "launcher/coord/control_plane.h"

#include "launcher/coord/control.h"
#include "launcher/coord/etcd_control.h"

namespace ddl::launcher {

Membership membership_of(const Members& members, int me, bool equal_node_sizes) {
  const std::vector<int>& nodes = members.nodes;
  Membership m;
  m.generation = Generation(members.generation);
  m.nodes = nodes;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] == me) m.position = static_cast<int>(i);
    const std::vector<env::Endpoint>& theirs = members.endpoints[i];
    if (equal_node_sizes && i > 0 && theirs.size() * i != m.endpoints.size()) {
      throw ControlError("node " + std::to_string(nodes[i]) + " published " +
                         std::to_string(theirs.size()) + " endpoint(s), node " +
                         std::to_string(nodes[0]) + " " + std::to_string(m.endpoints.size() / i));
    }
    m.endpoints.insert(m.endpoints.end(), theirs.begin(), theirs.end());
  }
  return m;
}

std::unique_ptr<Control> make_control(const ControlOptions& options) {
  if (options.etcd()) {
    return std::make_unique<EtcdControl>(options);
  }
  return std::make_unique<ControlChannel>(options);
}

}  // namespace ddl::launcher
