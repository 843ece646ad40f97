#include "examples/mnist/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "logging/safe_open.h"

namespace ddl::mnist {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "ddl-mnist-checkpoint-v1";

std::string errno_text() { return std::strerror(errno); }

// Closes a descriptor on every path out of save_checkpoint.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close()'s error (which can be a deferred write error).
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

std::int64_t read_int(torch::serialize::InputArchive& archive, const char* key,
                      const std::string& path) {
  c10::IValue v;
  if (!archive.try_read(key, v) || !v.isInt()) {
    throw CheckpointError(path, std::string("expected an integer '") + key + "', found none");
  }
  return v.toInt();
}

std::string read_string(torch::serialize::InputArchive& archive, const char* key,
                        const std::string& path) {
  c10::IValue v;
  if (!archive.try_read(key, v) || !v.isString()) {
    throw CheckpointError(path, std::string("expected a string '") + key + "', found none");
  }
  return v.toStringRef();
}

}  // namespace

CheckpointError::CheckpointError(std::string file, const std::string& detail)
    : Error(kExitBadCheckpoint, "", "checkpoint '" + file + "': " + detail),
      file_(std::move(file)) {}

std::string checkpoint_temp_path(const std::string& path) { return path + ".tmp"; }

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingPosition& position) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string(kFormat)));
  archive.write("epoch", c10::IValue(position.epoch));
  archive.write("batch", c10::IValue(position.batch));
  archive.write("global_step", c10::IValue(position.global_step));
  archive.write("optimizer_name", c10::IValue(position.optimizer));
  archive.write("seed", c10::IValue(static_cast<std::int64_t>(position.seed)));
  archive.write("world_size", c10::IValue(position.world_size));
  torch::serialize::OutputArchive model_archive;
  module.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);

  write_archive(path, archive);
}

void write_archive(const std::string& path, torch::serialize::OutputArchive& archive) {
  // One writer per path (rank 0, or one server), so a fixed temporary name is enough; a stale one left by a
  // killed writer is truncated and reused.
  const std::string tmp = checkpoint_temp_path(path);
  // Not following a link planted as the temporary's name (logging/safe_open.h); the rename below
  // replaces a link planted as `path` itself, never writing through it.
  std::string why;
  FileDescriptor fd(logging::open_for_writing(tmp, logging::WriteMode::kTruncate, why));
  if (fd.get() < 0) throw CheckpointError(path, "cannot create its temporary file: " + why);
  auto fail = [&](const std::string& what) {
    ::unlink(tmp.c_str());
    throw CheckpointError(path, what);
  };

  std::string write_error;
  try {
    archive.save_to([&](const void* data, std::size_t n) -> std::size_t {
      const char* p = static_cast<const char*>(data);
      std::size_t left = n;
      while (left > 0) {
        const ssize_t w = ::write(fd.get(), p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          write_error = "write to '" + tmp + "' failed: " + errno_text();
          return 0;  // the archive writer turns a short write into an exception
        }
        p += w;
        left -= static_cast<std::size_t>(w);
      }
      return n;
    });
  } catch (const c10::Error& e) {
    fail(write_error.empty() ? std::string(e.what_without_backtrace()) : write_error);
  }
  if (::fsync(fd.get()) != 0) fail("fsync of '" + tmp + "' failed: " + errno_text());
  if (!fd.close()) fail("close of '" + tmp + "' failed: " + errno_text());
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    fail("rename of '" + tmp + "' failed: " + errno_text());
  }
  // Make the rename itself durable.
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

void read_archive(const std::string& path, torch::serialize::InputArchive& archive,
                  const torch::Device& device) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw CheckpointError(path, "expected a checkpoint file, found none");
  }
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& e) {
    throw CheckpointError(
        path, std::string("not a readable LibTorch archive: ") + e.what_without_backtrace());
  }
}

namespace {

// Restores from an archive read already; `path` names it in errors.
TrainingPosition restore(torch::serialize::InputArchive& archive, const std::string& path,
                         torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                         const TrainingPosition& expected) {
  c10::IValue format;
  if (!archive.try_read("format", format) || !format.isString() ||
      format.toStringRef() != kFormat) {
    throw CheckpointError(path, std::string("expected format '") + kFormat +
                                    "', this archive is not a train_mnist checkpoint");
  }
  TrainingPosition pos;
  pos.epoch = read_int(archive, "epoch", path);
  pos.batch = read_int(archive, "batch", path);
  pos.global_step = read_int(archive, "global_step", path);
  pos.optimizer = read_string(archive, "optimizer_name", path);
  pos.seed = static_cast<std::uint64_t>(read_int(archive, "seed", path));
  pos.world_size = read_int(archive, "world_size", path);
  if (!expected.optimizer.empty() && pos.optimizer != expected.optimizer) {
    throw CheckpointError(path, "written with optimizer '" + pos.optimizer + "', this run uses '" +
                                    expected.optimizer + "'");
  }
  if (pos.seed != expected.seed) {
    throw CheckpointError(path, "written with seed " + std::to_string(pos.seed) +
                                    ", this run uses seed " + std::to_string(expected.seed));
  }
  try {
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    module.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw CheckpointError(path, std::string("does not match this model and optimizer: ") +
                                    e.what_without_backtrace());
  }
  return pos;
}

}  // namespace

TrainingPosition load_checkpoint(const std::string& path, torch::nn::Module& module,
                                 torch::optim::Optimizer& optimizer, const torch::Device& device,
                                 const TrainingPosition& expected) {
  torch::serialize::InputArchive archive;
  read_archive(path, archive, device);
  return restore(archive, path, module, optimizer, expected);
}

TrainingPosition load_checkpoint_bytes(const std::string& bytes, const std::string& name,
                                       torch::nn::Module& module,
                                       torch::optim::Optimizer& optimizer,
                                       const torch::Device& device,
                                       const TrainingPosition& expected) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes.data(), bytes.size(), device);
  } catch (const c10::Error& e) {
    throw CheckpointError(
        name, std::string("not a readable LibTorch archive: ") + e.what_without_backtrace());
  }
  return restore(archive, name, module, optimizer, expected);
}

}  // namespace ddl::mnist
