// Gloo (TCP transport) communicator for CPU tensors: the tensor face of GlooMesh
// (worker/comm/gloo_mesh.h).
#pragma once

#include <memory>

#include "store/store.h"
#include "worker/comm/communicator.h"
#include "worker/comm/gloo_mesh.h"
#include "worker/comm/rank_group.h"

namespace ddl {

// Builds the full mesh through `store` (which must outlive the constructor call only). Throws
// CommError as GlooMesh::connect does.
std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options);

// A communicator over the members of `group` only (worker/comm/rank_group.h): `options.rank` and
// `options.world_size` are the job's, and the group's store keys go under
// "<options.store_prefix>/group/<label>". Only members call it, each once per group. Throws
// CommError as GlooMesh::connect_group does (a bad rank list, this rank not a member, a reused
// label, a failed connect).
std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options,
                                                     const RankGroup& group);

}  // namespace ddl
