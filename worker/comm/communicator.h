// Collective communication between the ranks of one job. One interface; `GlooCommunicator` for CPU
// tensors (worker/comm/gloo_communicator.h) and `NcclCommunicator` for CUDA tensors
// (worker/comm/nccl_communicator.h, built only when CMake finds NCCL).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "worker/comm/comm_error.h"

namespace ddl {

enum class ReduceOp { kSum, kAverage };

// Not thread-safe: one thread issues the calls of a communicator; collectives in the same order on
// every rank. Tensors must be contiguous; dtypes float32, float64, int32 and int64 are supported
// (NCCL also float16). Gloo takes CPU tensors and returns when the call is done; NCCL takes
// tensors on its device, enqueues the call after the work already on LibTorch's current stream
// and returns, later work on that stream seeing the result. Every call throws CommError naming
// the backend, the operation and the rank (and the peer for send/recv) on a bad argument, a
// failure or after the communicator's timeout (NCCL: the call that follows one that failed or
// timed out on the device throws). After a transport failure the communicator is unusable.
//
// A communicator over a sub-group (make_gloo_communicator / make_nccl_communicator with a
// RankGroup) has rank() and size() of the group, and every rank argument is a group rank.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "gloo" or "nccl"

  // In place: every rank ends with the element-wise sum (or mean) of all ranks' `tensor`.
  virtual void all_reduce(torch::Tensor& tensor, ReduceOp op) = 0;

  // In place: every rank ends with `root`'s `tensor`.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;

  // Returns size() tensors shaped like `tensor`, entry r holding rank r's `tensor`.
  virtual std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) = 0;

  // Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  // Point to point, between two ranks only; the others take no part. send() hands `tensor` to
  // `dst`; recv() fills the preallocated `tensor` with what `src` sent, and needs the same dtype
  // and number of elements (the shape may differ). Messages from one rank to another arrive in
  // the order they were sent. A send may wait until `dst` posts the matching recv, so two ranks
  // that both send to each other first wait for each other until the timeout: order the calls
  // (e.g. the lower rank sends first). Throws CommError before anything moves when the peer is
  // this rank or not a rank, or the tensor is undefined, on another device, not contiguous or of
  // an unsupported dtype. Gloo's recv also throws when `src` sent another dtype or number of
  // elements (the message is consumed, `tensor` left untouched); NCCL cannot tell, and a
  // mismatch there is undefined (it may fail or time out).
  virtual void send(const torch::Tensor& tensor, int dst) = 0;
  virtual void recv(torch::Tensor& tensor, int src) = 0;
};

}  // namespace ddl
