// A trainer's side of a parameter-server job: one connection to every server, the model's
// parameters split over them as worker/ps/sharding.h says, and the three things a training step
// needs. The trainer holds no optimizer state: the servers apply the update.
//
//   ps::ParameterClient ps(config, model->parameters());  // joins every server, pulls
//   for (...) {
//     loss.backward();
//     ps.push_pull();   // gradients out, updated parameters back into the model
//     model->zero_grad();
//   }
//   ps.finish();        // waits for every trainer; the model then holds the servers' parameters
//
// Every call throws PsError naming this trainer, the server and what went wrong: a server that
// is gone or stalled, or one that failed the job (its reason, e.g. "server 0: trainer 1 (...)
// closed its connection before it finished").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "env/contract.h"
#include "worker/ps/ps_types.h"

namespace ddl::ps {

struct ClientConfig {
  int trainer_id = 0;
  int trainers = 1;
  std::vector<env::Endpoint> servers;  // PADDLE_PSERVERS_IP_PORT_LIST, server index order
  std::string job_id;
  std::string secret;
  UpdateMode mode = UpdateMode::kSync;
  Deadlines deadlines;
};

struct ClientStats {
  std::uint64_t pushes = 0;
  std::uint64_t version = 0;          // server 0's version after the last answer
  double staleness_mean = 0.0;        // async: over this trainer's pushes (summed over servers)
  std::uint64_t staleness_max = 0;
  double seconds_in_push_pull = 0.0;  // wall time spent waiting for the servers
};

class ParameterClient {
 public:
  // `params`: the model's parameters in module order (float32; any device and layout). They are
  // updated in place (under no-grad). Connects and registers with every server (each checks that
  // the job shape and its shard's sizes match), then pulls.
  ParameterClient(const ClientConfig& config, std::vector<torch::Tensor> params);
  ~ParameterClient();
  ParameterClient(const ParameterClient&) = delete;
  ParameterClient& operator=(const ParameterClient&) = delete;

  // What this trainer last saved (save()), as server 0 keeps it; "" when nothing was saved. In
  // sync mode every server must agree on it and on the version (else PsError: the servers'
  // checkpoints are from different steps).
  const std::string& saved_position() const;
  // Copies the servers' parameters into the model.
  void pull();
  // Sends every parameter's gradient (an undefined gradient counts as zeros) to its server and
  // copies the updated parameters back. Sync: returns once every trainer pushed this step.
  void push_pull();
  // Asks every server to save its shard with `position` (opaque text) for this trainer.
  void save(const std::string& position);
  // Tells every server this trainer is done and waits (Deadlines::finish) until every trainer is;
  // then the model holds the final parameters.
  void finish();

  ClientStats stats() const;
  int servers() const;
  // The server index of every parameter (module order).
  const std::vector<int>& assignment() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddl::ps
