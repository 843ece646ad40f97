// Gloo collectives with 1 to 4 ranks, point to point and sub-groups, each rank a separate process,
// checked against exact expected values; bad arguments refused with context; and dead or stuck
// peers surfacing as CommError within the timeout.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "store/memory_store.h"
#include "tests/worker/comm/rank_checks.h"
#include "tests/support/multiprocess.h"
#include "worker/comm/gloo_communicator.h"

namespace ddl {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using testing::run_ranks;

class GlooTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

using testing::expect_all_ok;
using testing::require;
using testing::require_comm_error;

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

// --- point to point ------------------------------------------------------------------------------

TEST_F(GlooTest, PingPongTwoRanks) {
  auto body = [](RankContext& ctx) {
    auto comm = connect(ctx);
    const int peer = 1 - ctx.rank;
    for (int round = 0; round < 10; ++round) {
      for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}) {
        const std::string what = "round " + std::to_string(round) + " " + c10::toString(dtype);
        torch::Tensor ball = torch::empty({3, 5}, dtype);
        if (ctx.rank == 0) {
          ball = contribution(round, 15, dtype).view({3, 5});
          comm->send(ball, peer);
          comm->recv(ball, peer);
          require_equal(ball, contribution(round, 15, dtype).view({3, 5}) * 2, what + " pong");
        } else {
          comm->recv(ball, peer);
          require_equal(ball, contribution(round, 15, dtype).view({3, 5}), what + " ping");
          ball.mul_(2);
          comm->send(ball, peer);
        }
      }
    }
    // The shape may differ as long as dtype and element count agree.
    torch::Tensor flat = torch::empty({15}, torch::kFloat);
    if (ctx.rank == 0) {
      comm->send(torch::arange(15, torch::kFloat).view({3, 5}), 1);
    } else {
      comm->recv(flat, 0);
      require_equal(flat, torch::arange(15, torch::kFloat), "reshaped message");
    }
    comm->barrier();
  };
  expect_all_ok(run_ranks(2, body, 60s));
}

TEST_F(GlooTest, RingThreeRanks) {
  auto body = [](RankContext& ctx) {
    auto comm = connect(ctx);
    const int world = ctx.world_size;
    const int next = (ctx.rank + 1) % world;
    const int prev = (ctx.rank + world - 1) % world;
    // Each rank adds its contribution to the running sum and passes it on; rank 0 starts and ends.
    for (int round = 0; round < 3; ++round) {
      torch::Tensor acc = torch::empty({100}, torch::kLong);
      if (ctx.rank == 0) {
        acc = contribution(0, 100, torch::kLong);
        comm->send(acc, next);
        comm->recv(acc, prev);
        require_equal(acc, expected_sum(world, 100, torch::kLong),
                      "ring round " + std::to_string(round));
      } else {
        comm->recv(acc, prev);
        acc += contribution(ctx.rank, 100, torch::kLong);
        comm->send(acc, next);
      }
    }
  };
  expect_all_ok(run_ranks(3, body, 60s));
}

// Ranks 0 and 1 exchange tensors between all-reduces of all three ranks; rank 2 takes no part in
// the point-to-point traffic, so the collectives only line up when it does not use their tags.
TEST_F(GlooTest, PointToPointInterleavedWithAllReduce) {
  auto body = [](RankContext& ctx) {
    auto comm = connect(ctx);
    for (int round = 0; round < 6; ++round) {
      torch::Tensor t = torch::full({257}, static_cast<double>(round), torch::kDouble);
      if (ctx.rank == 0) {
        comm->send(t, 1);
      } else if (ctx.rank == 1) {
        torch::Tensor got = torch::empty({257}, torch::kDouble);
        comm->recv(got, 0);
        require_equal(got, t, "interleaved message " + std::to_string(round));
      }
      torch::Tensor r = contribution(ctx.rank, 1000, torch::kFloat);
      comm->all_reduce(r, ReduceOp::kSum);
      require_equal(r, expected_sum(3, 1000, torch::kFloat), "interleaved all_reduce");
      if (ctx.rank == 1) {
        comm->send(t + 1, 0);
      } else if (ctx.rank == 0) {
        torch::Tensor got = torch::empty({257}, torch::kDouble);
        comm->recv(got, 1);
        require_equal(got, t + 1, "interleaved reply " + std::to_string(round));
      }
      auto gathered = comm->all_gather(torch::full({2}, ctx.rank, torch::kInt));
      for (int r2 = 0; r2 < 3; ++r2) {
        require_equal(gathered[r2], torch::full({2}, r2, torch::kInt), "interleaved all_gather");
      }
    }
  };
  expect_all_ok(run_ranks(3, body, 60s));
}

