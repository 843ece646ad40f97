// GlooMesh on plain buffers, without LibTorch: the collectives, point to point and sub-groups with
// 2 to 4 ranks, each rank a separate process, checked against exact expected values; and clear
// errors for bad peers, mismatched messages, bad rank lists and dead or silent peers.
#include "worker/comm/gloo_mesh.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "store/memory_store.h"
#include "tests/worker/comm/rank_checks.h"
#include "tests/support/multiprocess.h"

namespace ddl {
namespace {

using namespace std::chrono_literals;
using testing::RankContext;
using testing::run_ranks;

using testing::require;
using testing::require_comm_error;

void expect_all_ok(const std::vector<testing::RankResult>& results, std::size_t world) {
  ASSERT_EQ(results.size(), world);
  testing::expect_all_ok(results);
}

GlooOptions options_for(const RankContext& ctx, std::chrono::milliseconds timeout) {
  GlooOptions options;
  options.rank = ctx.rank;
  options.world_size = ctx.world_size;
  options.host = "127.0.0.1";
  options.timeout = timeout;
  return options;
}

std::unique_ptr<GlooMesh> connect(RankContext& ctx, std::chrono::milliseconds timeout = 30s) {
  return GlooMesh::connect(ctx.store, options_for(ctx, timeout));
}

long long ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

// Byte i of rank r's buffer number `round`.
char pattern(int rank, std::size_t i, int round = 0) {
  return static_cast<char>((i * 131 + static_cast<std::size_t>(rank) * 17 + round * 7) & 0xff);
}

std::vector<char> pattern_of(int rank, std::size_t bytes, int round = 0) {
  std::vector<char> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = pattern(rank, i, round);
  return out;
}

// --- collectives ---------------------------------------------------------------------------------

void collectives(RankContext& ctx) {
  auto mesh = connect(ctx);
  const int world = ctx.world_size;
  require(mesh->rank() == ctx.rank && mesh->size() == world, "rank/size");
  const std::int64_t triangle = world * (world + 1) / 2;

  // Sizes: empty, one element, odd, just above the two-rank exchange limit (so two ranks take the
  // pipelined halves) and several of Gloo's ring segments.
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{40'000},
                        std::size_t{(1u << 20) + 3}}) {
    std::vector<float> f(n);
    std::vector<std::int64_t> l(n);
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = static_cast<float>((ctx.rank + 1) * static_cast<std::int64_t>(i % 1000 + 1));
      l[i] = (ctx.rank + 1) * static_cast<std::int64_t>(i + 1);
    }
    mesh->all_reduce_sum(f.data(), n, DType::kFloat32);
    mesh->all_reduce_sum(l.data(), n, DType::kInt64);
    for (std::size_t i = 0; i < n; ++i) {
      const auto want_f = static_cast<float>(triangle * static_cast<std::int64_t>(i % 1000 + 1));
      const auto want_l = triangle * static_cast<std::int64_t>(i + 1);
      if (f[i] != want_f || l[i] != want_l) {
        throw std::runtime_error("all_reduce_sum n=" + std::to_string(n) + " element " +
                                 std::to_string(i) + ": got " + std::to_string(f[i]) + " / " +
                                 std::to_string(l[i]) + ", want " + std::to_string(want_f) + " / " +
                                 std::to_string(want_l));
      }
    }
  }

  for (int root = 0; root < world; ++root) {
    std::vector<char> data = pattern_of(ctx.rank, 5000, root);
    mesh->broadcast(data.data(), data.size(), root);
    require(data == pattern_of(root, 5000, root), "broadcast from " + std::to_string(root));
  }

  const std::size_t bytes = 37;
  const std::vector<char> mine = pattern_of(ctx.rank, bytes);
  std::vector<char> all(bytes * static_cast<std::size_t>(world));
  mesh->all_gather(mine.data(), bytes, all.data());
  for (int r = 0; r < world; ++r) {
    require(std::equal(all.begin() + r * bytes, all.begin() + (r + 1) * bytes,
                       pattern_of(r, bytes).begin()),
            "all_gather entry " + std::to_string(r));
  }

