// ParallelEnv, prepare_context for a world of one, and DistributedBatchSampler.
#include "worker/runtime/parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "worker/comm/nccl_communicator.h"

namespace ddl {
namespace {

TEST(ParallelEnv, NoContractIsAWorldOfOne) {
  auto e = ParallelEnv::from_env({{"HOME", "/root"}});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_FALSE(e.gpu);
  EXPECT_FALSE(e.contract);
}

TEST(ParallelEnv, SelectedGpuWithoutContract) {
  auto e = ParallelEnv::from_env({{env::kSelectedGpus, "3"}});
  EXPECT_EQ(e.world_size, 1);
  ASSERT_TRUE(e.gpu);
  EXPECT_EQ(*e.gpu, 3);
  EXPECT_THROW(ParallelEnv::from_env({{env::kSelectedGpus, "x"}}), env::EnvError);
}

TEST(ParallelEnv, ReadsTheContract) {
  env::WorkerContract c;
  c.rank = 1;
  c.world_size = 2;
  c.local_rank = 1;
  c.local_world_size = 2;
  c.endpoints = {{"127.0.0.1", 6170}, {"127.0.0.1", 6171}};
  c.current = c.endpoints[1];
  c.gpu = 1;
  auto e = ParallelEnv::from_env(env::to_env(c));
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.local_rank, 1);
  ASSERT_TRUE(e.gpu);
  EXPECT_EQ(*e.gpu, 1);
  ASSERT_TRUE(e.contract);
  EXPECT_EQ(e.contract->endpoints[0].port, 6170);
}

TEST(ParallelEnv, InconsistentContractNamesTheVariable) {
  env::EnvMap vars{{env::kTrainerId, "2"},
                   {env::kTrainersNum, "2"},
                   {env::kCurrentEndpoint, "127.0.0.1:6170"},
                   {env::kTrainerEndpoints, "127.0.0.1:6170,127.0.0.1:6171"}};
  try {
    ParallelEnv::from_env(vars);
    FAIL() << "rank >= world accepted";
  } catch (const env::EnvError& e) {
    EXPECT_NE(std::string(e.what()).find(env::kTrainerId), std::string::npos) << e.what();
  }
  vars.erase(env::kTrainerEndpoints);
  EXPECT_THROW(ParallelEnv::from_env(vars), env::EnvError);
}

TEST(PrepareContext, WorldOfOneWithoutContract) {
  torch::set_num_threads(1);
  auto ctx = prepare_context(ParallelEnv{});
  ASSERT_TRUE(ctx->comm);
  ASSERT_TRUE(ctx->store);
  EXPECT_EQ(ctx->comm->backend(), "gloo");
  EXPECT_EQ(ctx->world_size(), 1);
  EXPECT_TRUE(ctx->device.is_cpu());
  torch::Tensor t = torch::arange(5, torch::kFloat);
  ctx->comm->all_reduce(t, ReduceOp::kAverage);
  EXPECT_TRUE(torch::equal(t, torch::arange(5, torch::kFloat)));
  ctx->comm->barrier();

  // DataParallel on a world of one changes nothing but still routes gradients through buckets.
  torch::nn::Linear net(3, 2);
  DataParallel dp(*net, *ctx, DataParallel::Options{16});  // tiny buckets: one per parameter
  auto x = torch::ones({4, 3});
  auto loss = dp.scale_loss(net->forward(x).sum());
  loss.backward();
  auto weight_grad = net->weight.grad().clone();
  dp.apply_collective_grads();
  EXPECT_TRUE(torch::equal(net->weight.grad(), weight_grad));
}

TEST(PrepareContext, GpuWithoutUsableCudaFallsBackToGloo) {
  ParallelEnv e;
  e.gpu = 0;
  if (torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch has CUDA";
  auto ctx = prepare_context(e);
  EXPECT_EQ(ctx->comm->backend(), "gloo");
  EXPECT_TRUE(ctx->device.is_cpu());
}

TEST(PrepareContext, AskingForNcclWithoutGpuIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch has CUDA";
  ParallelEnv e;
  e.gpu = 0;
  ContextOptions options;
  options.backend = Backend::kNccl;
  try {
    prepare_context(e, options);
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("nccl on rank 0 of 1"), std::string::npos) << e.what();
  }
}

TEST(PrepareContext, SeveralRanksNeedAContract) {
  ParallelEnv e;
  e.rank = 1;
  e.world_size = 2;
  EXPECT_THROW(prepare_context(e), env::EnvError);
}

// --- DistributedBatchSampler -----------------------------------------------------------------

std::vector<std::int64_t> flatten(const std::vector<torch::Tensor>& batches) {
  std::vector<std::int64_t> out;
  for (const auto& b : batches) {
    EXPECT_EQ(b.scalar_type(), torch::kLong);
    EXPECT_EQ(b.dim(), 1);
    auto* p = b.data_ptr<std::int64_t>();
    out.insert(out.end(), p, p + b.numel());
  }
  return out;
}

TEST(DistributedBatchSampler, DisjointSharesSameCountEveryRank) {
  constexpr std::int64_t kSize = 1003, kBatch = 10;
  for (int world : {1, 2, 3, 4}) {
    std::set<std::int64_t> seen;
    const std::int64_t expected_batches = kSize / (kBatch * world);
    for (int rank = 0; rank < world; ++rank) {
      DistributedBatchSampler s(kSize, kBatch, rank, world, 42);
      EXPECT_EQ(s.batches_per_epoch(), expected_batches);
      auto batches = s.batches(0);
      ASSERT_EQ(static_cast<std::int64_t>(batches.size()), expected_batches);
      for (const auto& b : batches) EXPECT_EQ(b.numel(), kBatch);
      for (auto i : flatten(batches)) {
        EXPECT_GE(i, 0);
        EXPECT_LT(i, kSize);
        EXPECT_TRUE(seen.insert(i).second)
            << "index " << i << " given twice (world " << world << ")";
      }
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), expected_batches * kBatch * world);
  }
}

