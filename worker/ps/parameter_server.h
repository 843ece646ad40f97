// A parameter server: one process of a parameter-server job (TRAINING_ROLE=PSERVER) that owns a
// shard of the model's parameters (worker/ps/sharding.h) and the optimizer state of that shard.
// Trainers (worker/ps/parameter_client.h) push gradients and get the updated parameters back over
// the framed transport (net/), with the job id, secret and deadlines the store uses.
//
//   ps::ServerConfig config = ...;                      // from the env contract (train_mnist)
//   ps::ParameterServer server(config, shard_tensors, [&](std::vector<torch::Tensor> p) {
//     return mnist::make_optimizer("momentum", std::move(p), lr);
//   });
//   ps::ServerReport report = server.run();             // returns once every trainer finished
//
// run() throws PsError, after answering every waiting trainer with the reason, when a trainer
// closes its connection before it finished (it died), stalls past Deadlines::step, does not join
// within Deadlines::join, registers a model or mode that does not match, or when trainers run
// different numbers of sync steps.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "env/contract.h"
#include "worker/ps/ps_types.h"

namespace ddl::ps {

struct ServerConfig {
  int index = 0;        // this server among the job's servers
  int servers = 1;      // how many servers the job has
  int trainers = 1;     // how many trainers push to it
  env::Endpoint endpoint{"127.0.0.1", 0};  // where to listen (port 0: an ephemeral one)
  std::string job_id;   // frames of another job id (a stale generation) are refused
  std::string secret;   // trainers must present it
  UpdateMode mode = UpdateMode::kSync;
  Deadlines deadlines;
  // Where the shard's state goes when a trainer asks to save (unset: a save is refused). Called
  // on the server thread with the whole state (tensors, optimizer state, version, the trainers'
  // positions); throwing fails that save and the trainer hears why. The program owns the file
  // format and its atomic write (train_mnist: examples/mnist/checkpoint.h).
  std::function<void(torch::serialize::OutputArchive& state)> save;
  // State to start from (unset: the initial tensors): called once by the constructor; returns
  // false when there is nothing to resume. A state for another shard, mode or trainer count is a
  // PsError.
  std::function<bool(torch::serialize::InputArchive& state)> load;
};

struct ServerReport {
  std::uint64_t updates = 0;         // optimizer steps applied (the parameters' version)
  std::uint64_t pushes = 0;          // gradient pushes received
  double staleness_mean = 0.0;       // async: versions applied since the pusher's last pull
  std::uint64_t staleness_max = 0;
  bool resumed = false;
  std::uint64_t resumed_version = 0;
};

using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor> params)>;

class ParameterServer {
 public:
  // `shard`: this server's tensors, initial values (copied; any device, float32). The optimizer is
  // made over the server's own copies. Binds the endpoint (throws PsError naming it) and starts
  // serving at once, after loading config.load's state.
  ParameterServer(const ServerConfig& config, const std::vector<torch::Tensor>& shard,
                  const OptimizerFactory& make_optimizer);
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  std::uint16_t port() const;
  // Blocks until every trainer has finished and closed its connection (or a short linger
  // passed), or the job failed (PsError). Call once.
  ServerReport run();
  // The shard as the server holds it now (copies; for checksums and tests). Not while run() may
  // be applying updates, i.e. call it before or after run().
  std::vector<torch::Tensor> parameters() const;
  // Connections dropped for failing the handshake or breaking the protocol (for tests).
  std::size_t dropped_connections() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddl::ps
