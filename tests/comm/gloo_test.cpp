// Gloo collectives with 1 to 4 ranks, each rank a separate process, checked against exact
// expected values; and dead or stuck peers surfacing as CommError within the timeout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/support/multiprocess.h"
#include "worker/comm/gloo_communicator.h"
#include "store/memory_store.h"

namespace ddl {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using testing::run_ranks;

class GlooTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

// Failure inside a rank process: throw with the message; the process exits 1.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void require_equal(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  if (got.scalar_type() != want.scalar_type() || !got.sizes().equals(want.sizes()) ||
      !torch::equal(got, want)) {
    std::ostringstream s;
    s << what << ": got " << got.scalar_type() << got.sizes() << " first "
      << got.reshape({-1}).slice(0, 0, 4) << ", want " << want.scalar_type() << want.sizes()
      << " first " << want.reshape({-1}).slice(0, 0, 4);
    throw std::runtime_error(s.str());
  }
}

std::unique_ptr<Communicator> connect(RankContext& ctx, std::chrono::milliseconds timeout = 30s) {
  GlooOptions options;
  options.rank = ctx.rank;
  options.world_size = ctx.world_size;
  options.host = "127.0.0.1";
  options.timeout = timeout;
  return make_gloo_communicator(ctx.store, options);
}

void expect_all_ok(const std::vector<testing::RankResult>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].exited && results[r].signal == 0 && results[r].exit_code == 0)
        << "rank " << r << ": " << testing::describe(results[r]);
  }
}

// Rank r contributes (r + 1) * (i + 1) at element i (exact in every dtype used here).
torch::Tensor contribution(int rank, std::int64_t n, torch::Dtype dtype) {
  return (torch::arange(n, torch::kLong) + 1).mul(rank + 1).to(dtype);
}

// Sum over ranks: (i + 1) * world * (world + 1) / 2.
torch::Tensor expected_sum(int world, std::int64_t n, torch::Dtype dtype) {
  return (torch::arange(n, torch::kLong) + 1).mul(world * (world + 1) / 2).to(dtype);
}

void collective_suite(RankContext& ctx) {
  auto comm = connect(ctx);
  const int world = ctx.world_size;
  require(comm->rank() == ctx.rank && comm->size() == world && comm->backend() == "gloo",
          "rank/size/backend");

  // all_reduce sum and average, several dtypes and sizes (0, fewer elements than ranks, odd,
  // and large enough to span several of Gloo's 1 MB ring segments).
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}) {
    for (std::int64_t n : {0, 1, 7, 1000, (1 << 20) + 3}) {
      const std::string what =
          std::string("all_reduce ") + c10::toString(dtype) + " n=" + std::to_string(n);
      torch::Tensor t = contribution(ctx.rank, n, dtype);
      comm->all_reduce(t, ReduceOp::kSum);
      require_equal(t, expected_sum(world, n, dtype), what + " sum");

      torch::Tensor a = contribution(ctx.rank, n, dtype);
      comm->all_reduce(a, ReduceOp::kAverage);
      torch::Tensor want = expected_sum(world, n, dtype);
      if (torch::isFloatingType(dtype)) {
        want = want / world;
      } else {
        want = want.div(world, "trunc");
      }
      require_equal(a, want, what + " average");
    }
  }
  // Random floats, large enough for the two-rank pipelined halves (several pieces, odd length):
  // every rank ends with the same bits, and with two ranks exactly the sum a + b.
  {
    const std::int64_t n = (3 << 20) + 5;
    auto random_of = [&](int rank) {
      return torch::randn({n}, torch::TensorOptions().dtype(torch::kFloat)) * (rank + 1);
    };
    torch::manual_seed(100 + ctx.rank);
    torch::Tensor t = random_of(ctx.rank);
    comm->all_reduce(t, ReduceOp::kSum);
    torch::Tensor want = torch::zeros({n});
    for (int r = 0; r < world; ++r) {
      torch::manual_seed(100 + r);
      want += random_of(r);
    }
    if (world == 2) {
      require_equal(t, want, "all_reduce random float sum of two ranks");
    } else {
      require(torch::allclose(t, want, 1e-5, 1e-5), "all_reduce random float sum");
    }
    for (const auto& other : comm->all_gather(t)) {
      require(torch::equal(other, t), "ranks disagree on the bits of a float all_reduce");
    }
  }

  // A multi-dimensional tensor keeps its shape.
  torch::Tensor m = torch::full({3, 4, 5}, ctx.rank + 1.0, torch::kFloat);
  comm->all_reduce(m, ReduceOp::kSum);
  require_equal(m, torch::full({3, 4, 5}, world * (world + 1) / 2.0, torch::kFloat),
                "all_reduce 3-d");

  // broadcast from every root, several dtypes.
  for (int root = 0; root < world; ++root) {
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}) {
      torch::Tensor t = contribution(ctx.rank, 4097, dtype).view({17, 241});
      comm->broadcast(t, root);
      require_equal(t, contribution(root, 4097, dtype).view({17, 241}),
                    "broadcast from " + std::to_string(root) + " " + c10::toString(dtype));
    }
  }

  // all_gather: entry r is rank r's tensor.
  for (auto dtype : {torch::kFloat, torch::kLong}) {
    torch::Tensor mine = contribution(ctx.rank, 6, dtype).view({2, 3});
    auto all = comm->all_gather(mine);
    require(static_cast<int>(all.size()) == world, "all_gather returned the wrong count");
    for (int r = 0; r < world; ++r) {
      require_equal(all[r], contribution(r, 6, dtype).view({2, 3}),
                    "all_gather entry " + std::to_string(r));
    }
  }

  // barrier: every rank marked its arrival before entering, so after it all marks are visible.
  for (int round = 0; round < 3; ++round) {
    const std::string prefix = "arrived/" + std::to_string(round) + "/";
    ctx.store.set(prefix + std::to_string(ctx.rank), {'1'});
    comm->barrier();
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(prefix + std::to_string(r));
    require(ctx.store.check(keys), "barrier returned before every rank arrived");
  }
}

