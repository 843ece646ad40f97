// The correctness proof of data parallelism, on the net train_mnist ships (mnist::MnistNet, the
// Paddle course's MNIST net): a few SGD steps by 2 ranks (separate processes, the full
// prepare_context path over TCP) on 50 samples each end with parameters identical bit for bit on
// both ranks, and equal within float tolerance to one process training on the same 100 samples
// per step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "examples/mnist/mnist_net.h"
#include "tests/support/multiprocess.h"
#include "worker/runtime/parallel.h"

namespace ddl {
namespace {

using namespace std::chrono_literals;

// The net under test is the one train_mnist ships (examples/mnist/mnist_net.h), with its
// channels-last conv weights and pool-before-relu blocks, so this proof covers the layout and
// gradients the trainer really all-reduces.
using mnist::MnistNet;

constexpr int kSteps = 4;
constexpr std::int64_t kGlobalBatch = 100;
constexpr double kLearningRate = 0.05;

struct Data {
  torch::Tensor images;  // [kSteps * kGlobalBatch, 1, 28, 28]
  torch::Tensor labels;  // [kSteps * kGlobalBatch]
};

Data make_data(torch::Dtype dtype) {
  auto gen = at::detail::createCPUGenerator(1234);
  Data d;
  d.images = at::randn({kSteps * kGlobalBatch, 1, 28, 28}, gen).to(dtype);
  d.labels = at::randint(0, 10, {kSteps * kGlobalBatch}, gen, torch::kLong);
  return d;
}

MnistNet make_net(torch::Dtype dtype) {
  torch::manual_seed(7);
  MnistNet net;
  net->to(dtype);
  net->use_channels_last();  // as train_mnist does after moving the net
  return net;
}

// A model whose initial parameters differ on every rank, so the test also shows that
// DataParallel's construction makes rank 0's parameters everyone's.
void perturb(MnistNet& net, int rank) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.add_(0.01 * rank);
}

torch::Tensor flat_parameters(MnistNet& net) {
  std::vector<torch::Tensor> flats;
  for (const auto& p : net->parameters()) flats.push_back(p.detach().reshape({-1}));
  return torch::cat(flats);
}

torch::Tensor step_loss(MnistNet& net, const torch::Tensor& images, const torch::Tensor& labels) {
  return mnist::cross_entropy(net->forward(images), labels);
}

// One process, the whole batch of 100 per step.
torch::Tensor train_single(torch::Dtype dtype) {
  Data data = make_data(dtype);
  MnistNet net = make_net(dtype);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLearningRate));
  for (int step = 0; step < kSteps; ++step) {
    auto images = data.images.narrow(0, step * kGlobalBatch, kGlobalBatch);
    auto labels = data.labels.narrow(0, step * kGlobalBatch, kGlobalBatch);
    opt.zero_grad();
    step_loss(net, images, labels).backward();
    opt.step();
  }
  return flat_parameters(net);
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "ddl_dp_" + std::to_string(::getpid()) + "_" + name;
}