TEST(DistributedBatchSampler, DeterministicPerSeedAndEpochDiffersAcrossEpochs) {
  DistributedBatchSampler a(500, 8, 1, 2, 7), b(500, 8, 1, 2, 7), other_seed(500, 8, 1, 2, 8);
  EXPECT_EQ(flatten(a.batches(3)), flatten(b.batches(3)));
  EXPECT_NE(flatten(a.batches(3)), flatten(a.batches(4)));
  EXPECT_NE(flatten(a.batches(3)), flatten(other_seed.batches(3)));
}

TEST(DistributedBatchSampler, WithoutShuffleRanksInterleaveInOrder) {
  DistributedBatchSampler r0(20, 3, 0, 2, 0, false), r1(20, 3, 1, 2, 0, false);
  EXPECT_EQ(flatten(r0.batches(5)), (std::vector<std::int64_t>{0, 1, 2, 6, 7, 8, 12, 13, 14}));
  EXPECT_EQ(flatten(r1.batches(5)), (std::vector<std::int64_t>{3, 4, 5, 9, 10, 11, 15, 16, 17}));
}

TEST(DistributedBatchSampler, TooSmallDatasetGivesNoBatchesOnEveryRank) {
  DistributedBatchSampler s(7, 4, 1, 2, 0);
  EXPECT_EQ(s.batches_per_epoch(), 0);
  EXPECT_TRUE(s.batches(0).empty());
}

TEST(DistributedBatchSampler, RefusesBadArguments) {
  EXPECT_THROW(DistributedBatchSampler(10, 0, 0, 1, 0), std::invalid_argument);
  EXPECT_THROW(DistributedBatchSampler(-1, 2, 0, 1, 0), std::invalid_argument);
  EXPECT_THROW(DistributedBatchSampler(10, 2, 2, 2, 0), std::invalid_argument);
  EXPECT_THROW(DistributedBatchSampler(10, 2, 0, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ddl