TEST_F(GlooTest, CollectivesOneRankInProcess) {
  MemoryStore store;
  RankContext ctx{0, 1, store};
  EXPECT_NO_THROW(collective_suite(ctx));
}

TEST_F(GlooTest, CollectivesTwoRanks) { expect_all_ok(run_ranks(2, collective_suite)); }
TEST_F(GlooTest, CollectivesThreeRanks) { expect_all_ok(run_ranks(3, collective_suite)); }
TEST_F(GlooTest, CollectivesFourRanks) { expect_all_ok(run_ranks(4, collective_suite)); }

TEST_F(GlooTest, RefusesBadTensorsWithContext) {
  MemoryStore store;
  auto comm = make_gloo_communicator(store, GlooOptions{});
  torch::Tensor bytes = torch::zeros({4}, torch::kUInt8);
  try {
    comm->all_reduce(bytes, ReduceOp::kSum);
    FAIL() << "uint8 all_reduce did not throw";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("gloo all_reduce on rank 0 of 1"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("unsupported dtype"), std::string::npos) << e.what();
  }
  torch::Tensor strided = torch::zeros({4, 4}).t();
  EXPECT_THROW(comm->broadcast(strided, 0), CommError);
  torch::Tensor ok = torch::zeros({4});
  EXPECT_THROW(comm->broadcast(ok, 1), CommError);
  EXPECT_THROW(comm->all_gather(torch::Tensor()), CommError);
}

TEST_F(GlooTest, RefusesBadOptions) {
  MemoryStore store;
  GlooOptions options;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THROW(make_gloo_communicator(store, options), CommError);
  options.rank = 0;
  options.timeout = 0ms;
  EXPECT_THROW(make_gloo_communicator(store, options), CommError);
}

// A rank that exits before a collective: the survivors throw CommError naming the operation and
// their rank, well within the timeout (the closed connection is seen at once).
void dead_peer_case(int world, std::int64_t numel = 1000) {
  constexpr auto kTimeout = 3s;
  auto results = run_ranks(
      world,
      [&](RankContext& ctx) {
        auto comm = connect(ctx, kTimeout);
        torch::Tensor t = torch::ones({numel});
        comm->all_reduce(t, ReduceOp::kSum);    // everyone is up
        if (ctx.rank == world - 1) ::_exit(0);  // dies without a word
        const auto start = std::chrono::steady_clock::now();
        try {
          for (int i = 0; i < 10; ++i) comm->all_reduce(t, ReduceOp::kSum);
        } catch (const CommError& e) {
          const auto elapsed = std::chrono::steady_clock::now() - start;
          const std::string what = e.what();
          std::fprintf(stderr, "[rank %d] expected error: %s\n", ctx.rank, what.c_str());
          require(what.find("gloo all_reduce on rank " + std::to_string(ctx.rank) + " of " +
                            std::to_string(world)) != std::string::npos,
                  "error lacks context: " + what);
          require(elapsed < kTimeout + 2s,
                  "took " +
                      std::to_string(
                          std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()) +
                      " ms to notice the dead peer");
          return;
        }
        throw std::runtime_error("all_reduce with a dead peer did not throw");
      },
      60s);
  ASSERT_EQ(results.size(), static_cast<std::size_t>(world));
  expect_all_ok(results);
}

TEST_F(GlooTest, DeadPeerTwoRanksFailsFast) { dead_peer_case(2); }
TEST_F(GlooTest, DeadPeerThreeRanksFailsFast) { dead_peer_case(3); }
// 16 MiB: the two-rank pipelined halves instead of the single exchange.
TEST_F(GlooTest, DeadPeerTwoRanksLargeTensorFailsFast) { dead_peer_case(2, 1 << 22); }

// A rank that is alive but never joins the collective: the other rank gives up at the timeout.
TEST_F(GlooTest, StuckPeerTimesOut) {
  constexpr auto kTimeout = 2s;
  auto results = run_ranks(
      2,
      [&](RankContext& ctx) {
        auto comm = connect(ctx, kTimeout);
        comm->barrier();
        if (ctx.rank == 1) {
          // Stuck: alive and connected, but not in the collective, until rank 0 has given up.
          ctx.store.wait({"gave_up"}, 30s);
          ::_exit(0);
        }
        torch::Tensor t = torch::ones({10});
        const auto start = std::chrono::steady_clock::now();
        try {
          comm->all_reduce(t, ReduceOp::kSum);
        } catch (const CommError& e) {
          const auto elapsed = std::chrono::steady_clock::now() - start;
          ctx.store.set("gave_up", {'1'});
          std::fprintf(stderr, "[rank 0] expected error: %s\n", e.what());
          require(elapsed >= kTimeout - 200ms && elapsed < kTimeout + 3s,
                  "timed out after " +
                      std::to_string(
                          std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()) +
                      " ms, expected about " + std::to_string(kTimeout.count()) + " s");
          return;
        }
        throw std::runtime_error("all_reduce with a stuck peer did not throw");
      },
      60s);
  expect_all_ok(results);
}

// A peer that never shows up: building the mesh fails at the timeout with a CommError.
TEST_F(GlooTest, MissingPeerFailsToConnect) {
  MemoryStore store;
  GlooOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.timeout = 500ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    make_gloo_communicator(store, options);
    FAIL() << "connect without the peer did not throw";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("gloo connect on rank 0 of 2"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

}  // namespace
}  // namespace ddl
