// GlooMesh's lazy connections (worker/comm/gloo_lazy.h), ranks as threads of this process over a
// shared MemoryStore or a loopback TcpStore: every collective at world sizes 1..9, 16 and 33;
// point to point between every pair of ranks in an order where the receiving rank is busy (its
// agent must answer); O(log N) pairs after connect at 64 ranks; a lazy connect to a gone peer
// failing within the timeout; connected pairs outliving the store; a prompt destructor.
#include "worker/comm/gloo_lazy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "store/memory_store.h"
#include "store/tcp_store.h"
#include "tests/store/test_util.h"
#include "worker/comm/gloo_mesh.h"

namespace ddl {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Runs body(rank, store) for every rank on its own thread, each with its own store handle from
// `store_for`; returns each rank's error (empty when it finished).
std::vector<std::string> run_threads(int world,
                                     const std::function<std::unique_ptr<Store>(int)>& store_for,
                                     const std::function<void(int, Store&)>& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto store = store_for(r);
        body(r, *store);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r << " of " << errors.size();
  }
}

GlooOptions options_for(int rank, int world, milliseconds timeout = 20s) {
  GlooOptions options;
  options.rank = rank;
  options.world_size = world;
  options.timeout = timeout;
  return options;
}

// Ranks over one MemoryStore (each gets a view of it).
std::vector<std::string> run_memory(int world, const std::function<void(int, Store&)>& body) {
  MemoryStore store;
  return run_threads(
      world, [&](int) { return store.clone(); }, body);
}

TEST(GlooLazyTest, EagerPeersAreSymmetricAndLogarithmic) {
  for (int size : {1, 2, 3, 5, 6, 8, 9, 16, 33, 64, 100, 128, 256}) {
    for (int r = 0; r < size; ++r) {
      const auto peers = gloo_lazy::eager_peers(r, size);
      int bound = 0;
      for (int d = 1; d < size; d <<= 1) bound += 2;
      EXPECT_LE(static_cast<int>(peers.size()), std::min(bound, size - 1)) << r << "/" << size;
      for (int p : peers) {
        EXPECT_NE(p, r);
        const auto back = gloo_lazy::eager_peers(p, size);
        EXPECT_TRUE(std::find(back.begin(), back.end(), r) != back.end())
            << p << " lacks " << r << " at size " << size;
      }
      // Ring neighbours and the barrier's and broadcast's r+-2^k are all there.
      for (int d = 1; d < size; d <<= 1) {
        EXPECT_TRUE(std::find(peers.begin(), peers.end(), (r + d) % size) != peers.end());
        EXPECT_TRUE(std::find(peers.begin(), peers.end(), (r - d % size + size) % size) !=
                    peers.end());
      }
    }
  }
  EXPECT_EQ(gloo_lazy::eager_peers(0, 64).size(), 11u);  // +-1 +-2 +-4 +-8 +-16, 32
}

// Every collective, checked against exact values, with small and ring-sized buffers; no lazy
// pair is opened by any of them.
void all_collectives(int rank, Store& store, int world) {
  auto mesh = GlooMesh::connect(store, options_for(rank, world));
  const int eager = mesh->connected_peers();
  require(eager == static_cast<int>(gloo_lazy::eager_peers(rank, world).size()),
          "connected_peers " + std::to_string(eager));
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{40'000}}) {
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = rank * 1000 + static_cast<std::int64_t>(i);
    mesh->all_reduce_sum(v.data(), n, DType::kInt64);
    const std::int64_t ranks = static_cast<std::int64_t>(world) * (world - 1) / 2;
    for (std::size_t i = 0; i < n; ++i) {
      require(v[i] == ranks * 1000 + static_cast<std::int64_t>(i) * world,
              "all_reduce n=" + std::to_string(n) + " at " + std::to_string(i));
    }
    std::vector<float> f(n, 0.5f);
    mesh->all_reduce_sum(f.data(), n, DType::kFloat32);
    require(f[n - 1] == 0.5f * static_cast<float>(world), "float all_reduce");
  }
  // Broadcast from every root (from a few at 33 ranks).
  for (int root = 0; root < world; root += (world > 16 ? 7 : 1)) {
    std::vector<int> b(13, rank == root ? root + 100 : -1);
    mesh->broadcast(b.data(), b.size() * sizeof(int), root);
    require(std::all_of(b.begin(), b.end(), [&](int x) { return x == root + 100; }),
            "broadcast from " + std::to_string(root));
  }
  std::vector<int> mine(3, rank);
  std::vector<int> all(3 * static_cast<std::size_t>(world), -1);
  mesh->all_gather(mine.data(), mine.size() * sizeof(int), all.data());
  for (std::size_t i = 0; i < all.size(); ++i) {
    require(all[i] == static_cast<int>(i / 3), "all_gather at " + std::to_string(i));
  }
  mesh->barrier();
  require(mesh->connected_peers() == eager, "a collective opened a lazy pair");
  const auto start = Clock::now();
  mesh.reset();
  require(ms_since(start) < 2000, "destructor took " + std::to_string(ms_since(start)) + " ms");
}