void write_tensor(const std::string& path, const torch::Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Trains in `dtype` on 2 ranks and on one process; returns false (with gtest failures) on a
// mismatch. `atol`/`rtol` bound the difference from the single-process run, which comes only from
// the different order of the floating-point sums (two means of 50 vs one mean of 100).
void check_two_ranks_against_one(torch::Dtype dtype, double rtol, double atol) {
  torch::set_num_threads(1);
  constexpr int kWorld = 2;
  const std::vector<env::Endpoint> endpoints{{"127.0.0.1", testing::free_port()},
                                             {"127.0.0.1", testing::free_port()}};
  const std::string out_prefix = temp_path(std::string(c10::toString(dtype)) + "_rank");

  auto results = testing::run_ranks(
      kWorld,
      [&](testing::RankContext& rank_ctx) {
        // The harness's own store is not used: this rank goes through the real prepare_context.
        env::WorkerContract c;
        c.rank = rank_ctx.rank;
        c.world_size = kWorld;
        c.local_rank = rank_ctx.rank;
        c.local_world_size = kWorld;
        c.endpoints = endpoints;
        c.current = endpoints[rank_ctx.rank];
        c.job_id = "dp-test";
        c.secret = "dp-secret";
        c.rendezvous_timeout = 30s;
        const ParallelEnv penv = ParallelEnv::from_env(env::to_env(c));
        ContextOptions options;
        options.collective_timeout = 30s;
        auto ctx = prepare_context(penv, options);
        if (ctx->comm->backend() != "gloo" || !ctx->device.is_cpu()) {
          throw std::runtime_error("expected gloo on the CPU, got " + ctx->comm->backend());
        }

        Data data = make_data(dtype);
        MnistNet net = make_net(dtype);
        perturb(net, ctx->rank());
        DataParallel dp(*net, *ctx);
        torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(kLearningRate));
        constexpr std::int64_t kLocalBatch = kGlobalBatch / kWorld;
        for (int step = 0; step < kSteps; ++step) {
          const std::int64_t start = step * kGlobalBatch + ctx->rank() * kLocalBatch;
          auto images = data.images.narrow(0, start, kLocalBatch);
          auto labels = data.labels.narrow(0, start, kLocalBatch);
          opt.zero_grad();
          dp.scale_loss(step_loss(net, images, labels)).backward();
          dp.apply_collective_grads();
          opt.step();
        }
        write_tensor(out_prefix + std::to_string(ctx->rank()), flat_parameters(net));
        ctx->comm->barrier();  // rank 0 hosts the store: nobody leaves while others still need it
      },
      180s);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].exited && results[r].signal == 0 && results[r].exit_code == 0)
        << "rank " << r << ": " << testing::describe(results[r]);
  }

  const auto bytes0 = read_bytes(out_prefix + "0");
  const auto bytes1 = read_bytes(out_prefix + "1");
  std::remove((out_prefix + "0").c_str());
  std::remove((out_prefix + "1").c_str());
  torch::Tensor reference = train_single(dtype);
  ASSERT_EQ(reference.numel(), mnist::kMnistNetParameters);
  ASSERT_EQ(bytes0.size(), reference.nbytes());
  EXPECT_TRUE(bytes0 == bytes1) << "the ranks' parameters differ";

  torch::Tensor rank0 =
      torch::from_blob(const_cast<char*>(bytes0.data()), reference.sizes(), dtype).clone();
  MnistNet initial_net = make_net(dtype);
  torch::Tensor initial = flat_parameters(initial_net);
  // Training moved the parameters by far more than the tolerance, and both runs agree.
  EXPECT_GT((reference - initial).abs().max().item<double>(), 1e-3);
  const double max_diff = (rank0 - reference).abs().max().item<double>();
  const double moved = (reference - initial).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(rank0, reference, rtol, atol))
      << "max difference from the single-process run: " << max_diff << " (training moved "
      << "parameters by up to " << moved << ")";
  std::fprintf(stderr, "%s: max |2 ranks - 1 process| = %g, max parameter change = %g\n",
               c10::toString(dtype), max_diff, moved);
}

TEST(DataParallel, TwoRanksMatchEachOtherBitForBitAndOneProcessWithinFloatTolerance) {
  check_two_ranks_against_one(torch::kFloat, 1e-5, 1e-6);
}

// In double precision the summation-order noise all but vanishes, so a tight tolerance shows the
// float difference above is rounding and not a wrong gradient.
TEST(DataParallel, TwoRanksMatchOneProcessInDoublePrecision) {
  check_two_ranks_against_one(torch::kDouble, 1e-9, 1e-11);
}

// Rank 1 does not use `unused` at all, and the second step starts from gradients set to none
// (as zero_grad(set_to_none) does): every rank still runs the same collectives, a missing
// gradient counts as zeros, and afterwards every rank holds the same, defined gradients.
TEST(DataParallel, MissingGradientsCountAsZerosOnEveryRank) {
  torch::set_num_threads(1);
  const std::vector<env::Endpoint> endpoints{{"127.0.0.1", testing::free_port()},
                                             {"127.0.0.1", testing::free_port()}};
  auto results = testing::run_ranks(
      2,
      [&](testing::RankContext& rank_ctx) {
        env::WorkerContract c;
        c.rank = rank_ctx.rank;
        c.world_size = 2;
        c.local_rank = rank_ctx.rank;
        c.local_world_size = 2;
        c.endpoints = endpoints;
        c.current = endpoints[rank_ctx.rank];
        c.job_id = "dp-unused";
        c.rendezvous_timeout = 30s;
        auto ctx = prepare_context(ParallelEnv::from_env(env::to_env(c)));
        torch::nn::Linear used(4, 3), unused(4, 3);
        torch::nn::Sequential both(used, unused);
        DataParallel dp(*both, *ctx, DataParallel::Options{64});  // several buckets
        const torch::Tensor x = torch::ones({2, 4});
        for (int step = 0; step < 2; ++step) {
          for (auto& p : both->parameters()) p.mutable_grad() = torch::Tensor();
          torch::Tensor loss = used->forward(x).sum();
          if (ctx->rank() == 0) loss = loss + unused->forward(x).sum();
          dp.scale_loss(loss).backward();
          dp.apply_collective_grads();
          // d(sum over a batch of 2)/dW is 2 per element; scaled by 1/2 per rank, then summed.
          auto check = [&](const torch::Tensor& grad, double want, const char* name) {
            if (!grad.defined() || !torch::equal(grad, torch::full_like(grad, want))) {
              throw std::runtime_error(std::string(name) + " gradient wrong at step " +
                                       std::to_string(step));
            }
          };
          check(used->weight.grad(), 2.0, "used.weight");
          check(used->bias.grad(), 2.0, "used.bias");
          check(unused->weight.grad(), 1.0, "unused.weight");
          check(unused->bias.grad(), 1.0, "unused.bias");
        }
        ctx->comm->barrier();
      },
      120s);
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].exited && results[r].signal == 0 && results[r].exit_code == 0)
        << "rank " << r << ": " << testing::describe(results[r]);
  }
}

// A channels-last conv weight gets a channels-last gradient in its bucket: the gradient obeys
// autograd's layout contract, so backward accumulates into the bucket in place (the same memory
// every step, no copy, no warning) and the all-reduced values are right.
TEST(DataParallel, ChannelsLastWeightsGetGradientsLaidOutLikeThem) {
  torch::set_num_threads(1);
  const std::vector<env::Endpoint> endpoints{{"127.0.0.1", testing::free_port()},
                                             {"127.0.0.1", testing::free_port()}};
  auto results = testing::run_ranks(
      2,
      [&](testing::RankContext& rank_ctx) {
        env::WorkerContract c;
        c.rank = rank_ctx.rank;
        c.world_size = 2;
        c.local_rank = rank_ctx.rank;
        c.local_world_size = 2;
        c.endpoints = endpoints;
        c.current = endpoints[rank_ctx.rank];
        c.job_id = "dp-channels-last";
        c.rendezvous_timeout = 30s;
        auto ctx = prepare_context(ParallelEnv::from_env(env::to_env(c)));
        torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 4, 3).padding(1));
        {
          torch::NoGradGuard no_grad;
          conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
        }
        DataParallel dp(*conv, *ctx);
        const void* first = nullptr;
        for (int step = 0; step < 3; ++step) {
          const torch::Tensor x =
              torch::ones({2, 3, 5, 5}).contiguous(torch::MemoryFormat::ChannelsLast);
          dp.scale_loss(conv->forward(x).sum()).backward();
          dp.apply_collective_grads();
          const torch::Tensor& g = conv->weight.grad();
          if (g.strides() != conv->weight.strides()) {
            throw std::runtime_error("step " + std::to_string(step) +
                                     ": the gradient is not laid out like the weight");
          }
          if (step == 0) first = g.data_ptr();
          if (g.data_ptr() != first) {
            throw std::runtime_error("step " + std::to_string(step) +
                                     ": the gradient moved out of its bucket (a copy)");
          }
          // Same input on both ranks: the mean of the two equals one process's gradient.
          torch::nn::Conv2d alone(torch::nn::Conv2dOptions(3, 4, 3).padding(1));
          {
            torch::NoGradGuard no_grad;
            alone->weight.copy_(conv->weight);
            alone->bias.copy_(conv->bias);
          }
          alone->forward(x).sum().backward();
          if (!torch::allclose(g, alone->weight.grad(), 1e-5, 1e-6)) {
            throw std::runtime_error("step " + std::to_string(step) + ": wrong gradient values");
          }
          for (auto& p : conv->parameters()) p.mutable_grad().zero_();
        }
        ctx->comm->barrier();
      },
      120s);
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].exited && results[r].signal == 0 && results[r].exit_code == 0)
        << "rank " << r << ": " << testing::describe(results[r]);
  }
}

}  // namespace
}  // namespace ddl
