#include "examples/model_parallel/pipeline.h"

#include <numeric>
#include <stdexcept>
#include <utility>

namespace ddl::model_parallel {
namespace {

// Runs one send or recv; a failure is rethrown with where in the schedule it happened, which the
// communicator's own message (backend, operation, ranks) cannot know. `context` is only called
// on failure. A deadline stays a CommTimeout, so the program exits 124 and the launcher dumps the
// stack of the stage that is stuck.
template <typename Call, typename Context>
void in_schedule(Call&& call, Context&& context) {
  try {
    call();
  } catch (const CommTimeout& e) {
    throw CommTimeout(context() + ": " + e.what());
  } catch (const CommError& e) {
    throw CommError(context() + ": " + e.what());
  }
}

std::string micro_batch_text(std::size_t m, std::size_t count, std::int64_t rows) {
  return "micro-batch " + std::to_string(m + 1) + " of " + std::to_string(count) + " ([" +
         std::to_string(rows) + ", " + std::to_string(kFeatureWidth) + "] float32)";
}

void check_sizes(const std::vector<std::int64_t>& sizes, std::int64_t batch, const char* stage) {
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  if (sizes.empty() || total != batch) {
    throw std::invalid_argument(std::string(stage) + ": micro-batch sizes add up to " +
                                std::to_string(total) + ", expected the batch of " +
                                std::to_string(batch));
  }
}

}  // namespace

torch::Tensor micro_batch_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                               std::int64_t batch) {
  const double share = static_cast<double>(labels.size(0)) / static_cast<double>(batch);
  return mnist::cross_entropy(logits, labels) * share;
}

FeatureSide::FeatureSide(FeatureStage stage, Communicator& comm)
    : stage_(std::move(stage)), comm_(comm) {}

void FeatureSide::train_batch(const torch::Tensor& images,
                              const std::vector<std::int64_t>& sizes) {
  check_sizes(sizes, images.size(0), "stage 0");
  const std::vector<torch::Tensor> inputs = images.split_with_sizes(sizes);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(inputs.size());
  for (std::size_t m = 0; m < inputs.size(); ++m) {
    outputs.push_back(stage_->forward(inputs[m]));
    const torch::Tensor sent = outputs[m].detach();
    in_schedule([&] { comm_.send(sent, kClassifierRank); },
                [&] {
                  return "stage 0 (rank 0): sending the activations of " +
                         micro_batch_text(m, inputs.size(), sizes[m]) + " to stage 1 (rank 1)";
                });
  }
  for (std::size_t m = 0; m < outputs.size(); ++m) {
    torch::Tensor grad = torch::empty_like(outputs[m], torch::MemoryFormat::Contiguous);
    in_schedule([&] { comm_.recv(grad, kClassifierRank); },
                [&] {
                  return "stage 0 (rank 0): receiving the gradient of " +
                         micro_batch_text(m, outputs.size(), sizes[m]) + " from stage 1 (rank 1)";
                });
    outputs[m].backward(grad);
  }
}

mnist::Accuracy FeatureSide::evaluate(const mnist::Dataset& test) {
  {
    torch::NoGradGuard no_grad;
    stage_->eval();
    const std::int64_t n = test.size();
    for (std::int64_t start = 0; start < n; start += kEvalSlice) {
      const std::int64_t rows = std::min(kEvalSlice, n - start);
      const torch::Tensor features = stage_->forward(test.rows(start, rows));
      in_schedule([&] { comm_.send(features, kClassifierRank); },
                  [&] {
                    return "stage 0 (rank 0): sending test features of images " +
                           std::to_string(start) + ".." + std::to_string(start + rows - 1) +
                           " to stage 1 (rank 1)";
                  });
    }
    stage_->train();
  }
  torch::Tensor counts = torch::zeros({2}, test.labels.options());
  in_schedule([&] { comm_.broadcast(counts, kClassifierRank); },
              [] { return std::string("stage 0 (rank 0): receiving the test counts of stage 1"); });
  counts = counts.cpu();
  return {counts[0].item<std::int64_t>(), counts[1].item<std::int64_t>()};
}

