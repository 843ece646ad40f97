// The secret of ranks a scheduler started on one machine without DDL_JOB_SECRET
// (worker/runtime/secret_file.h): ranks agree on one secret through a private file, planted links,
// folders and files are refused, and two ranks started as by `mpirun -np 2` (Open MPI's
// variables, no secret) run an authenticated store that a stranger without the file cannot join.
#include "worker/runtime/secret_file.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "env/contract.h"
#include "store/tcp_store.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "worker/runtime/rendezvous.h"

namespace ddl {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(SecretFile, RanksAgreeOnOnePrivateSecret) {
  testing::TempDir dir;
  std::vector<std::future<std::optional<SharedSecret>>> ranks;
  for (int i = 0; i < 8; ++i) {
    ranks.push_back(std::async(std::launch::async, [&] {
      std::string why;
      return shared_secret(dir.path(), "mpi-4242", why);
    }));
  }
  std::string first;
  for (auto& r : ranks) {
    const auto got = r.get();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->secret.size(), 64u);
    if (first.empty()) first = got->secret;
    EXPECT_EQ(got->secret, first) << "ranks disagree on the secret";
  }
  const fs::path folder = dir.path() / ("ddl-" + std::to_string(::geteuid()));
  EXPECT_EQ(mode_of(folder), 0700u);
  EXPECT_EQ(mode_of(folder / "mpi-4242.secret"), 0600u);
  // No temporary files left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(folder)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  // Another job gets another secret.
  std::string why;
  EXPECT_NE(shared_secret(dir.path(), "mpi-4243", why)->secret, first);
}

TEST(SecretFile, PlantedLinksFoldersAndOpenFilesAreRefused) {
  testing::TempDir dir;
  const fs::path folder = dir.path() / ("ddl-" + std::to_string(::geteuid()));
  std::string why;
  // A link planted where the secret goes, pointing at a file its planter wrote.
  fs::create_directory(folder);
  fs::permissions(folder, fs::perms::owner_all, fs::perm_options::replace);
  { std::ofstream(dir.path() / "known") << std::string(64, 'a'); }
  fs::create_symlink(dir.path() / "known", folder / "slurm-7.0.secret");
  try {
    shared_secret(dir.path(), "slurm-7.0", why);
    FAIL() << "a planted link was followed";
  } catch (const env::EnvError& e) {
    EXPECT_TRUE(contains(e.what(), "slurm-7.0.secret")) << e.what();
    EXPECT_TRUE(contains(e.what(), "symbolic link")) << e.what();
  }
  // A secret file others may read.
  { std::ofstream(folder / "mpi-1.secret") << std::string(64, 'b'); }
  fs::permissions(folder / "mpi-1.secret", fs::perms(0644), fs::perm_options::replace);
  EXPECT_THROW(shared_secret(dir.path(), "mpi-1", why), env::EnvError);
  // A private folder open to others.
  fs::permissions(folder, fs::perms(0777), fs::perm_options::replace);
  try {
    shared_secret(dir.path(), "mpi-2", why);
    FAIL() << "a folder open to all was used";
  } catch (const env::EnvError& e) {
    EXPECT_TRUE(contains(e.what(), "open to other users")) << e.what();
  }
  // A private folder owned by someone else (tests run as root: give it away).
  if (::geteuid() == 0) {
    fs::permissions(folder, fs::perms(0700), fs::perm_options::replace);
    ASSERT_EQ(::chown(folder.c_str(), 65534, 65534), 0);
    try {
      shared_secret(dir.path(), "mpi-3", why);
      FAIL() << "a folder of another user was used";
    } catch (const env::EnvError& e) {
      EXPECT_TRUE(contains(e.what(), "belongs to uid 65534")) << e.what();
    }
  }
}

TEST(SecretFile, AReadOnlyFolderMeansNoSecretAndSaysWhy) {
  // A real read-only file system (a tmpfs mounted read-only): even root cannot write there.
  testing::TempDir dir;
  if (::mount("tmpfs", dir.path().c_str(), "tmpfs", MS_RDONLY, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (needs root)";
  }
  std::string why;
  const bool made = shared_secret(dir.path(), "mpi-5", why).has_value();
  ::umount(dir.path().c_str());
  EXPECT_FALSE(made);
  EXPECT_TRUE(contains(why, "cannot create")) << why;
  EXPECT_TRUE(contains(why, "Read-only file system")) << why;
}

// Two ranks as `mpirun -np 2 prog` starts them on one machine, without DDL_JOB_SECRET.
env::EnvMap mpi_rank(int rank, std::uint16_t port, const std::string& job) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", "2"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_MCA_ess_base_jobid", job},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

TEST(SecretFile, MpirunRanksOnOneMachineRunAnAuthenticatedStore) {
  const std::uint16_t port = testing::free_port();
  const std::string job = "secret-test-" + std::to_string(::getpid());
  auto join = [&](int rank) {
    return rendezvous(ParallelEnv::from_env(mpi_rank(rank, port, job)), milliseconds(10'000));
  };
  auto r1 = std::async(std::launch::async, join, 1);
  Rendezvous r0 = join(0);
  Rendezvous other = r1.get();
  r0.store->set("k", {'v'});
  EXPECT_EQ(other.store->get("k", milliseconds(2000)), (std::vector<char>{'v'}));
  // Rank 0 removed the file once both had joined with it.
  const fs::path file =
      default_secret_folder() / ("ddl-" + std::to_string(::geteuid())) / ("mpi-" + job + ".secret");
  EXPECT_FALSE(fs::exists(file)) << file;
  // A local stranger who knows the job id and the port, but not the file's secret.
  TcpStoreOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "mpi-" + job;
  o.rank = 1;
  o.world_size = 2;
  o.connect_timeout = milliseconds(2000);
  o.io_timeout = milliseconds(2000);
  try {
    TcpStore stranger(o);
    FAIL() << "a client without the secret joined the ranks' store";
  } catch (const StoreError& e) {
    EXPECT_TRUE(contains(e.what(), "refused")) << e.what();
  }
}

}  // namespace
}  // namespace ddl