  // Every rank marks its arrival before the barrier, so after it every mark is visible.
  for (int round = 0; round < 3; ++round) {
    const std::string prefix = "mesh_arrived/" + std::to_string(round) + "/";
    ctx.store.set(prefix + std::to_string(ctx.rank), {'1'});
    mesh->barrier();
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(prefix + std::to_string(r));
    require(ctx.store.check(keys), "barrier returned before every rank arrived");
  }
}

TEST(GlooMesh, CollectivesTwoRanks) { expect_all_ok(run_ranks(2, collectives, 120s), 2); }
TEST(GlooMesh, CollectivesThreeRanks) { expect_all_ok(run_ranks(3, collectives, 120s), 3); }

TEST(GlooMesh, WorldOfOneIsLocal) {
  MemoryStore store;
  auto mesh = GlooMesh::connect(store, GlooOptions{});
  std::vector<std::int32_t> v{1, 2, 3};
  mesh->all_reduce_sum(v.data(), v.size(), DType::kInt32);
  EXPECT_EQ(v, (std::vector<std::int32_t>{1, 2, 3}));
  mesh->broadcast(v.data(), sizeof(std::int32_t) * v.size(), 0);
  std::vector<std::int32_t> gathered(3);
  mesh->all_gather(v.data(), sizeof(std::int32_t) * v.size(), gathered.data());
  EXPECT_EQ(gathered, v);
  mesh->barrier();
}

// --- point to point ------------------------------------------------------------------------------

void point_to_point(RankContext& ctx) {
  auto mesh = connect(ctx);
  const int world = ctx.world_size;

  // Ping-pong between ranks 0 and 1: each side adds one and sends the counter back. The others
  // take no part.
  if (ctx.rank < 2) {
    for (std::int64_t round = 0; round < 20; ++round) {
      std::int64_t value = -1;
      if (ctx.rank == 0) {
        value = 2 * round;
        mesh->send(&value, 1, DType::kInt64, 1);
        mesh->recv(&value, 1, DType::kInt64, 1);
        require(value == 2 * round + 1,
                "pong " + std::to_string(round) + ": got " + std::to_string(value));
      } else {
        mesh->recv(&value, 1, DType::kInt64, 0);
        require(value == 2 * round,
                "ping " + std::to_string(round) + ": got " + std::to_string(value));
        ++value;
        mesh->send(&value, 1, DType::kInt64, 0);
      }
    }
  }

  // A token around the ring 0 -> 1 -> ... -> world-1 -> 0, each rank adding its rank + 1.
  {
    std::int64_t token = 0;
    const int next = (ctx.rank + 1) % world;
    const int prev = (ctx.rank + world - 1) % world;
    if (ctx.rank == 0) {
      token = 1;
      mesh->send(&token, 1, DType::kInt64, next);
      mesh->recv(&token, 1, DType::kInt64, prev);
      require(token == world * (world + 1) / 2, "ring token: got " + std::to_string(token));
    } else {
      mesh->recv(&token, 1, DType::kInt64, prev);
      token += ctx.rank + 1;
      mesh->send(&token, 1, DType::kInt64, next);
    }
  }

  // Ordering: ten messages of different sizes from rank 1 to rank 0 arrive in order.
  if (ctx.rank == 1) {
    for (int i = 0; i < 10; ++i) {
      const std::vector<char> data = pattern_of(1, 100 + i, i);
      mesh->send(data.data(), data.size(), 0);
    }
  } else if (ctx.rank == 0) {
    for (int i = 0; i < 10; ++i) {
      std::vector<char> data(100 + i);
      mesh->recv(data.data(), data.size(), 1);
      require(data == pattern_of(1, 100 + i, i), "message " + std::to_string(i) + " out of order");
    }
  }

  // Large (4 MiB and a few bytes) and empty messages, from the last rank to rank 0.
  {
    const std::size_t big = (4u << 20) + 5;
    const int last = world - 1;
    if (ctx.rank == last) {
      const std::vector<char> data = pattern_of(last, big);
      mesh->send(data.data(), data.size(), 0);
      mesh->send(nullptr, 0, 0);
    } else if (ctx.rank == 0) {
      std::vector<char> data(big);
      mesh->recv(data.data(), data.size(), last);
      require(data == pattern_of(last, big), "4 MiB message corrupted");
      mesh->recv(nullptr, 0, last);
    }
  }

  // Interleaved with collectives: ranks 0 and 1 exchange messages between all-reduces that the
  // whole mesh runs. Rank 2 (when there is one) sends nothing, so a shared tag space would leave
  // the ranks' collectives on different tags.
  for (int round = 0; round < 5; ++round) {
    if (ctx.rank == 0) {
      std::vector<char> data = pattern_of(0, 3000, round);
      mesh->send(data.data(), data.size(), 1);
      mesh->recv(data.data(), data.size(), 1);
      require(data == pattern_of(1, 3000, round), "interleaved reply");
    } else if (ctx.rank == 1) {
      std::vector<char> data(3000);
      mesh->recv(data.data(), data.size(), 0);
      require(data == pattern_of(0, 3000, round), "interleaved message");
      data = pattern_of(1, 3000, round);
      mesh->send(data.data(), data.size(), 0);
    }
    std::vector<double> v(300, ctx.rank + round);
    mesh->all_reduce_sum(v.data(), v.size(), DType::kFloat64);
    const double want = world * (world - 1) / 2.0 + world * round;
    for (double x : v) require(x == want, "interleaved all_reduce");
    std::vector<char> b = pattern_of(ctx.rank, 64, round);
    mesh->broadcast(b.data(), b.size(), world - 1);
    require(b == pattern_of(world - 1, 64, round), "interleaved broadcast");
  }
  mesh->barrier();
}