TEST_F(GlooTest, LargeMessages) {
  auto body = [](RankContext& ctx) {
    auto comm = connect(ctx);
    // 6 MiB of float32 and 3 MiB (and a bit) of int64, both ways.
    for (std::int64_t n : {std::int64_t{6} << 18, (std::int64_t{3} << 17) + 11}) {
      const auto dtype = n % 2 == 0 ? torch::kFloat : torch::kLong;
      torch::manual_seed(7 + n);
      const torch::Tensor original = (torch::rand({n}) * 1000).to(dtype);
      torch::Tensor t = ctx.rank == 0 ? original.clone() : torch::empty({n}, dtype);
      if (ctx.rank == 0) {
        comm->send(t, 1);
        comm->recv(t, 1);
        require_equal(t, original + 1, "large reply n=" + std::to_string(n));
      } else {
        comm->recv(t, 0);
        require_equal(t, original, "large message n=" + std::to_string(n));
        comm->send(t + 1, 0);
      }
    }
  };
  expect_all_ok(run_ranks(2, body, 60s));
}

TEST_F(GlooTest, PointToPointRefusesBadArgumentsWithContext) {
  MemoryStore store;
  auto comm = make_gloo_communicator(store, GlooOptions{});
  torch::Tensor ok = torch::zeros({4});
  try {
    comm->send(ok, 0);
    FAIL() << "send to self did not throw";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(), "gloo send on rank 0 of 1 (to rank 0): the peer is this rank itself");
  }
  try {
    comm->recv(ok, 3);
    FAIL() << "recv from rank 3 of 1 did not throw";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(), "gloo recv on rank 0 of 1 (from rank 3): not a rank (expected 0..0)");
  }
  torch::Tensor bytes = torch::zeros({4}, torch::kUInt8);
  try {
    comm->send(bytes, 1);
    FAIL() << "uint8 send did not throw";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(),
                 "gloo send on rank 0 of 1 (to rank 1): unsupported dtype uint8 (expected "
                 "float32, float64, int32 or int64)");
  }
  torch::Tensor strided = torch::zeros({4, 4}).t();
  try {
    comm->recv(strided, 1);
    FAIL() << "non-contiguous recv did not throw";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(), "gloo recv on rank 0 of 1 (from rank 1): tensor is not contiguous");
  }
  torch::Tensor undefined;
  EXPECT_THROW(comm->recv(undefined, 1), CommError);
  EXPECT_THROW(comm->send(torch::Tensor(), 1), CommError);
}

// Sender and receiver disagree on size or dtype: the receiver says what came and what it
// expected, its tensor is untouched, and the next message still arrives.
TEST_F(GlooTest, MismatchedRecvIsAClearError) {
  auto body = [](RankContext& ctx) {
    auto comm = connect(ctx);
    if (ctx.rank == 0) {
      comm->send(torch::ones({10}), 1);
      comm->send(torch::ones({4}, torch::kInt), 1);
      comm->send(torch::full({4}, 9.0), 1);
      comm->barrier();
      return;
    }
    torch::Tensor small = torch::zeros({8});
    require_comm_error(
        [&] { comm->recv(small, 0); },
        {"gloo recv on rank 1 of 2 (from rank 0)", "rank 0 sent 10 float32 elements (40 bytes)",
         "expected 8 float32 elements (32 bytes)"},
        "wrong size");
    require_equal(small, torch::zeros({8}), "tensor after a refused message");
    torch::Tensor floats = torch::zeros({4});
    require_comm_error(
        [&] { comm->recv(floats, 0); },
        {"rank 0 sent 4 int32 elements (16 bytes)", "expected 4 float32 elements (16 bytes)"},
        "wrong dtype");
    comm->recv(floats, 0);
    require_equal(floats, torch::full({4}, 9.0), "message after the refused ones");
    comm->barrier();
  };
  expect_all_ok(run_ranks(2, body, 60s));
}

// A peer that dies while this rank waits in recv: CommError naming it, within the timeout.
TEST_F(GlooTest, DeadPeerDuringRecvFailsWithinTheTimeout) {
  constexpr auto kTimeout = 4s;
  auto body = [&](RankContext& ctx) {
    auto comm = connect(ctx, kTimeout);
    comm->barrier();
    if (ctx.rank == 2) {
      std::this_thread::sleep_for(200ms);
      ::_exit(0);
    }
    if (ctx.rank == 1) return;  // alive, not involved
    torch::Tensor t = torch::empty({1000});
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->recv(t, 2);
    } catch (const CommError& e) {
      const auto elapsed = std::chrono::steady_clock::now() - start;
      std::fprintf(stderr, "[rank 0] expected error: %s\n", e.what());
      require(
          std::string(e.what()).find("gloo recv on rank 0 of 3 (from rank 2)") != std::string::npos,
          std::string("error lacks context: ") + e.what());
      require(elapsed < kTimeout + 1s, "took too long to notice the dead peer");
      return;
    }
    throw std::runtime_error("recv from a dead peer did not throw");
  };
  expect_all_ok(run_ranks(3, body, 60s));
}

// --- sub-groups ----------------------------------------------------------------------------------

