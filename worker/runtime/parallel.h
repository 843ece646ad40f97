// The data-parallel API a training program uses. It mirrors the four changes the Paddle course
// makes to a single-device program (examples/mnist/train_mnist.cpp marks them "Change N"):
//
//   // 1. this process's place in the job, and its device, come from the environment
//   const ParallelEnv env = ParallelEnv::from_process();
//   // 2. join the job (store + communicator), then wrap the model: every replica starts from
//   //    rank 0's parameters
//   std::unique_ptr<ParallelContext> ctx = prepare_context(env);
//   model->to(ctx->device);                     // model: a module holder, e.g. mnist::MnistNet
//   DataParallel dp(*model, *ctx);
//   // 3. every rank reads a disjoint share of each epoch, and all run the same number of batches
//   const DistributedBatchSampler sampler(dataset_size, batch_size, env.rank, env.world_size,
//                                         seed);
//   for (const torch::Tensor& index : sampler.batches(epoch)) {
//     torch::Tensor loss = ...;                 // forward on the samples `index` names
//     // 4. scale the loss, all-reduce the gradients, then step as on one device
//     dp.scale_loss(loss).backward();
//     dp.apply_collective_grads();
//     optimizer.step();
//     optimizer.zero_grad();
//   }
//
// ctx->comm stays usable for the program's own collectives (train_mnist sums its test-set counts
// with ctx->comm->all_reduce).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "env/contract.h"
#include "worker/comm/communicator.h"
#include "worker/runtime/rendezvous.h"
#include "store/store.h"

namespace ddl {

// What prepare_context builds: the store connection (and, on rank 0, the store server) and the
// communicator. Move-only; members are destroyed communicator first, then store, then server.
struct ParallelContext {
  ParallelEnv env;
  torch::Device device = torch::kCPU;
  std::shared_ptr<void> store_server;  // keeps rank 0's TcpStoreServer alive (null elsewhere)
  std::unique_ptr<Store> store;
  std::unique_ptr<Communicator> comm;

  int rank() const { return env.rank; }
  int world_size() const { return env.world_size; }
};

enum class Backend { kAuto, kGloo, kNccl };

struct ContextOptions {
  // kAuto: NCCL when the env names a GPU and CUDA is usable, Gloo otherwise.
  Backend backend = Backend::kAuto;
  // Deadline for connecting to the store and for all ranks to join; default from the contract
  // (DDL_RENDEZVOUS_TIMEOUT_MS, 300 s).
  std::optional<std::chrono::milliseconds> rendezvous_timeout;
  // Bound on every collective (a dead peer fails the job instead of hanging it).
  std::chrono::milliseconds collective_timeout{120'000};
};

// Reads nothing itself: joins the job (rendezvous() in worker/runtime/rendezvous.h: rank 0 hosts
// the store on endpoints[0], every rank waits for all others, the error names the ranks that did
// not come) and builds the communicator. A world of one without a contract gets an in-process
// store. Throws env::EnvError, StoreError or CommError.
std::unique_ptr<ParallelContext> prepare_context(const ParallelEnv& env,
                                                 const ContextOptions& options = {});

// Wraps a module for data-parallel training.
class DataParallel {
 public:
  struct Options {
    // Gradients are all-reduced in flat buckets of at most this many bytes.
    std::size_t bucket_bytes = 25u << 20;
  };

  // Broadcasts rank 0's parameters and buffers so every replica starts identical.
  DataParallel(torch::nn::Module& module, ParallelContext& ctx);
  DataParallel(torch::nn::Module& module, ParallelContext& ctx, Options options);

  // loss / world_size, so that summing the gradients over ranks averages them.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;

  // Sums every parameter's gradient over all ranks, coalesced into flat buckets.
  void apply_collective_grads();

  // Broadcasts rank 0's parameters and buffers again (e.g. after rank 0 alone loaded a
  // checkpoint).
  void sync_params();

 private:
  // One flat buffer all-reduced in one call. Each parameter's gradient is made to share the
  // buffer's storage (not an autograd view, so optimizers may detach_() it), so backward
  // accumulates straight into the bucket and nothing is copied when the gradient stays in place.
  struct Bucket {
    torch::Tensor flat;
    std::vector<torch::Tensor> params;
    std::vector<std::int64_t> offsets;  // element offset of each parameter in `flat`
  };

  void build_buckets();

  torch::nn::Module& module_;
  ParallelContext& ctx_;
  Options options_;
  std::vector<Bucket> buckets_;  // built on the first apply_collective_grads()
};

// Splits the indices 0..dataset_size-1 into batches for one rank. Every epoch has one shuffled
// order (seed + epoch, identical on every rank); each rank takes a disjoint share, and every rank
// runs the same number of batches (samples that do not fill a whole round are dropped), so no rank
// waits for a collective that never comes.
class DistributedBatchSampler {
 public:
  DistributedBatchSampler(std::int64_t dataset_size, std::int64_t batch_size, int rank,
                          int world_size, std::uint64_t seed, bool shuffle = true);

  // Batches of this rank for `epoch`: each entry is a 1-D int64 tensor of dataset indices.
  std::vector<torch::Tensor> batches(int epoch) const;
  std::int64_t batches_per_epoch() const;

 private:
  std::int64_t dataset_size_, batch_size_;
  int rank_, world_size_;
  std::uint64_t seed_;
  bool shuffle_;
};

}  // namespace ddl