ClassifierSide::ClassifierSide(ClassifierStage stage, Communicator& comm, torch::Device device)
    : stage_(std::move(stage)), comm_(comm), device_(device) {}

torch::Tensor ClassifierSide::receive_features(std::int64_t rows, const std::string& what) {
  torch::Tensor features =
      torch::empty({rows, kFeatureWidth}, torch::TensorOptions().device(device_));
  in_schedule([&] { comm_.recv(features, kFeatureRank); },
              [&] { return "stage 1 (rank 1): receiving " + what + " from stage 0 (rank 0)"; });
  return features;
}

torch::Tensor ClassifierSide::train_batch(const torch::Tensor& labels,
                                          const std::vector<std::int64_t>& sizes) {
  const std::int64_t batch = labels.size(0);
  check_sizes(sizes, batch, "stage 1");
  const std::vector<torch::Tensor> targets = labels.split_with_sizes(sizes);
  std::vector<torch::Tensor> grads;
  grads.reserve(targets.size());
  torch::Tensor total = torch::zeros({}, torch::TensorOptions().device(device_));
  for (std::size_t m = 0; m < targets.size(); ++m) {
    torch::Tensor features = receive_features(
        sizes[m], "the activations of " + micro_batch_text(m, targets.size(), sizes[m]));
    features.requires_grad_(true);
    const torch::Tensor loss = micro_batch_loss(stage_->forward(features), targets[m], batch);
    loss.backward();
    grads.push_back(features.grad());
    total += loss.detach();
  }
  for (std::size_t m = 0; m < grads.size(); ++m) {
    const torch::Tensor grad = grads[m].contiguous();
    in_schedule([&] { comm_.send(grad, kFeatureRank); },
                [&] {
                  return "stage 1 (rank 1): sending the gradient of " +
                         micro_batch_text(m, grads.size(), sizes[m]) + " to stage 0 (rank 0)";
                });
  }
  return total;
}

mnist::Accuracy ClassifierSide::evaluate(const mnist::Dataset& test) {
  torch::Tensor correct = torch::zeros({}, test.labels.options());
  {
    torch::NoGradGuard no_grad;
    stage_->eval();
    const std::int64_t n = test.size();
    for (std::int64_t start = 0; start < n; start += kEvalSlice) {
      const std::int64_t rows = std::min(kEvalSlice, n - start);
      const torch::Tensor features =
          receive_features(rows, "test features of images " + std::to_string(start) + ".." +
                                     std::to_string(start + rows - 1));
      const torch::Tensor predicted = stage_->forward(features).argmax(1);
      correct += predicted.eq(test.labels.narrow(0, start, rows)).sum();
    }
    stage_->train();
  }
  torch::Tensor counts = torch::stack({correct, torch::full_like(correct, test.size())});
  in_schedule([&] { comm_.broadcast(counts, kClassifierRank); },
              [] { return std::string("stage 1 (rank 1): sending the test counts to stage 0"); });
  counts = counts.cpu();
  return {counts[0].item<std::int64_t>(), counts[1].item<std::int64_t>()};
}

torch::Tensor train_batch_single(mnist::MnistNet& net, const torch::Tensor& images,
                                 const torch::Tensor& labels,
                                 const std::vector<std::int64_t>& sizes) {
  const std::int64_t batch = labels.size(0);
  check_sizes(sizes, batch, "single process");
  const std::vector<torch::Tensor> inputs = images.split_with_sizes(sizes);
  const std::vector<torch::Tensor> targets = labels.split_with_sizes(sizes);
  torch::Tensor total = torch::zeros({}, torch::TensorOptions().device(images.device()));
  for (std::size_t m = 0; m < inputs.size(); ++m) {
    const torch::Tensor loss = micro_batch_loss(net->forward(inputs[m]), targets[m], batch);
    loss.backward();
    total += loss.detach();
  }
  return total;
}

}  // namespace ddl::model_parallel