TEST(GlooMesh, PointToPointTwoRanks) { expect_all_ok(run_ranks(2, point_to_point, 120s), 2); }
TEST(GlooMesh, PointToPointThreeRanks) { expect_all_ok(run_ranks(3, point_to_point, 120s), 3); }

// A message of another size or element type: recv throws naming both, leaves the buffer alone and
// consumes the message, so the next one is received normally.
TEST(GlooMesh, MismatchedMessageIsReportedAndConsumed) {
  auto body = [](RankContext& ctx) {
    auto mesh = connect(ctx);
    if (ctx.rank == 0) {
      const std::vector<char> bytes = pattern_of(0, 200);
      mesh->send(bytes.data(), bytes.size(), 1);
      const float floats[4] = {1, 2, 3, 4};
      mesh->send(floats, 4, DType::kFloat32, 1);
      mesh->send(bytes.data(), 16, 1);  // 16 raw bytes where rank 1 expects 4 int32
      const std::int32_t ints[4] = {5, 6, 7, 8};
      mesh->send(ints, 4, DType::kInt32, 1);
      mesh->barrier();
      return;
    }
    std::vector<char> small(100, 'x');
    require_comm_error(
        [&] { mesh->recv(small.data(), small.size(), 0); },
        {"gloo recv on rank 1 of 2 (from rank 0)", "rank 0 sent 200 bytes", "expected 100 bytes"},
        "short buffer");
    require(small == std::vector<char>(100, 'x'), "a refused message was written to the buffer");
    std::int32_t ints[4] = {0, 0, 0, 0};
    require_comm_error(
        [&] { mesh->recv(ints, 4, DType::kInt32, 0); },
        {"sent 4 float32 elements (16 bytes)", "expected 4 int32 elements (16 bytes)"},
        "wrong element type");
    require_comm_error([&] { mesh->recv(ints, 4, DType::kInt32, 0); },
                       {"sent 16 bytes, expected 4 int32 elements"}, "raw bytes for a typed recv");
    mesh->recv(ints, 4, DType::kInt32, 0);
    require(ints[0] == 5 && ints[3] == 8, "the message after the refused ones");
    mesh->barrier();
  };
  expect_all_ok(run_ranks(2, body, 60s), 2);
}

