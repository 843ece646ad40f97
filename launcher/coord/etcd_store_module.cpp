// The entry point of the ddl_etcd_store module (launcher/CMakeLists.txt): `launch` maps the etcd
// store, and with it OpenSSL, only into jobs whose control plane is etcd (control_plane.cpp).
#include "launcher/coord/control_store.h"

extern "C" __attribute__((visibility("default"))) ddl::launcher::ControlStore*
ddl_make_etcd_control_store(const ddl::launcher::ControlOptions& options) {
  return ddl::launcher::make_etcd_control_store(options).release();
}
