// NCCL without a GPU: the unique-id exchange through a store (for the world and for a sub-group),
// and clear errors where NCCL, the device or a valid group rank list is missing.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "store/memory_store.h"
#include "worker/comm/nccl_communicator.h"

namespace ddl {
namespace {

using namespace std::chrono_literals;

// NCCL_UNIQUE_ID_BYTES; the exchange checks it when the build has NCCL.
constexpr std::size_t kIdBytes = 128;

Bytes fake_id() {
  Bytes id(kIdBytes);
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7 + 3);
  return id;
}

TEST(NcclUniqueId, RankZeroPublishesEveryRankReceives) {
  MemoryStore store;
  constexpr int kWorld = 4;
  std::atomic<int> created{0};
  std::vector<Bytes> received(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  // Rank 0 starts last, so the others really wait for the key.
  for (int rank = kWorld - 1; rank >= 0; --rank) {
    threads.emplace_back([&, rank] {
      NcclOptions options;
      options.rank = rank;
      options.world_size = kWorld;
      options.timeout = 10s;
      try {
        received[rank] = exchange_nccl_unique_id(store, options, [&] {
          ++created;
          return fake_id();
        });
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(created.load(), 1);
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(received[rank], fake_id()) << "rank " << rank;
  }
}

TEST(NcclUniqueId, UsesThePrefixSoJobsDoNotMix) {
  MemoryStore store;
  NcclOptions a;
  a.store_prefix = "nccl/a";
  exchange_nccl_unique_id(store, a, fake_id);
  EXPECT_TRUE(store.check({"nccl/a/unique_id"}));
  NcclOptions b;
  b.rank = 1;
  b.world_size = 2;
  b.store_prefix = "nccl/b";
  b.timeout = 100ms;
  EXPECT_THROW(exchange_nccl_unique_id(store, b, fake_id), CommError);
}

TEST(NcclUniqueId, MissingRankZeroTimesOutWithContext) {
  MemoryStore store;
  NcclOptions options;
  options.rank = 1;
  options.world_size = 2;
  options.timeout = 200ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    exchange_nccl_unique_id(
        store, options, []() -> Bytes { throw std::logic_error("create_id called on rank 1"); });
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 did not publish"), std::string::npos) << e.what();
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 5s);
}

TEST(NcclUniqueId, WrongSizeIsRefusedWhenBuiltWithNccl) {
  if (!nccl_available()) GTEST_SKIP() << "size is only known with nccl.h";
  MemoryStore store;
  NcclOptions options;
  EXPECT_THROW(exchange_nccl_unique_id(store, options, [] { return Bytes(5, 'x'); }), CommError);
  store.set("nccl/unique_id", Bytes(5, 'x'));
  options.rank = 1;
  options.world_size = 2;
  try {
    exchange_nccl_unique_id(store, options, fake_id);
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("5 bytes, expected"), std::string::npos) << e.what();
  }
}

TEST(NcclCommunicator, WithoutGpuIsAClearError) {
  MemoryStore store;
  NcclOptions options;
  options.device = 0;
  options.timeout = 1s;
  try {
    make_nccl_communicator(store, options);
    // Only a machine with a GPU gets here; nothing to check about the error then.
    GTEST_SKIP() << "a CUDA device is visible";
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nccl on rank 0 of 1"), std::string::npos) << what;
    if (nccl_available()) {
      EXPECT_NE(what.find("CUDA device 0"), std::string::npos) << what;
    } else {
      EXPECT_NE(what.find("this build has no NCCL"), std::string::npos) << what;
    }
  }
}

// A group's options: group rank and size, and a unique-id key under the group's own prefix, apart
// from the world's and from other groups'.
TEST(NcclGroup, OptionsRenumberAndPrefixTheGroup) {
  NcclOptions job;
  job.rank = 5;
  job.world_size = 8;
  job.device = 1;
  const NcclOptions g = nccl_group_options(job, RankGroup{{4, 5, 6, 7}, ""});
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.world_size, 4);
  EXPECT_EQ(g.device, 1);
  EXPECT_EQ(g.timeout, job.timeout);
  EXPECT_EQ(g.store_prefix, "nccl/group/ranks_4_5_6_7");
  EXPECT_EQ(nccl_group_options(job, RankGroup{{5}, "solo"}).store_prefix, "nccl/group/solo");

  // Group rank 0 (job rank 4) publishes under the group prefix; the world's key stays unset.
  MemoryStore store;
  NcclOptions leader = job;
  leader.rank = 4;
  exchange_nccl_unique_id(store, nccl_group_options(leader, RankGroup{{4, 5, 6, 7}, ""}), fake_id);
  EXPECT_TRUE(store.check({"nccl/group/ranks_4_5_6_7/unique_id"}));
  EXPECT_FALSE(store.check({"nccl/unique_id"}));
  EXPECT_EQ(exchange_nccl_unique_id(store, g, fake_id), fake_id());
  // Another group over other ranks does not see it.
  NcclOptions other = nccl_group_options(job, RankGroup{{0, 5}, ""});
  other.timeout = 100ms;
  EXPECT_THROW(exchange_nccl_unique_id(store, other, fake_id), CommError);
}

TEST(NcclGroup, BadListsAreRefusedBeforeAnyDeviceWork) {
  MemoryStore store;
  NcclOptions job;
  job.rank = 0;
  job.world_size = 3;
  job.timeout = 200ms;
  for (const RankGroup& bad :
       {RankGroup{{1, 2}, ""}, RankGroup{{0, 0}, ""}, RankGroup{{0, 3}, ""}, RankGroup{{}, ""}}) {
    try {
      make_nccl_communicator(store, job, bad);
      FAIL() << "no exception";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("nccl group on job rank 0 of 3: "), std::string::npos)
          << e.what();
    }
  }
  // Nothing was claimed or published for them.
  EXPECT_FALSE(store.check({"nccl/group/ranks_1_2/claim/members"}));
}

TEST(NcclGroup, WithoutGpuIsAClearError) {
  MemoryStore store;
  NcclOptions job;
  job.rank = 1;
  job.world_size = 2;
  job.timeout = 1s;
  try {
    make_nccl_communicator(store, job, RankGroup{{1}, "one"});
    GTEST_SKIP() << "a CUDA device is visible";
  } catch (const CommError& e) {
    const std::string what = e.what();
    if (nccl_available()) {
      EXPECT_NE(what.find("nccl on rank 0 of 1 in group 'one' (job rank 1): CUDA device 0"),
                std::string::npos)
          << what;
    } else {
      EXPECT_NE(what.find("this build has no NCCL"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace ddl