TEST(GlooMesh, BadPeersAreRefusedBeforeAnythingMoves) {
  MemoryStore store;
  auto one = GlooMesh::connect(store, GlooOptions{});
  char byte = 0;
  auto message_of = [](auto&& call) {
    try {
      call();
    } catch (const CommError& e) {
      return std::string(e.what());
    }
    return std::string("no CommError");
  };
  EXPECT_EQ(message_of([&] { one->send(&byte, 1, 0); }),
            "gloo send on rank 0 of 1 (to rank 0): the peer is this rank itself");
  EXPECT_EQ(message_of([&] { one->recv(&byte, 1, 1); }),
            "gloo recv on rank 0 of 1 (from rank 1): not a rank (expected 0..0)");
  EXPECT_EQ(message_of([&] { one->recv(&byte, 1, DType::kInt32, -1); }),
            "gloo recv on rank 0 of 1 (from rank -1): not a rank (expected 0..0)");

  // With a real peer: refused calls leave the message order intact.
  auto body = [](RankContext& ctx) {
    auto mesh = connect(ctx);
    std::int64_t value = 41 + ctx.rank;
    require_comm_error([&] { mesh->send(&value, 1, DType::kInt64, 2); },
                       {"(to rank 2): not a rank (expected 0..1)"}, "out of range");
    require_comm_error([&] { mesh->recv(&value, 1, DType::kInt64, ctx.rank); },
                       {"the peer is this rank itself"}, "self");
    if (ctx.rank == 0) {
      mesh->send(&value, 1, DType::kInt64, 1);
    } else {
      mesh->recv(&value, 1, DType::kInt64, 0);
      require(value == 41, "message after refused calls");
    }
    mesh->barrier();
  };
  expect_all_ok(run_ranks(2, body, 60s), 2);
}

// A peer that dies while this rank waits in recv: CommError naming the peer, well within the
// timeout (the closed connection is seen at once).
TEST(GlooMesh, DeadPeerDuringRecvFailsFast) {
  constexpr auto kTimeout = 5s;
  auto body = [&](RankContext& ctx) {
    auto mesh = connect(ctx, kTimeout);
    mesh->barrier();
    if (ctx.rank == 1) {
      std::this_thread::sleep_for(200ms);  // rank 0 is inside recv by now
      ::_exit(0);
    }
    std::vector<char> data(1000);
    const auto start = std::chrono::steady_clock::now();
    require_comm_error([&] { mesh->recv(data.data(), data.size(), 1); },
                       {"gloo recv on rank 0 of 2 (from rank 1)"}, "recv from a dead peer");
    require(ms_since(start) < 4000,
            "took " + std::to_string(ms_since(start)) + " ms to notice the dead peer");
  };
  expect_all_ok(run_ranks(2, body, 60s), 2);
}

// A peer that is alive but never sends: recv gives up at the timeout.
TEST(GlooMesh, SilentPeerRecvTimesOut) {
  constexpr auto kTimeout = 1500ms;
  auto body = [&](RankContext& ctx) {
    auto mesh = connect(ctx, kTimeout);
    mesh->barrier();
    if (ctx.rank == 1) {
      ctx.store.wait({"gave_up"}, 30s);
      ::_exit(0);
    }
    std::int64_t value = 0;
    const auto start = std::chrono::steady_clock::now();
    try {
      mesh->recv(&value, 1, DType::kInt64, 1);
    } catch (const CommError& e) {
      const long long took = ms_since(start);
      ctx.store.set("gave_up", {'1'});
      std::fprintf(stderr, "[rank 0] expected error: %s\n", e.what());
      require(
          std::string(e.what()).find("gloo recv on rank 0 of 2 (from rank 1)") != std::string::npos,
          std::string("error lacks context: ") + e.what());
      require(took >= 1300 && took < 4500,
              "gave up after " + std::to_string(took) + " ms, expected about 1500");
      return;
    }
    ctx.store.set("gave_up", {'1'});
    throw std::runtime_error("recv from a silent peer did not throw");
  };
  expect_all_ok(run_ranks(2, body, 60s), 2);
}

// --- sub-groups ----------------------------------------------------------------------------------

using testing::error_of;