TEST(GlooLazyTest, EveryCollectiveAtWorldSizesOneToNineSixteenAndThirtyThree) {
  for (int world : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_no_errors(run_memory(world, [&](int r, Store& s) { all_collectives(r, s, world); }));
  }
}

// Round k: rank i sends to (i + k) % N and receives from (i - k) % N. In each cycle of that shift
// only the lowest rank sends first; every other rank is blocked receiving from its predecessor
// while its successor asks it for a connection, which only its agent can answer.
void shifted_point_to_point(int rank, Store& store, int world) {
  auto mesh = GlooMesh::connect(store, options_for(rank, world));
  for (int k = 1; k < world; ++k) {
    const int to = (rank + k) % world;
    const int from = (rank - k + world) % world;
    const int cycles = std::gcd(k, world);
    std::vector<std::int32_t> out(5 + static_cast<std::size_t>(k));
    std::iota(out.begin(), out.end(), rank * 100 + k);
    std::vector<std::int32_t> in(out.size(), -1);
    if (rank < cycles) {
      mesh->send(out.data(), out.size(), DType::kInt32, to);
      mesh->recv(in.data(), in.size(), DType::kInt32, from);
    } else {
      mesh->recv(in.data(), in.size(), DType::kInt32, from);
      mesh->send(out.data(), out.size(), DType::kInt32, to);
    }
    for (std::size_t i = 0; i < in.size(); ++i) {
      require(in[i] == from * 100 + k + static_cast<std::int32_t>(i),
              "round " + std::to_string(k) + " from " + std::to_string(from));
    }
  }
  require(mesh->connected_peers() == world - 1,
          "connected_peers " + std::to_string(mesh->connected_peers()) + " after talking to all");
  // Collectives still run beside the lazy pairs.
  std::int64_t one = 1;
  mesh->all_reduce_sum(&one, 1, DType::kInt64);
  require(one == world, "all_reduce after point to point");
}

TEST(GlooLazyTest, PointToPointBetweenEveryPairWhileTheReceiverIsBusy) {
  for (int world : {6, 9, 16}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_no_errors(
        run_memory(world, [&](int r, Store& s) { shifted_point_to_point(r, s, world); }));
  }
}

// Over a real TcpStore (three connections per rank): 64 ranks hold O(log N) pairs each after
// connect and after their first collectives, not 63.
TEST(GlooLazyTest, SixtyFourRanksOpenLogarithmicallyManyPairsOverTcpStore) {
  constexpr int kWorld = 64;
  TcpStoreServer server(testing::loopback_options(0));
  std::vector<int> counts(kWorld, -1);
  const auto errors = run_threads(
      kWorld,
      [&](int r) {
        return std::make_unique<TcpStore>(testing::loopback_options(server.port(), r, kWorld));
      },
      [&](int r, Store& store) {
        auto mesh = GlooMesh::connect(store, options_for(r, kWorld));
        mesh->barrier();
        float x = 1.0f;
        mesh->all_reduce_sum(&x, 1, DType::kFloat32);
        require(x == kWorld, "sum " + std::to_string(x));
        counts[static_cast<std::size_t>(r)] = mesh->connected_peers();
        mesh->barrier();  // nobody asks for a lazy pair before every rank has counted
        // One lazy pair: rank r and rank r + 32 +- 3 are not eager peers at 64 ranks.
        const int odd = r % 2 == 0 ? (r + 35) % kWorld : (r - 35 + kWorld) % kWorld;
        int v = r;
        if (r % 2 == 0) {
          mesh->send(&v, sizeof(v), odd);
        } else {
          mesh->recv(&v, sizeof(v), odd);
          require(v == odd, "lazy message");
        }
        require(mesh->connected_peers() == counts[static_cast<std::size_t>(r)] + 1,
                "one more pair after one lazy connect");
        mesh->barrier();
      });
  expect_no_errors(errors);
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(counts[static_cast<std::size_t>(r)], 11) << r;
}

