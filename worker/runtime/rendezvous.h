// The rendezvous, without LibTorch: this process's place in the job (ParallelEnv, read from the
// env contract) and the store every rank of the job joins. prepare_context (worker/runtime/parallel.h)
// builds its communicator on top; a program that needs no tensors (bench/startup_worker) joins
// with rendezvous() and connects a GlooMesh (worker/comm/gloo_mesh.h) itself.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "env/contract.h"
#include "store/store.h"

namespace ddl {

// This process's place in the job, read from the env contract (env/contract.h).
struct ParallelEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::optional<int> gpu;  // FLAGS_selected_gpus
  // From `launch`, else from Slurm's or Open MPI's variables (env/scheduler.h); nullopt: started
  // by hand.
  std::optional<env::WorkerContract> contract;

  // Reads the calling process's environment. No contract: a world of one. A partial or
  // inconsistent contract: throws env::EnvError naming the variable and its value.
  static ParallelEnv from_process();
  static ParallelEnv from_env(const env::EnvMap& vars);
};

// A joined job. Members are destroyed store first, then the server.
struct Rendezvous {
  std::shared_ptr<void> store_server;  // keeps rank 0's TcpStoreServer alive (null elsewhere)
  std::unique_ptr<Store> store;
  // This rank's own interface (the host of its contract endpoint; 127.0.0.1 without a contract):
  // where its communicator listens.
  std::string host = "127.0.0.1";
};

// Rank 0 hosts the store on endpoints[0] and every rank connects to it (the launcher gives each
// generation its own job id, so a worker left over from before a restart is refused); returns once every rank
// has joined, or throws StoreError naming the ranks that did not within `timeout` (default: the
// contract's DDL_RENDEZVOUS_TIMEOUT_MS). A world of one without a contract gets an in-process
// store; any other world without one throws env::EnvError.
Rendezvous rendezvous(const ParallelEnv& env,
                      std::optional<std::chrono::milliseconds> timeout = std::nullopt);

}  // namespace ddl
