// The two-stage pipeline over a Communicator: stage 0 (the convolutions) on rank 0, stage 1 (the
// classifier) on rank 1, micro-batches GPipe style.
//
// Schedule of one training batch cut into M micro-batches (micro_batch_sizes):
//
//   rank 0 (FeatureSide):     F0 S0 F1 S1 ... F(M-1) S(M-1)   R0 B0 R1 B1 ... R(M-1) B(M-1)
//   rank 1 (ClassifierSide):  r0 fb0 r1 fb1 ... r(M-1) fb(M-1)   s0 s1 ... s(M-1)
//
// F/B: forward / backward of the conv stage; S/r: activations [n, 980] from 0 to 1; fb: fc forward,
// loss and backward; s/R: the activations' gradients from 1 to 0. While rank 0 computes F(m+1),
// rank 1 works on micro-batch m. Rank 1 keeps its gradients until it has seen every micro-batch
// and only then sends them: a send may wait for the matching recv (communicator.h; Gloo's TCP
// transport always does), so if rank 1 sent s0 while rank 0 was still sending S1, each would
// wait for the other. In this order every send meets a recv the peer posts next.
//
// Both ranks read the same batches (the same sampler, seed and order), so rank 1 takes the labels
// from its own copy of the data and nothing but activations and gradients travels. Each micro-batch
// loss is the mean over its n samples times n / batch, so the gradients accumulated over the M
// micro-batches are those of the whole batch's mean loss; with M = 1 the factor is exactly 1 and
// the arithmetic is the single-process net's. Gradients accumulate into the stage's parameters;
// the caller steps its optimizer and zeroes them once per batch.
//
// Errors: CommError, its message prefixed with the stage, the micro-batch and what was expected.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "examples/mnist/mnist_data.h"
#include "examples/mnist/mnist_net.h"
#include "examples/model_parallel/stages.h"
#include "worker/comm/communicator.h"

namespace ddl::model_parallel {

inline constexpr int kFeatureRank = 0;     // stage 0
inline constexpr int kClassifierRank = 1;  // stage 1
inline constexpr std::int64_t kEvalSlice = 500;

// The loss of one micro-batch of `labels.size(0)` samples out of a batch of `batch`: its mean
// cross-entropy times its share of the batch.
torch::Tensor micro_batch_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                               std::int64_t batch);

// Stage 0. Not thread-safe; holds a reference to `comm`, which must outlive it.
class FeatureSide {
 public:
  FeatureSide(FeatureStage stage, Communicator& comm);

  // One batch's forward and backward (the schedule above); `sizes` must add up to images.size(0).
  void train_batch(const torch::Tensor& images, const std::vector<std::int64_t>& sizes);

  // Test accuracy with stage 1: sends the features of `test` in slices of kEvalSlice and returns
  // the count stage 1 broadcasts back.
  mnist::Accuracy evaluate(const mnist::Dataset& test);

 private:
  FeatureStage stage_;
  Communicator& comm_;
};

// Stage 1. Not thread-safe; holds a reference to `comm`, which must outlive it.
class ClassifierSide {
 public:
  ClassifierSide(ClassifierStage stage, Communicator& comm, torch::Device device);

  // One batch's part on stage 1 (the schedule above); returns the batch loss (the sum of the
  // micro-batch losses, detached), `sizes` adding up to labels.size(0).
  torch::Tensor train_batch(const torch::Tensor& labels, const std::vector<std::int64_t>& sizes);

  // Test accuracy with stage 0: receives the features of `test` slice by slice, counts the
  // correct predictions and broadcasts the count to stage 0.
  mnist::Accuracy evaluate(const mnist::Dataset& test);

 private:
  torch::Tensor receive_features(std::int64_t rows, const std::string& what);

  ClassifierStage stage_;
  Communicator& comm_;
  torch::Device device_;
};

// The same arithmetic in one process, for --single: the unsplit net, the same micro-batches and
// the same loss weights; returns the batch loss, detached.
torch::Tensor train_batch_single(mnist::MnistNet& net, const torch::Tensor& images,
                                 const torch::Tensor& labels,
                                 const std::vector<std::int64_t>& sizes);

}  // namespace ddl::model_parallel
