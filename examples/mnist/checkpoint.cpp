#include "examples/mnist/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "logging/safe_open.h"

namespace ddl::mnist {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "ddl-mnist-checkpoint-v1";

// The file header (checkpoint.h).
constexpr char kMagic[] = "DDLCKPT1";
constexpr std::size_t kMagicBytes = 8;
constexpr std::size_t kHeaderBytes = 24;
// Every failed write ends with this: the files a resume would read are as they were.
constexpr const char* kKept = "; the previous checkpoint is kept";

std::string errno_text() { return std::strerror(errno); }

// LibTorch's message without its backtrace, on one line.
std::string one_line(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10 ? c10->what_without_backtrace() : e.what();
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return text;
}

std::uint32_t crc32_of(const char* data, std::size_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

void put_le(std::string& out, std::size_t at, std::uint64_t value, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) {
    out[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  }
}

std::uint64_t get_le(const std::string& in, std::size_t at, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return value;
}

std::string hex32(std::uint64_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08llx", static_cast<unsigned long long>(v));
  return buf;
}

// Bytes as text, others as \xNN.
std::string printable(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && u != '\'') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

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

std::string previous_checkpoint_path(const std::string& path) {
  const std::string ext = ".pt";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) {
    return path.substr(0, path.size() - ext.size()) + ".prev" + ext;
  }
  return path + ".prev";
}

std::string bad_checkpoint_path(const std::string& path) { return path + ".bad"; }

std::string seal_checkpoint(const std::string& content) {
  std::string out(kHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, kMagicBytes);
  put_le(out, 8, static_cast<std::uint64_t>(content.size()), 8);
  put_le(out, 16, crc32_of(content.data(), content.size()), 4);
  put_le(out, 20, crc32_of(out.data(), 20), 4);
  out += content;
  return out;
}

std::string unseal_checkpoint(const std::string& bytes, const std::string& name) {
  if (bytes.size() < kHeaderBytes) {
    throw CheckpointError(name, "header check failed: the file has " +
                                    std::to_string(bytes.size()) +
                                    " byte(s), a checkpoint at least " +
                                    std::to_string(kHeaderBytes) + " (truncated?)");
  }
  if (std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    const bool bare_zip = bytes.compare(0, 4, std::string("PK\x03\x04", 4)) == 0;
    throw CheckpointError(
        name, std::string("header check failed: expected magic '") + kMagic + "', found " +
                  (bare_zip ? std::string("a LibTorch archive without a checksum header (written "
                                          "before checkpoints carried one, or not by this program)")
                            : "'" + printable(bytes.substr(0, kMagicBytes)) + "'"));
  }
  const std::uint64_t header_crc = get_le(bytes, 20, 4);
  if (crc32_of(bytes.data(), 20) != header_crc) {
    throw CheckpointError(name, "header check failed: its CRC-32 is " + hex32(header_crc) +
                                    ", its bytes have " + hex32(crc32_of(bytes.data(), 20)) +
                                    " (the header is damaged)");
  }
  const std::uint64_t length = get_le(bytes, 8, 8);
  const std::uint64_t found = bytes.size() - kHeaderBytes;
  if (length != found) {
    throw CheckpointError(name, "length check failed: the header says " + std::to_string(length) +
                                    " content bytes, the file has " + std::to_string(found) +
                                    (found < length ? " (truncated)" : ""));
  }
  const std::uint64_t want = get_le(bytes, 16, 4);
  const std::uint64_t got = crc32_of(bytes.data() + kHeaderBytes, found);
  if (want != got) {
    throw CheckpointError(name, "content CRC-32 check failed: the header says " + hex32(want) +
                                    ", the content has " + hex32(got) +
                                    " (the content is damaged)");
  }
  return bytes.substr(kHeaderBytes);
}

void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     const torch::optim::Optimizer& optimizer, const TrainingPosition& position) {
  torch::serialize::OutputArchive archive;
  try {
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
  } catch (const std::exception& e) {
    throw CheckpointError(path, std::string("cannot build the archive: ") + one_line(e));
  }
  write_archive(path, archive);
}

