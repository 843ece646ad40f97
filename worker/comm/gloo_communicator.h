// Gloo (TCP transport) communicator for CPU tensors: the tensor face of GlooMesh
// (worker/comm/gloo_mesh.h).
#pragma once

#include <memory>

#include "worker/comm/communicator.h"
#include "worker/comm/gloo_mesh.h"
#include "store/store.h"

namespace ddl {

// Builds the full mesh through `store` (which must outlive the constructor call only).
std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options);

}  // namespace ddl
