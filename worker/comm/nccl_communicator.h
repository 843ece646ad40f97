// NCCL communicator for CUDA tensors. Compiled only when CMake finds CUDA + NCCL (WITH_NCCL);
// `nccl_available()` says whether this build has it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "store/store.h"
#include "worker/comm/communicator.h"
#include "worker/comm/rank_group.h"

namespace ddl {

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  int device = 0;                              // CUDA device index (FLAGS_selected_gpus)
  std::chrono::milliseconds timeout{300'000};  // unique-id exchange and async error watch
  std::string store_prefix = "nccl";
};

// True when this build includes the NCCL communicator.
bool nccl_available();

// Rank 0 creates the NCCL unique id and publishes it through `store`; the other ranks read it.
// Split out so the exchange is testable without a GPU. `create_id` is called on rank 0 only.
// The returned bytes are the raw unique id.
Bytes exchange_nccl_unique_id(Store& store, const NcclOptions& options,
                              const std::function<Bytes()>& create_id);

// Throws CommError when the build has no NCCL or no CUDA device `options.device` is visible.
std::unique_ptr<Communicator> make_nccl_communicator(Store& store, const NcclOptions& options);

// The options of the communicator over `group` (worker/comm/rank_group.h) as this job rank sees
// it: the group rank and size, and the group's store prefix "<options.store_prefix>/group/<label>"
// under which group rank 0 publishes the unique id. `options.rank` and `options.world_size` are
// the job's. Needs no GPU. Throws CommError as place_in_group does.
NcclOptions nccl_group_options(const NcclOptions& options, const RankGroup& group);

// A communicator over the members of `group` only: checks the list (as nccl_group_options), claims
// the group's store prefix (claim_group), exchanges a unique id under it and initialises a NCCL
// communicator of the members. Only members call it, each once per group. Throws CommError for a
// bad list, a reused label, no NCCL in this build, a missing device or a failed initialisation.
std::unique_ptr<Communicator> make_nccl_communicator(Store& store, const NcclOptions& options,
                                                     const RankGroup& group);

}  // namespace ddl
