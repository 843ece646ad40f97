#include "examples/model_parallel/stages.h"

#include <stdexcept>
#include <string>

namespace ddl::model_parallel {

FeatureStageImpl::FeatureStageImpl(const mnist::MnistNet& net) : net_(net) {
  register_module("conv1", net->conv1());
  register_module("conv2", net->conv2());
}

torch::Tensor FeatureStageImpl::forward(const torch::Tensor& images) {
  return net_->features(images);
}

ClassifierStageImpl::ClassifierStageImpl(const mnist::MnistNet& net) : net_(net) {
  register_module("fc", net->fc());
}

torch::Tensor ClassifierStageImpl::forward(const torch::Tensor& features) {
  return net_->classify(features);
}

std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, std::int64_t micro_batches) {
  if (batch <= 0 || micro_batches <= 0) {
    throw std::invalid_argument("micro_batch_sizes: batch (" + std::to_string(batch) +
                                ") and micro_batches (" + std::to_string(micro_batches) +
                                ") must both be positive");
  }
  const std::int64_t chunks = std::min(batch, micro_batches);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(chunks), batch / chunks);
  // The first batch % chunks chunks take one sample more.
  for (std::int64_t i = 0; i < batch % chunks; ++i) ++sizes[static_cast<std::size_t>(i)];
  return sizes;
}

}  // namespace ddl::model_parallel