void write_archive(const std::string& path, torch::serialize::OutputArchive& archive) {
  // The archive is serialized in memory first: LibTorch's own file writer, failing mid-stream
  // (a full disk), throws again from its destructor and aborts the program. Here it only appends
  // to a string; every I/O error is ours to report.
  std::string content;
  try {
    archive.save_to([&content](const void* data, std::size_t n) -> std::size_t {
      content.append(static_cast<const char*>(data), n);
      return n;
    });
  } catch (const std::exception& e) {
    throw CheckpointError(path, std::string("cannot serialize the archive: ") + one_line(e));
  }
  const std::string bytes = seal_checkpoint(content);
  content = std::string();

  // One writer per path (rank 0, or one server), so a fixed temporary name is enough; a stale one
  // left by a killed writer is truncated and reused (and removed at the next start).
  const std::string tmp = checkpoint_temp_path(path);
  // Not following a link planted as the temporary's name (logging/safe_open.h); the rename below
  // replaces a link planted as `path` itself, never writing through it.
  std::string why;
  FileDescriptor fd(logging::open_for_writing(tmp, logging::WriteMode::kTruncate, why));
  if (fd.get() < 0) throw CheckpointError(path, "cannot create its temporary file: " + why + kKept);
  auto fail = [&](const std::string& what) {
    ::unlink(tmp.c_str());
    throw CheckpointError(path, what + kKept);
  };
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t w = ::write(fd.get(), p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write to '" + tmp + "' failed: " + (w < 0 ? errno_text() : "no progress"));
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  if (::fsync(fd.get()) != 0) fail("fsync of '" + tmp + "' failed: " + errno_text());
  if (!fd.close()) fail("close of '" + tmp + "' failed: " + errno_text());

  // Keep the checkpoint being replaced as the previous one. A hard link keeps `path` in place
  // throughout; where links are not supported, a rename leaves a moment with the previous one
  // only, which choose_checkpoint falls back to.
  const std::string prev = previous_checkpoint_path(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    if (::unlink(prev.c_str()) != 0 && errno != ENOENT) {
      fail("cannot replace the previous checkpoint '" + prev + "': " + errno_text());
    }
    if (::link(path.c_str(), prev.c_str()) != 0 && ::rename(path.c_str(), prev.c_str()) != 0) {
      fail("cannot keep '" + path + "' as '" + prev + "': " + errno_text());
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    fail("rename of '" + tmp + "' failed: " + errno_text());
  }
  // Make the renames durable.
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

namespace {

// The whole file, or nullopt when there is none; throws CheckpointError when it cannot be read.
std::optional<std::string> read_file_bytes(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw CheckpointError(path, "cannot open it: " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw CheckpointError(path, "expected a regular file");
  }
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CheckpointError(path, "read failed: " + errno_text());
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  return bytes;
}

std::string read_existing(const std::string& path) {
  std::optional<std::string> bytes = read_file_bytes(path);
  if (!bytes) throw CheckpointError(path, "expected a checkpoint file, found none");
  return std::move(*bytes);
}

// What CheckpointError says after "checkpoint '<file>': ".
std::string detail_of(const CheckpointError& e) {
  const std::string prefix = "checkpoint '" + e.file() + "': ";
  const std::string what = e.what();
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

}  // namespace

std::optional<CheckpointChoice> choose_checkpoint(const std::string& path) {
  const std::string prev = previous_checkpoint_path(path);
  std::string why_not_path;
  std::optional<std::string> bytes;
  try {
    bytes = read_file_bytes(path);
    if (bytes) {
      unseal_checkpoint(*bytes, path);
      return CheckpointChoice{path, std::move(*bytes), ""};
    }
    why_not_path = "expected a checkpoint file, found none";
  } catch (const CheckpointError& e) {
    why_not_path = detail_of(e);
  }
  const bool path_exists = bytes.has_value();
  std::optional<std::string> prev_bytes;
  try {
    prev_bytes = read_file_bytes(prev);
    if (!prev_bytes) {
      if (!path_exists) return std::nullopt;
      throw CheckpointError(
          path, why_not_path + "; there is no previous checkpoint '" + prev + "' to fall back to");
    }
    unseal_checkpoint(*prev_bytes, prev);
  } catch (const CheckpointError& e) {
    if (e.file() == path) throw;
    throw CheckpointError(path, why_not_path + "; the previous checkpoint '" + prev +
                                    "' is no good either: " + detail_of(e));
  }
  std::string warning = "checkpoint '" + path + "': " + why_not_path + "; resuming from the " +
                        "previous checkpoint '" + prev + "'";
  if (path_exists) {
    const std::string aside = bad_checkpoint_path(path);
    if (::rename(path.c_str(), aside.c_str()) == 0) {
      warning += " (the bad one is moved aside to '" + aside + "')";
    } else {
      warning += " (moving the bad one aside to '" + aside + "' failed: " + errno_text() + ")";
    }
  }
  return CheckpointChoice{prev, std::move(*prev_bytes), warning};
}

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  std::vector<std::string> removed;
  const std::string tmp = checkpoint_temp_path(path);
  struct stat st {};
  if (::lstat(tmp.c_str(), &st) != 0) return removed;
  if (::unlink(tmp.c_str()) != 0) {
    throw CheckpointError(path, "cannot remove the stale temporary file '" + tmp +
                                    "' of an interrupted write: " + errno_text());
  }
  removed.push_back(tmp);
  return removed;
}

void read_archive_bytes(const std::string& bytes, const std::string& name,
                        torch::serialize::InputArchive& archive, const torch::Device& device) {
  const std::string content = unseal_checkpoint(bytes, name);
  try {
    archive.load_from(content.data(), content.size(), device);
  } catch (const std::exception& e) {
    throw CheckpointError(name, std::string("not a readable LibTorch archive: ") + one_line(e));
  }
}

void read_archive(const std::string& path, torch::serialize::InputArchive& archive,
                  const torch::Device& device) {
  read_archive_bytes(read_existing(path), path, archive, device);
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
  } catch (const std::exception& e) {
    throw CheckpointError(path,
                          std::string("does not match this model and optimizer: ") + one_line(e));
  }
  return pos;
}

}  // namespace

TrainingPosition load_checkpoint(const std::string& path, torch::nn::Module& module,
                                 torch::optim::Optimizer& optimizer, const torch::Device& device,
                                 const TrainingPosition& expected) {
  return load_checkpoint_bytes(read_existing(path), path, module, optimizer, device, expected);
}

TrainingPosition load_checkpoint_bytes(const std::string& bytes, const std::string& name,
                                       torch::nn::Module& module,
                                       torch::optim::Optimizer& optimizer,
                                       const torch::Device& device,
                                       const TrainingPosition& expected) {
  torch::serialize::InputArchive archive;
  read_archive_bytes(bytes, name, archive, device);
  return restore(archive, name, module, optimizer, expected);
}

}  // namespace ddl::mnist
