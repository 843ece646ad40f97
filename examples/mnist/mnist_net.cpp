#include "examples/mnist/mnist_net.h"

#include <cstdio>
#include <stdexcept>

namespace ddl::mnist {
namespace {

namespace nn = torch::nn;

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

MnistNetImpl::MnistNetImpl() {
  conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 20, 5).stride(1).padding(2)));
  conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(20, 20, 5).stride(1).padding(2)));
  fc_ = register_module("fc", nn::Linear(980, 10));
  use_channels_last();
}

void MnistNetImpl::use_channels_last() {
  torch::NoGradGuard no_grad;
  for (torch::Tensor* w : {&conv1_->weight, &conv2_->weight}) {
    // Not contiguous(ChannelsLast): conv1's weight has one input channel, so its NCHW strides
    // already count as channels-last and contiguous() would keep them, and LibTorch would then
    // pick NCHW kernels for conv1. A fresh channels-last tensor gets the NHWC strides.
    torch::Tensor nhwc = torch::empty(w->sizes(), w->options(), torch::MemoryFormat::ChannelsLast);
    nhwc.copy_(*w);
    w->set_data(nhwc);
  }
}

torch::Tensor MnistNetImpl::forward(const torch::Tensor& x) { return classify(features(x)); }

torch::Tensor MnistNetImpl::features(const torch::Tensor& x) {
  auto y = torch::relu(torch::max_pool2d(conv1_->forward(x), /*kernel_size=*/2, /*stride=*/2));
  y = torch::relu(torch::max_pool2d(conv2_->forward(y), 2, 2));
  // reshape() reads the channels-last activations in NCHW order, as fc's weights expect.
  return y.reshape({y.size(0), 980}).contiguous();  // a copy already: contiguous() keeps it
}

torch::Tensor MnistNetImpl::classify(const torch::Tensor& features) {
  return fc_->forward(features);
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels) {
  return torch::nll_loss(torch::log_softmax(logits, /*dim=*/1), labels);
}

std::int64_t parameter_count(const torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        std::vector<torch::Tensor> parameters,
                                                        double lr) {
  namespace optim = torch::optim;
  if (name == "sgd") {
    return std::make_unique<optim::SGD>(std::move(parameters), optim::SGDOptions(lr));
  }
  if (name == "momentum") {
    return std::make_unique<optim::SGD>(std::move(parameters), optim::SGDOptions(lr).momentum(0.9));
  }
  if (name == "adagrad") {
    return std::make_unique<optim::Adagrad>(std::move(parameters), optim::AdagradOptions(lr));
  }
  if (name == "adam") {
    return std::make_unique<optim::Adam>(std::move(parameters), optim::AdamOptions(lr));
  }
  throw std::invalid_argument("unknown optimizer '" + name +
                              "': expected sgd, momentum, adagrad or adam");
}

Accuracy evaluate(MnistNet& net, const Dataset& data, std::int64_t batch) {
  torch::NoGradGuard no_grad;
  net->eval();
  Accuracy acc;
  torch::Tensor correct = torch::zeros({}, data.labels.options());
  const std::int64_t n = data.size();
  for (std::int64_t start = 0; start < n; start += batch) {
    const std::int64_t len = std::min(batch, n - start);
    const auto predicted = net->forward(data.rows(start, len)).argmax(1);
    correct += predicted.eq(data.labels.narrow(0, start, len)).sum();
  }
  net->train();
  acc.correct = correct.item<std::int64_t>();
  acc.total = n;
  return acc;
}

std::string ParamChecksum::hex() const {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

ParamChecksum param_checksum(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  ParamChecksum c;
  c.hash = kFnvOffset;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor t = item.value().detach().to(torch::kCPU).contiguous();
    c.sum += t.to(torch::kFloat64).sum().item<double>();
    c.hash = fnv1a(c.hash, item.key().data(), item.key().size());
    c.hash = fnv1a(c.hash, t.data_ptr(), static_cast<std::size_t>(t.nbytes()));
  }
  return c;
}

}  // namespace ddl::mnist
