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

// Not thread-safe: one thread issues the collectives of a communicator, in the same order on every
// rank. Tensors must be contiguous; dtypes float32, float64, int32 and int64 are supported.
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
};

}  // namespace ddl
