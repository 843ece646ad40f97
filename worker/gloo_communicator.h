// Gloo (TCP transport) communicator for CPU tensors.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "worker/communicator.h"
#include "worker/store.h"

namespace ddl {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Address of this rank's own interface; Gloo's TCP transport listens there on an ephemeral port
  // and publishes its address through the store.
  std::string host = "127.0.0.1";
  // Bounds every Gloo operation and the connection of the full mesh: a dead peer surfaces as a
  // CommError after at most this long instead of a hang.
  std::chrono::milliseconds timeout{60'000};
  // Prefix of the keys this communicator uses in the store (a job may build several).
  std::string store_prefix = "gloo";
};

// Builds the full mesh through `store` (which must outlive the constructor call only).
std::unique_ptr<Communicator> make_gloo_communicator(Store& store, const GlooOptions& options);

}  // namespace ddl
