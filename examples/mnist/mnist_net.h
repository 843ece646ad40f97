// The Paddle course's MNIST net and the pieces of its training program that are not about
// parallelism: the loss, the optimizers it offers, test-set accuracy and a parameter checksum.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "examples/mnist/mnist_data.h"

namespace ddl::mnist {

// conv 1->20 5x5 pad 2 + relu, max-pool 2x2 stride 2, conv 20->20 5x5 pad 2 + relu, max-pool 2x2
// stride 2, fully connected 980->10. forward() returns the logits; the course's softmax lives in
// cross_entropy() (as log_softmax, which is stable) and does not change the argmax.
//
// Two choices that change no value, only the speed (docs/PERFORMANCE.md): the conv weights are
// stored channels-last (NHWC), so oneDNN's NHWC convolutions and LibTorch's vectorised
// channels-last pooling run instead of the NCHW ones (about 1.8x faster per step on one core), and
// each block pools before its relu: relu is monotonic, so max(relu(x)) == relu(max(x)) and the
// gradient reaches the same element, with relu applied to a quarter of the values.
class MnistNetImpl : public torch::nn::Module {
 public:
  MnistNetImpl();
  // x: [N, 1, 28, 28] (any memory format) -> logits [N, 10].
  torch::Tensor forward(const torch::Tensor& x);

  // Re-lays the conv weights out channels-last, keeping their values (the constructor does it; a
  // checkpoint load may bring back another layout).
  void use_channels_last();

  // The two halves forward() is made of, for a pipeline that cuts the net between them
  // (examples/model_parallel). features(): both conv blocks, flattened to [N, 980] in NCHW order
  // (a contiguous tensor, ready to send); classify(): fc on such a tensor, [N, 980] -> [N, 10].
  // forward(x) is classify(features(x)), the same operations and so the same bits.
  torch::Tensor features(const torch::Tensor& x);
  torch::Tensor classify(const torch::Tensor& features);

  // The layers themselves (shared holders, not copies), so that a stage can register only its
  // part: moving or training them through the stage moves or trains this net's layers.
  const torch::nn::Conv2d& conv1() const { return conv1_; }
  const torch::nn::Conv2d& conv2() const { return conv2_; }
  const torch::nn::Linear& fc() const { return fc_; }

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(MnistNet);

// The net has 20,350 parameters: 520 (conv1) + 10,020 (conv2) + 9,810 (fc).
inline constexpr std::int64_t kMnistNetParameters = 20'350;

// Mean over the batch of -log(softmax(logits)[label]), via log_softmax (no overflow for large
// logits). logits [N, 10] float, labels [N] int64.
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels);

std::int64_t parameter_count(const torch::nn::Module& module);

// The course's four optimizers: sgd, momentum (0.9), adagrad, adam. Throws std::invalid_argument
// quoting an unknown name.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        std::vector<torch::Tensor> parameters,
                                                        double lr);

struct Accuracy {
  std::int64_t correct = 0;
  std::int64_t total = 0;
  double ratio() const { return total == 0 ? 0.0 : static_cast<double>(correct) / total; }
};

// Accuracy of `net` on all of `data` (on the device the data and the net are on), in slices of
// `batch` images taken with narrow() (views, no copies). Leaves the net in training mode.
Accuracy evaluate(MnistNet& net, const Dataset& data, std::int64_t batch = 500);

// A fingerprint of a module's parameters: replicas of one data-parallel run must agree on it.
struct ParamChecksum {
  double sum = 0.0;         // sum over all parameters of their values, accumulated in float64
  std::uint64_t hash = 0;   // FNV-1a 64 over the names and raw bytes of every parameter
  std::string hex() const;  // hash as 16 hex digits
};
ParamChecksum param_checksum(const torch::nn::Module& module);

}  // namespace ddl::mnist