TEST(RankGroup, PlacesTheRankAndNamesThePrefix) {
  const GroupPlace p = place_in_group("gloo", 2, 4, RankGroup{{1, 2, 3}, ""}, "gloo");
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.size, 3);
  EXPECT_EQ(p.job_rank, 2);
  EXPECT_EQ(p.store_prefix, "gloo/group/ranks_1_2_3");
  EXPECT_EQ(p.ranks_text, "1,2,3");
  // Order matters: it is the renumbering.
  const GroupPlace q = place_in_group("gloo", 2, 4, RankGroup{{3, 2}, ""}, "gloo");
  EXPECT_EQ(q.rank, 1);
  EXPECT_EQ(q.store_prefix, "gloo/group/ranks_3_2");
  EXPECT_EQ(place_in_group("nccl", 0, 2, RankGroup{{0, 1}, "trainers"}, "nccl").store_prefix,
            "nccl/group/trainers");
  // A long list gets a summarised label that still tells lists apart.
  std::vector<int> many(40);
  std::iota(many.begin(), many.end(), 0);
  std::vector<int> other = many;
  std::swap(other[5], other[6]);
  const std::string a = place_in_group("gloo", 0, 40, RankGroup{many, ""}, "gloo").label;
  const std::string b = place_in_group("gloo", 0, 40, RankGroup{other, ""}, "gloo").label;
  EXPECT_NE(a, b);
  EXPECT_LT(a.size(), 64u) << a;
  EXPECT_EQ(a.find('/'), std::string::npos) << a;
}

TEST(RankGroup, RefusesBadListsWithContext) {
  auto place = [](int rank, std::vector<int> ranks, std::string name = "") {
    return error_of([&] { place_in_group("gloo", rank, 4, RankGroup{ranks, name}, "gloo"); });
  };
  EXPECT_EQ(place(0, {1, 2, 3}),
            "gloo group on job rank 0 of 4: this rank is not a member of the group [1,2,3]; only "
            "members build a group");
  EXPECT_EQ(place(1, {1, 2, 1}),
            "gloo group on job rank 1 of 4: rank 1 appears twice in the "
            "group [1,2,1]");
  EXPECT_EQ(place(1, {1, 4}),
            "gloo group on job rank 1 of 4: rank 4 in the group [1,4] is not a "
            "job rank (expected 0..3)");
  EXPECT_EQ(place(1, {-1, 1}),
            "gloo group on job rank 1 of 4: rank -1 in the group [-1,1] is not "
            "a job rank (expected 0..3)");
  EXPECT_EQ(place(1, {}), "gloo group on job rank 1 of 4: the group's rank list is empty");
  EXPECT_EQ(place(1, {1}, "a/b"),
            "gloo group on job rank 1 of 4: group name 'a/b' must not "
            "contain '/'");
}

TEST(RankGroup, SecondGroupWithTheSameLabelIsRefused) {
  MemoryStore store;
  GlooOptions options;  // rank 0 of 1
  const RankGroup group{{0}, "solo"};
  auto mesh = GlooMesh::connect_group(store, options, group);
  EXPECT_EQ(mesh->rank(), 0);
  EXPECT_EQ(mesh->size(), 1);
  const std::string again = error_of([&] { GlooMesh::connect_group(store, options, group); });
  EXPECT_NE(again.find("gloo group 'solo' on job rank 0"), std::string::npos) << again;
  EXPECT_NE(again.find("was already used by a group"), std::string::npos) << again;
  // Another name is another prefix.
  EXPECT_NO_THROW(GlooMesh::connect_group(store, options, RankGroup{{0}, "solo2"}));
  EXPECT_THROW(GlooMesh::connect_group(store, options, RankGroup{{1}, ""}), CommError);
}

