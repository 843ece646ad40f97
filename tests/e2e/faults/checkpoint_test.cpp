// Damaged checkpoints and a full disk, on the real `train_mnist` (a world of one, the real MNIST):
// - a damaged checkpoint is never resumed from: the trainer falls back to the previous one, says
//   which file was bad, why and which one it uses, and ends like an undisturbed run;
// - with no good previous one it is one line naming the file and the failed check, exit 4;
// - under `launch`, every rank resumes from the file rank 0 chose, or every rank ends with exit 4;
// - a disk that fills up during a save (a real tmpfs) is one line, exit 4, with no temporary file
//   left and the previous checkpoint as it was; a stale temporary file of a killed writer is
//   removed at the next start.
// Links no LibTorch: it drives the built executable and edits its files.
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "tests/e2e/faults/train_job.h"

namespace {

using namespace ddl::launch_test;
using nlohmann::json;

constexpr milliseconds kRunTimeout{120'000};

// A short deterministic run checkpointing to `save` (+ `extra`); stdout and stderr in one log.
struct TrainerRun {
  int code = -1;
  std::string log;
};

TrainerRun run_trainer(const fs::path& save, int max_steps, const std::vector<std::string>& extra,
                       const fs::path& log) {
  ddl::testing::SpawnOptions options;
  options.argv =
      concat({kTrain, "--data_dir", kData, "--epochs", "1", "--seed", "7", "--log_interval", "1",
              "--threads", "1", "--save", save.string(), "--max_steps", std::to_string(max_steps)},
             extra);
  options.stdout_path = log;
  options.own_process_group = true;
  ddl::testing::ChildProcess child(std::move(options));
  TrainerRun run;
  run.code = child.wait(kRunTimeout).value_or(-1);
  run.log = read_file(log);
  return run;
}

json summary_in(const std::string& log) {
  std::istringstream in(log);
  json found;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') found = json::parse(line, nullptr, false);
  }
  return found;
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The lines of `log` that report the error the program ended with.
std::vector<std::string> error_lines(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("train_mnist: error:", 0) == 0) lines.push_back(line);
  }
  return lines;
}

// The ending of a program stopped by one line: that line, no abort, no backtrace.
void expect_one_error_line(const TrainerRun& run, const std::vector<std::string>& parts) {
  EXPECT_EQ(run.code, ddl::kExitBadCheckpoint) << run.log;
  const std::vector<std::string> lines = error_lines(run.log);
  ASSERT_EQ(lines.size(), 1u) << run.log;
  for (const std::string& part : parts) EXPECT_TRUE(contains(lines[0], part)) << lines[0];
  EXPECT_FALSE(contains(run.log, "terminate called")) << run.log;
  EXPECT_FALSE(contains(run.log, "Exception raised from")) << run.log;
}

TEST(Checkpoints, ADamagedCheckpointFallsBackToThePreviousOneAndEndsLikeAnUndisturbedRun) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path save = dir.path() / "ck";
  const fs::path ckpt = dir.path() / "ck.pt", prev = dir.path() / "ck.prev.pt";
  // Saves at step 2 and at the end (step 3): ck.pt holds step 3, ck.prev.pt step 2.
  const TrainerRun first = run_trainer(save, 3, {"--save_every", "2"}, dir.path() / "first.log");
  ASSERT_EQ(first.code, 0) << first.log;
  ASSERT_TRUE(fs::exists(prev)) << first.log;
  const json undisturbed = summary_in(first.log);

  // One bit of tensor data flipped (most of the file is tensor data).
  std::string bytes = bytes_of(ckpt);
  bytes[bytes.size() / 2] ^= 0x04;
  write_bytes(ckpt, bytes);
  const TrainerRun resumed = run_trainer(save, 3, {"--resume"}, dir.path() / "resumed.log");
  ASSERT_EQ(resumed.code, 0) << resumed.log;
  EXPECT_TRUE(
      contains(resumed.log, "checkpoint '" + ckpt.string() + "': content CRC-32 check failed"))
      << resumed.log;
  EXPECT_TRUE(contains(resumed.log, "resuming from the previous checkpoint '" + prev.string()))
      << resumed.log;
  EXPECT_TRUE(contains(resumed.log, "resumed from " + prev.string() + ": epoch 0, batch 2, step 2"))
      << resumed.log;
  EXPECT_TRUE(fs::exists(ckpt.string() + ".bad"));
  const json s = summary_in(resumed.log);
  ASSERT_TRUE(s.is_object()) << resumed.log;
  EXPECT_EQ(s["resumed"], true);
  EXPECT_EQ(s["global_step"], 3);
  EXPECT_EQ(s["param_checksum"], undisturbed["param_checksum"]);
}

TEST(Checkpoints, ADamagedCheckpointWithNoGoodPreviousOneIsOneLineNamingTheFileExit4) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path save = dir.path() / "ck";
  const fs::path ckpt = dir.path() / "ck.pt", prev = dir.path() / "ck.prev.pt";
  const TrainerRun first = run_trainer(save, 1, {}, dir.path() / "first.log");
  ASSERT_EQ(first.code, 0) << first.log;
  ASSERT_FALSE(fs::exists(prev));  // one save: nothing to fall back to
  const std::string good = bytes_of(ckpt);

  struct Damage {
    std::string name;
    std::string bytes;
    std::string check;
  };
  std::string flipped_header = good, zeroed = good, truncated = good;
  flipped_header[10] ^= 0x01;  // the content length's second byte
  std::fill(zeroed.begin() + 1000, zeroed.begin() + 5000, '\0');
  truncated.resize(good.size() * 2 / 3);
  const std::vector<Damage> damages = {
      {"flipped header byte", flipped_header, "header check failed"},
      {"zeroed range", zeroed, "content CRC-32 check failed"},
      {"truncated", truncated, "length check failed"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    write_bytes(ckpt, d.bytes);
    const TrainerRun run = run_trainer(save, 2, {"--resume"}, dir.path() / "run.log");
    expect_one_error_line(run, {"checkpoint '" + ckpt.string() + "'", d.check,
                                "no previous checkpoint '" + prev.string() + "'"});
    EXPECT_EQ(bytes_of(ckpt), d.bytes) << "a bad checkpoint with no fallback is left as found";
  }
}

