#include "launcher/coord/control_plane.h"

#include "launcher/coord/control.h"
#include "launcher/coord/etcd_control.h"

namespace ddl::launcher {

std::unique_ptr<Control> make_control(const ControlOptions& options) {
  if (options.etcd()) {
    return std::make_unique<EtcdControl>(options);
  }
  return std::make_unique<ControlChannel>(options);
}

}  // namespace ddl::launcher