TEST(RankGroup, MembersMustAgreeOnTheList) {
  MemoryStore store;
  claim_group(store, place_in_group("gloo", 0, 3, RankGroup{{0, 1, 2}, "g"}, "gloo"), "gloo", 1s);
  const std::string seen = error_of([&] {
    claim_group(store, place_in_group("gloo", 2, 3, RankGroup{{0, 2, 1}, "g"}, "gloo"), "gloo", 1s);
  });
  EXPECT_NE(seen.find("group rank 0 built the group over ranks [0,1,2], this rank over [0,2,1]"),
            std::string::npos)
      << seen;
  // A member whose group rank 0 never comes: an error at the timeout, not a hang.
  const auto start = std::chrono::steady_clock::now();
  const std::string missing = error_of([&] {
    claim_group(store, place_in_group("gloo", 1, 2, RankGroup{{0, 1}, "late"}, "gloo"), "gloo",
                200ms);
  });
  EXPECT_NE(missing.find("group rank 0 did not publish its rank list within 200 ms"),
            std::string::npos)
      << missing;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// Four ranks; ranks 1, 2 and 3 build a group and run collectives and point to point in it while
// rank 0 takes no part; then the world mesh and the group are used alternately.
TEST(RankGroup, ThreeOfFourRanksInAGroup) {
  auto body = [](RankContext& ctx) {
    const std::vector<std::string> done = {"group_done/1", "group_done/2", "group_done/3"};
    if (ctx.rank == 0) {
      // Not a member: builds nothing, only keeps the job's store (which it hosts) up.
      ctx.store.wait(done, 60s);
      return;
    }
    auto group =
        GlooMesh::connect_group(ctx.store, options_for(ctx, 30s), RankGroup{{1, 2, 3}, ""});
    require(group->rank() == ctx.rank - 1 && group->size() == 3, "group rank/size");
    std::vector<std::int64_t> v(1000, ctx.rank);
    group->all_reduce_sum(v.data(), v.size(), DType::kInt64);
    for (auto x : v) require(x == 1 + 2 + 3, "group all_reduce: got " + std::to_string(x));
    std::vector<char> b = pattern_of(ctx.rank, 100);
    group->broadcast(b.data(), b.size(), 2);  // group rank 2 is job rank 3
    require(b == pattern_of(3, 100), "group broadcast");
    std::int64_t token = 0;
    if (group->rank() == 0) {
      token = 10;
      group->send(&token, 1, DType::kInt64, 1);
      group->recv(&token, 1, DType::kInt64, 2);
      require(token == 12, "group ring token: got " + std::to_string(token));
    } else {
      group->recv(&token, 1, DType::kInt64, group->rank() - 1);
      ++token;
      group->send(&token, 1, DType::kInt64, (group->rank() + 1) % 3);
    }
    require_comm_error([&] { group->send(&token, 1, DType::kInt64, 3); },
                       {"gloo send on rank ", " of 3 in group 'ranks_1_2_3' (job rank ",
                        "not a rank (expected 0..2)"},
                       "peer outside the group");
    group->barrier();
    ctx.store.set("group_done/" + std::to_string(ctx.rank), {'1'});
  };
  expect_all_ok(run_ranks(4, body, 120s), 4);
}

TEST(RankGroup, GroupAndWorldAlternate) {
  auto body = [](RankContext& ctx) {
    auto world = connect(ctx);
    std::unique_ptr<GlooMesh> group;
    if (ctx.rank != 0) {
      group = GlooMesh::connect_group(ctx.store, options_for(ctx, 30s),
                                      RankGroup{{3, 2, 1}, "trainers"});
      require(group->rank() == 3 - ctx.rank, "renumbered in list order");
    }
    for (int round = 0; round < 4; ++round) {
      std::vector<float> w(5000, static_cast<float>(ctx.rank + round));
      world->all_reduce_sum(w.data(), w.size(), DType::kFloat32);
      for (float x : w) require(x == 6.0f + 4.0f * round, "world all_reduce");
      if (group) {
        std::vector<float> g(5000, static_cast<float>(ctx.rank * round));
        group->all_reduce_sum(g.data(), g.size(), DType::kFloat32);
        for (float x : g) require(x == 6.0f * round, "group all_reduce");
        std::int32_t mine = ctx.rank;
        std::vector<std::int32_t> all(3);
        group->all_gather(&mine, sizeof(mine), all.data());
        require(all == std::vector<std::int32_t>({3, 2, 1}), "group all_gather order");
      }
      world->barrier();
    }
  };
  expect_all_ok(run_ranks(4, body, 120s), 4);
}

}  // namespace
}  // namespace ddl