// Under `launch` with two ranks rank 0 chooses and broadcasts: both ranks resume from the previous
// checkpoint and agree; with nothing good left every rank ends with exit 4.
TEST(Checkpoints, TwoRanksResumeFromRankZerosChoiceOrBothEndWithExit4) {
  SKIP_WITHOUT_DATA();
  TempDir dir;
  const fs::path save = dir.path() / "ck";
  const fs::path ckpt = dir.path() / "ck.pt", prev = dir.path() / "ck.prev.pt";
  auto job = [&](const std::string& name, int max_steps, const std::vector<std::string>& extra) {
    const fs::path logs = dir.path() / name;
    LaunchRun run(dir, concat({"--nproc_per_node=2", "--log_dir", logs.string(),
                               "--print_config=false", kTrain, "--data_dir", kData, "--epochs", "1",
                               "--seed", "7", "--log_interval", "1", "--threads", "1", "--save",
                               save.string(), "--max_steps", std::to_string(max_steps)},
                              extra));
    const int code = run.wait(kRunTimeout).value_or(-1);
    return std::make_pair(code, logs);
  };
  const auto [first, first_logs] = job("first", 3, {"--save_every", "2"});
  ASSERT_EQ(first, 0) << worker_log(first_logs, 0);
  std::string bytes = bytes_of(ckpt);
  bytes[bytes.size() / 3] ^= 0x10;
  write_bytes(ckpt, bytes);

  const auto [resumed, logs] = job("resumed", 3, {"--resume"});
  ASSERT_EQ(resumed, 0) << worker_log(logs, 0);
  EXPECT_TRUE(contains(worker_log(logs, 0), "resuming from the previous checkpoint"))
      << worker_log(logs, 0);
  EXPECT_TRUE(contains(worker_log(logs, 1), "resumed from " + prev.string() + " (rank 0's)"))
      << worker_log(logs, 1);
  EXPECT_EQ(summary_of(logs, 1)["param_checksum"], summary_of(first_logs, 0)["param_checksum"]);

  fs::remove(prev);
  write_bytes(ckpt, bytes_of(ckpt).substr(0, 1000));
  const auto [refused, refused_logs] = job("refused", 3, {"--resume"});
  EXPECT_EQ(refused, ddl::kExitBadCheckpoint);
  EXPECT_TRUE(contains(worker_log(refused_logs, 0), "length check failed"))
      << worker_log(refused_logs, 0);
  EXPECT_TRUE(contains(worker_log(refused_logs, 1), "rank 0 found it damaged"))
      << worker_log(refused_logs, 1);
}

// A tmpfs of `size` mounted on `dir` for the test's length; unmounted however the test ends.
class Tmpfs {
 public:
  Tmpfs(const fs::path& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    const std::string options = "size=" + size + ",mode=0755";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      error_ = std::string("mount -t tmpfs -o ") + options + " " + dir.string() + ": " +
               std::strerror(errno);
    }
  }
  ~Tmpfs() {
    if (error_.empty()) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  const std::string& error() const { return error_; }

 private:
  fs::path dir_;
  std::string error_;
};

// Writes `path` until the file system says it is full; returns the bytes written.
std::size_t fill_up(const fs::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  const std::string block(4096, 'x');
  std::size_t written = 0;
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) written += block.size();
  std::fclose(f);
  return written;
}

TEST(Checkpoints, AFullDiskDuringASaveIsOneLineExit4WithNoTemporaryAndThePreviousOneIntact) {
  SKIP_WITHOUT_DATA();
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  TempDir dir;
  const fs::path disk = dir.path() / "disk";
  const Tmpfs tmpfs(disk, "2m");
  ASSERT_TRUE(tmpfs.error().empty()) << tmpfs.error();
  const fs::path save = disk / "ck", ckpt = disk / "ck.pt", tmp = disk / "ck.pt.tmp";
  const TrainerRun first = run_trainer(save, 1, {}, dir.path() / "first.log");
  ASSERT_EQ(first.code, 0) << first.log;
  const std::string saved = bytes_of(ckpt);

  // A writer killed mid-write left its temporary file; then the disk fills up.
  write_bytes(tmp, "torn");
  ASSERT_GT(fill_up(disk / "filler"), 0u);
  const TrainerRun full =
      run_trainer(save, 3, {"--resume", "--save_every", "1"}, dir.path() / "full.log");
  EXPECT_TRUE(contains(full.log, "removed " + tmp.string() +
                                     ", the temporary file of a checkpoint write that was "
                                     "interrupted"))
      << full.log;
  EXPECT_TRUE(contains(full.log, "resumed from " + ckpt.string() + ": epoch 0, batch 1, step 1"))
      << full.log;
  expect_one_error_line(full, {"checkpoint '" + ckpt.string() + "'", "write to '" + tmp.string(),
                               "No space left on device", "the previous checkpoint is kept"});
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(disk / "ck.prev.pt"));
  EXPECT_EQ(bytes_of(ckpt), saved) << "the previous checkpoint changed";
}

}  // namespace
