// Gloo's full mesh over TCP with collectives on plain buffers: no LibTorch. GlooCommunicator
// (worker/comm/gloo_communicator.h) runs tensors through it; a worker that has no tensors
// (bench/startup_worker) uses it directly and never loads LibTorch.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "worker/comm/comm_error.h"
#include "store/store.h"

namespace ddl {

enum class DType { kFloat32, kFloat64, kInt32, kInt64 };

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Address of this rank's own interface; Gloo's TCP transport listens there on an ephemeral port
  // and publishes its address through the store.
  std::string host = "127.0.0.1";
  // Bounds every Gloo operation and the connection of the full mesh: a dead peer surfaces as a
  // CommError after at most this long instead of a hang.
  std::chrono::milliseconds timeout{60'000};
  // Prefix of the keys this mesh uses in the store (a job may build several).
  std::string store_prefix = "gloo";
};

// Not thread-safe: one thread issues the collectives, in the same order on every rank. Every call
// throws CommError ("gloo <op> on rank R of N: ...") on a failure or after the timeout.
class GlooMesh {
 public:
  // Builds the full mesh through `store` (which must outlive this call only). A world of one
  // opens no sockets and every collective is local.
  static std::unique_ptr<GlooMesh> connect(Store& store, const GlooOptions& options);
  ~GlooMesh();
  GlooMesh(const GlooMesh&) = delete;
  GlooMesh& operator=(const GlooMesh&) = delete;

  int rank() const;
  int size() const;

  // In place: every rank ends with the element-wise sum of all ranks' `count` elements, bit for
  // bit the same on every rank.
  void all_reduce_sum(void* data, std::size_t count, DType dtype);
  // In place: every rank ends with `root`'s `bytes` bytes.
  void broadcast(void* data, std::size_t bytes, int root);
  // `output` (size() * bytes) receives rank r's `input` at offset r * bytes.
  void all_gather(const void* input, std::size_t bytes, void* output);
  // Returns once every rank has entered the barrier.
  void barrier();

 private:
  struct Impl;
  explicit GlooMesh(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddl
