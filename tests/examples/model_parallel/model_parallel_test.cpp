// The two pipeline stages (examples/model_parallel/stages.h) and their schedule
// (examples/model_parallel/pipeline.h): the cut computes the whole net, the stages own the net's
// parameters, micro-batch accumulation is the whole batch's gradient, and the two sides over a real
// Gloo communicator (one forked process per rank) produce the single-process gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/mnist/mnist_net.h"
#include "examples/model_parallel/pipeline.h"
#include "examples/model_parallel/stages.h"
#include "tests/support/multiprocess.h"
#include "worker/comm/gloo_communicator.h"

namespace ddl::model_parallel {
namespace {

using namespace std::chrono_literals;
using mnist::MnistNet;

class ModelParallel : public ::testing::Test {
 protected:
  // One thread, so the ranks forked below do not inherit a running OpenMP pool.
  void SetUp() override { torch::set_num_threads(1); }
};

struct Batch {
  torch::Tensor images, labels;
};

Batch random_batch(std::int64_t n, std::uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({n, 1, 28, 28}), torch::randint(0, 10, {n}, torch::kInt64)};
}

MnistNet seeded_net(std::uint64_t seed) {
  torch::manual_seed(seed);
  return MnistNet();
}

// Each parameter's gradient, by name.
std::map<std::string, torch::Tensor> grads_of(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : module.named_parameters()) out[item.key()] = item.value().grad().clone();
  return out;
}

// Throws (a rank's way to fail) unless every gradient of `got` is within `tol` of `want`'s.
void require_close(const std::map<std::string, torch::Tensor>& got,
                   const std::map<std::string, torch::Tensor>& want, double tol,
                   const std::string& what) {
  for (const auto& [name, g] : got) {
    const auto it = want.find(name);
    if (it == want.end()) throw std::runtime_error(what + ": no reference gradient for " + name);
    const double diff = (g - it->second).abs().max().item<double>();
    const double scale = it->second.abs().max().item<double>();
    if (!(diff <= tol * scale)) {
      throw std::runtime_error(what + ": " + name + " differs by " + std::to_string(diff) +
                               " (max |grad| " + std::to_string(scale) + ")");
    }
  }
}

TEST_F(ModelParallel, TheCutComputesTheWholeNetBitForBit) {
  MnistNet net = seeded_net(5);
  const Batch b = random_batch(7, 6);
  const torch::Tensor features = net->features(b.images);
  EXPECT_EQ(features.sizes(), (std::vector<std::int64_t>{7, kFeatureWidth}));
  EXPECT_TRUE(features.is_contiguous());
  EXPECT_TRUE(torch::equal(net->classify(features), net->forward(b.images)));
  FeatureStage stage0(net);
  ClassifierStage stage1(net);
  EXPECT_TRUE(torch::equal(stage1->forward(stage0->forward(b.images)), net->forward(b.images)));
}

TEST_F(ModelParallel, StagesOwnTheNetsParametersUnderTheSameNames) {
  MnistNet net = seeded_net(11);
  FeatureStage stage0(net);
  ClassifierStage stage1(net);
  const auto whole = net->named_parameters();
  std::vector<std::string> names0, names1;
  for (const auto& item : stage0->named_parameters()) {
    names0.push_back(item.key());
    // The same tensor, not a copy: training the stage trains the net's layer.
    EXPECT_EQ(item.value().data_ptr(), whole[item.key()].data_ptr()) << item.key();
  }
  for (const auto& item : stage1->named_parameters()) {
    names1.push_back(item.key());
    EXPECT_EQ(item.value().data_ptr(), whole[item.key()].data_ptr()) << item.key();
  }
  EXPECT_EQ(names0, (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight",
                                              "conv2.bias"}));
  EXPECT_EQ(names1, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(mnist::parameter_count(*stage0) + mnist::parameter_count(*stage1),
            mnist::kMnistNetParameters);
  // Another net from the same seed: its stages start from identical parameters.
  MnistNet again = seeded_net(11);
  EXPECT_EQ(mnist::param_checksum(*FeatureStage(again)).hex(),
            mnist::param_checksum(*stage0).hex());
  EXPECT_EQ(mnist::param_checksum(*ClassifierStage(again)).hex(),
            mnist::param_checksum(*stage1).hex());
}

TEST_F(ModelParallel, MicroBatchSizes) {
  EXPECT_EQ(micro_batch_sizes(100, 4), (std::vector<std::int64_t>{25, 25, 25, 25}));
  EXPECT_EQ(micro_batch_sizes(10, 3), (std::vector<std::int64_t>{4, 3, 3}));
  EXPECT_EQ(micro_batch_sizes(3, 5), (std::vector<std::int64_t>{1, 1, 1}));
  EXPECT_EQ(micro_batch_sizes(9, 1), (std::vector<std::int64_t>{9}));
  EXPECT_THROW(micro_batch_sizes(0, 4), std::invalid_argument);
  EXPECT_THROW(micro_batch_sizes(10, 0), std::invalid_argument);
}