std::unique_ptr<Communicator> connect_group(RankContext& ctx, const RankGroup& group) {
  GlooOptions options;
  options.rank = ctx.rank;
  options.world_size = ctx.world_size;
  options.timeout = 30s;
  return make_gloo_communicator(ctx.store, options, group);
}

// Four ranks; the "trainers" 1, 2 and 3 all-reduce in a group while rank 0 (the "server") takes no
// part at all.
TEST_F(GlooTest, GroupOfThreeOutOfFour) {
  auto body = [](RankContext& ctx) {
    if (ctx.rank == 0) {
      ctx.store.wait({"trainers_done/1", "trainers_done/2", "trainers_done/3"}, 60s);
      return;
    }
    auto group = connect_group(ctx, RankGroup{{1, 2, 3}, "trainers"});
    require(group->rank() == ctx.rank - 1 && group->size() == 3 && group->backend() == "gloo",
            "group rank/size/backend");
    for (auto dtype : {torch::kFloat, torch::kLong}) {
      for (std::int64_t n : {1, 1000, (1 << 18) + 1}) {
        // Job rank r contributes (r + 1) * (i + 1): the sum over 1..3 is 9 * (i + 1).
        torch::Tensor t = contribution(ctx.rank, n, dtype);
        group->all_reduce(t, ReduceOp::kSum);
        require_equal(t, (torch::arange(n, torch::kLong) + 1).mul(9).to(dtype),
                      std::string("group all_reduce ") + c10::toString(dtype));
        torch::Tensor a = contribution(ctx.rank, n, dtype);
        group->all_reduce(a, ReduceOp::kAverage);
        require_equal(a, (torch::arange(n, torch::kLong) + 1).mul(3).to(dtype), "group average");
      }
    }
    torch::Tensor b = torch::full({5}, ctx.rank, torch::kInt);
    group->broadcast(b, 1);  // group rank 1 is job rank 2
    require_equal(b, torch::full({5}, 2, torch::kInt), "group broadcast");
    group->barrier();
    ctx.store.set("trainers_done/" + std::to_string(ctx.rank), {'1'});
  };
  expect_all_ok(run_ranks(4, body, 120s));
}

TEST_F(GlooTest, GroupAndWorldAlternate) {
  auto body = [](RankContext& ctx) {
    auto world = connect(ctx);
    std::unique_ptr<Communicator> group;
    if (ctx.rank != 0) group = connect_group(ctx, RankGroup{{1, 2, 3}, ""});
    for (int round = 0; round < 4; ++round) {
      torch::Tensor w = contribution(ctx.rank, 500, torch::kFloat);
      world->all_reduce(w, ReduceOp::kSum);
      require_equal(w, expected_sum(4, 500, torch::kFloat), "world all_reduce");
      if (group) {
        torch::Tensor g = torch::full({500}, ctx.rank * (round + 1), torch::kLong);
        group->all_reduce(g, ReduceOp::kSum);
        require_equal(g, torch::full({500}, 6 * (round + 1), torch::kLong), "group all_reduce");
        // Point to point inside the group, in group ranks: 0 -> 1 -> 2.
        torch::Tensor token = torch::zeros({2}, torch::kLong);
        if (group->rank() == 0) {
          group->send(torch::full({2}, round, torch::kLong), 1);
        } else {
          group->recv(token, group->rank() - 1);
          require_equal(token, torch::full({2}, round, torch::kLong), "group message");
          if (group->rank() == 1) group->send(token, 2);
        }
      }
      // World point to point between rank 0 (outside the group) and rank 3.
      if (ctx.rank == 0) {
        world->send(torch::full({3}, round + 0.5), 3);
      } else if (ctx.rank == 3) {
        torch::Tensor got = torch::empty({3});
        world->recv(got, 0);
        require_equal(got, torch::full({3}, round + 0.5), "world message");
      }
      world->barrier();
    }
  };
  expect_all_ok(run_ranks(4, body, 120s));
}

TEST_F(GlooTest, GroupRefusesBadListsWithContext) {
  MemoryStore store;
  GlooOptions options;
  options.rank = 0;
  options.world_size = 4;
  auto message_of = [&](const RankGroup& group) {
    try {
      make_gloo_communicator(store, options, group);
    } catch (const CommError& e) {
      return std::string(e.what());
    }
    return std::string("no CommError");
  };
  EXPECT_EQ(message_of(RankGroup{{1, 2, 3}, ""}),
            "gloo group on job rank 0 of 4: this rank is not a member of the group [1,2,3]; only "
            "members build a group");
  EXPECT_EQ(message_of(RankGroup{{0, 2, 2}, ""}),
            "gloo group on job rank 0 of 4: rank 2 appears twice in the group [0,2,2]");
  EXPECT_EQ(message_of(RankGroup{{0, 7}, ""}),
            "gloo group on job rank 0 of 4: rank 7 in the group [0,7] is not a job rank "
            "(expected 0..3)");
}

}  // namespace
}  // namespace ddl
