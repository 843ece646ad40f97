#include "launcher/coord/control_plane.h"

#include "launcher/coord/control.h"

namespace ddl::launcher {

std::unique_ptr<Control> make_control(const ControlOptions& options) {
  if (options.etcd()) {
    throw ControlError("the etcd control plane is not built yet");
  }
  return std::make_unique<ControlChannel>(options);
}

}  // namespace ddl::launcher