TEST_F(ModelParallel, AccumulatedMicroBatchesGiveTheWholeBatchGradient) {
  const Batch b = random_batch(10, 2);
  MnistNet plain = seeded_net(3);
  const torch::Tensor plain_loss = mnist::cross_entropy(plain->forward(b.images), b.labels);
  plain_loss.backward();

  MnistNet one = seeded_net(3);
  const torch::Tensor one_loss = train_batch_single(one, b.images, b.labels, {10});
  // One micro-batch is exactly the plain step.
  EXPECT_TRUE(torch::equal(one_loss, plain_loss.detach()));
  for (const auto& [name, g] : grads_of(*one)) {
    EXPECT_TRUE(torch::equal(g, grads_of(*plain)[name])) << name;
  }

  MnistNet three = seeded_net(3);
  const torch::Tensor three_loss = train_batch_single(three, b.images, b.labels, {4, 3, 3});
  EXPECT_NEAR(three_loss.item<double>(), plain_loss.item<double>(), 1e-6);
  EXPECT_NO_THROW(require_close(grads_of(*three), grads_of(*plain), 1e-5, "3 micro-batches"));
  EXPECT_THROW(train_batch_single(three, b.images, b.labels, {4, 3}), std::invalid_argument);
}

std::unique_ptr<Communicator> connect(testing::RankContext& ctx, std::chrono::milliseconds timeout) {
  GlooOptions options;
  options.rank = ctx.rank;
  options.world_size = ctx.world_size;
  options.timeout = timeout;
  return make_gloo_communicator(ctx.store, options);
}

// One batch through both stages on two processes, against the unsplit net in each of them.
void pipeline_batch(testing::RankContext& ctx, std::vector<std::int64_t> sizes, double tol) {
  torch::set_num_threads(1);
  auto comm = connect(ctx, 30s);
  const Batch b = random_batch(12, 21);
  MnistNet reference = seeded_net(8);
  const torch::Tensor reference_loss = train_batch_single(reference, b.images, b.labels, {12});
  MnistNet net = seeded_net(8);
  if (ctx.rank == kFeatureRank) {
    FeatureStage stage(net);
    FeatureSide side(stage, *comm);
    side.train_batch(b.images, sizes);
    require_close(grads_of(*stage), grads_of(*FeatureStage(reference)), tol, "stage 0");
  } else {
    ClassifierStage stage(net);
    ClassifierSide side(stage, *comm, torch::kCPU);
    const torch::Tensor loss = side.train_batch(b.labels, sizes);
    const double diff = std::abs(loss.item<double>() - reference_loss.item<double>());
    if (diff > tol * std::abs(reference_loss.item<double>())) {
      throw std::runtime_error("stage 1 loss " + std::to_string(loss.item<double>()) + " vs " +
                               std::to_string(reference_loss.item<double>()));
    }
    require_close(grads_of(*stage), grads_of(*ClassifierStage(reference)), tol, "stage 1");
  }
  comm->barrier();
}

void expect_ranks_ok(const std::vector<testing::RankResult>& results) {
  ASSERT_EQ(results.size(), 2u);
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].exited && results[r].exit_code == 0)
        << "rank " << r << ": " << testing::describe(results[r]);
  }
}

TEST_F(ModelParallel, OneMicroBatchOverGlooIsTheSingleProcessStep) {
  expect_ranks_ok(testing::run_ranks(
      2, [](testing::RankContext& ctx) { pipeline_batch(ctx, {12}, 0.0); }, 60s));
}

// Several micro-batches in flight: each side's sends meet the peer's receives in this order (a
// wrong order deadlocks until the 30 s timeout and fails the ranks).
TEST_F(ModelParallel, FourMicroBatchesOverGlooAccumulateTheBatchGradient) {
  const auto started = std::chrono::steady_clock::now();
  expect_ranks_ok(testing::run_ranks(
      2, [](testing::RankContext& ctx) { pipeline_batch(ctx, {3, 3, 3, 3}, 1e-5); }, 60s));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 20s);
}

// A stage whose peer is gone fails with where in the schedule it was.
TEST_F(ModelParallel, ALostPeerIsACommErrorNamingTheStageAndMicroBatch) {
  expect_ranks_ok(testing::run_ranks(
      2,
      [](testing::RankContext& ctx) {
        torch::set_num_threads(1);
        auto comm = connect(ctx, 5s);
        comm->barrier();
        if (ctx.rank == kClassifierRank) return;  // leaves without receiving anything
        MnistNet net = seeded_net(1);
        FeatureSide side(FeatureStage(net), *comm);
        const Batch b = random_batch(4, 1);
        try {
          side.train_batch(b.images, {2, 2});
        } catch (const CommError& e) {
          const std::string text = e.what();
          if (text.find("stage 0 (rank 0): sending the activations of micro-batch 1 of 2 "
                        "([2, 980] float32) to stage 1 (rank 1): gloo") == std::string::npos) {
            throw std::runtime_error("unexpected message: " + text);
          }
          return;
        }
        throw std::runtime_error("train_batch did not throw without stage 1");
      },
      60s));
}

}  // namespace
}  // namespace ddl::model_parallel
