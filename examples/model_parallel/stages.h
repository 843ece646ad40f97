// The course's MNIST net cut into the two stages of a pipeline: stage 0 holds the convolutions,
// stage 1 the classifier. Each stage is built from a whole mnist::MnistNet and registers only its
// own layers (the net's holders, shared), so a stage made from a net initialised with seed S has
// exactly that net's parameters, under the same names ("conv1.weight", ..., "fc.bias").
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "examples/mnist/mnist_net.h"

namespace ddl::model_parallel {

inline constexpr int kStages = 2;
// What crosses the cut: per image, the 20x7x7 output of the second conv block, flattened.
inline constexpr std::int64_t kFeatureWidth = 980;

// Stage 0: conv1 block, conv2 block; [N, 1, 28, 28] -> contiguous [N, 980].
class FeatureStageImpl : public torch::nn::Module {
 public:
  explicit FeatureStageImpl(const mnist::MnistNet& net);
  torch::Tensor forward(const torch::Tensor& images);

 private:
  // Runs the half through the net's own code; only conv1 and conv2 are registered here, so
  // parameters(), to() and the checksum see this stage's layers and nothing of fc.
  mnist::MnistNet net_;
};
TORCH_MODULE(FeatureStage);

// Stage 1: fc; [N, 980] -> logits [N, 10].
class ClassifierStageImpl : public torch::nn::Module {
 public:
  explicit ClassifierStageImpl(const mnist::MnistNet& net);
  torch::Tensor forward(const torch::Tensor& features);

 private:
  mnist::MnistNet net_;
};
TORCH_MODULE(ClassifierStage);

// The sizes of the micro-batches a batch of `batch` samples is cut into: min(micro_batches,
// batch) chunks, in order, whose sizes differ by at most one and add up to `batch`. Every rank
// computes the same cut from the same numbers, so no sizes need to be sent. Throws
// std::invalid_argument when either count is not positive.
std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, std::int64_t micro_batches);

}  // namespace ddl::model_parallel