// A peer whose mesh is gone (its agent too) never answers: the lazy connect fails with a
// CommError naming both ranks, after about the mesh timeout.
TEST(GlooLazyTest, LazyConnectToAGonePeerFailsWithinTheTimeout) {
  constexpr int kWorld = 6;  // rank 0's eager peers are 1, 2, 4, 5: rank 3 is lazy
  const milliseconds timeout = 1500ms;
  const auto errors = run_memory(kWorld, [&](int r, Store& store) {
    auto mesh = GlooMesh::connect(store, options_for(r, kWorld, timeout));
    mesh->barrier();
    if (r == 3) {
      mesh.reset();
      store.set("test/gone", {'1'});
      return;
    }
    if (r != 0) return;
    store.get("test/gone", 10s);  // else rank 3's agent might still answer before it stops
    const auto start = Clock::now();
    std::string message;
    try {
      int v = 0;
      mesh->send(&v, sizeof(v), 3);
    } catch (const CommError& e) {
      message = e.what();
    }
    const auto took = ms_since(start);
    require(!message.empty(), "no CommError");
    for (const char* part : {"rank 0", "rank 3", "timed out"}) {
      require(message.find(part) != std::string::npos,
              "message lacks " + std::string(part) + ": " + message);
    }
    require(took >= 1400 && took < 4000, "took " + std::to_string(took) + " ms");
  });
  expect_no_errors(errors);
}

// Rank 0 hosts the store; once it is gone, pairs already connected keep working, a first
// connection fails at once with a CommError, and the destructor returns promptly.
TEST(GlooLazyTest, ConnectedPairsOutliveTheStore) {
  constexpr int kWorld = 6;
  auto server = std::make_unique<TcpStoreServer>(testing::loopback_options(0));
  const std::uint16_t port = server->port();
  std::vector<std::unique_ptr<GlooMesh>> meshes(kWorld);
  auto errors = run_threads(
      kWorld,
      [&](int r) { return std::make_unique<TcpStore>(testing::loopback_options(port, r, kWorld)); },
      [&](int r, Store& store) {
        meshes[static_cast<std::size_t>(r)] = GlooMesh::connect(store, options_for(r, kWorld));
        // Ranks 1 and 4 connect lazily (not eager peers at 6 ranks).
        int v = r;
        if (r == 1) meshes[1]->send(&v, sizeof(v), 4);
        if (r == 4) meshes[4]->recv(&v, sizeof(v), 1);
        meshes[static_cast<std::size_t>(r)]->barrier();
      });
  expect_no_errors(errors);
  server.reset();

  errors = run_threads(
      kWorld, [&](int) { return std::make_unique<MemoryStore>(); },
      [&](int r, Store&) {
        auto& mesh = meshes[static_cast<std::size_t>(r)];
        double x = r;
        mesh->all_reduce_sum(&x, 1, DType::kFloat64);
        require(x == 15.0, "all_reduce after the store went away");
        int v = r;
        if (r == 1) mesh->send(&v, sizeof(v), 4);
        if (r == 4) mesh->recv(&v, sizeof(v), 1);
        if (r == 0 || r == 3) {
          const auto start = Clock::now();
          try {
            mesh->send(&v, sizeof(v), 3 - r);
            throw std::runtime_error("no CommError for a lazy connect without a store");
          } catch (const CommError& e) {
            const std::string message = e.what();
            require(message.find("store") != std::string::npos, message);
          }
          require(ms_since(start) < 5000, "took " + std::to_string(ms_since(start)) + " ms");
        }
        const auto start = Clock::now();
        mesh.reset();
        require(ms_since(start) < 2500,
                "destructor took " + std::to_string(ms_since(start)) + " ms");
      });
  expect_no_errors(errors);
}

}  // namespace
}  // namespace ddl
