#include "env/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddl::env {
namespace {

// "a FIFO", "a character device", ...: what a path is instead of a regular file.
std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "something other than a regular file";
}

// Closes the descriptor it holds when it goes.
class OpenFile {
 public:
  explicit OpenFile(int fd) : fd_(fd) {}
  ~OpenFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string size_text(std::size_t bytes) {
  constexpr std::size_t kKiB = 1024;
  constexpr std::size_t kMiB = 1024 * kKiB;
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + " KiB";
  return std::to_string(bytes) + " bytes";
}

std::string read_regular_file(const std::string& path, std::size_t max_bytes, std::string_view what,
                              FileLinks links) {
  const auto refuse = [&](const std::string& problem) {
    throw FileError(std::string(what) + "='" + path + "': " + problem +
                    "; expected a regular file of at most " + size_text(max_bytes));
  };
  const auto is_kind = [&](mode_t mode) {
    if (S_ISREG(mode)) return;
    refuse("is " + kind_of(mode));
  };
  // Looked at before opening: opening a device can have effects of its own.
  struct stat st {};
  const int stat_result =
      links == FileLinks::kRefuse ? ::lstat(path.c_str(), &st) : ::stat(path.c_str(), &st);
  if (stat_result != 0) refuse(std::string("cannot be read: ") + std::strerror(errno));
  is_kind(st.st_mode);
  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  if (links == FileLinks::kRefuse) flags |= O_NOFOLLOW;
  const OpenFile file(::open(path.c_str(), flags));
  if (file.fd() < 0) {
    refuse(errno == ELOOP && links == FileLinks::kRefuse
               ? std::string("is a symbolic link")
               : std::string("cannot be read: ") + std::strerror(errno));
  }
  // The path may have been replaced since the stat: what counts is what was opened.
  if (::fstat(file.fd(), &st) != 0) refuse(std::string("cannot be read: ") + std::strerror(errno));
  is_kind(st.st_mode);
  if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    refuse("is " + std::to_string(st.st_size) + " bytes, over the cap");
  }
  std::string text;
  char buffer[16384];
  while (true) {
    const std::size_t room = max_bytes + 1 - text.size();  // one byte over tells a grown file
    const ssize_t n = ::read(file.fd(), buffer, std::min(sizeof(buffer), room));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      refuse(std::string("read error: ") + std::strerror(errno));
    }
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) refuse("grew past the cap while being read");
  }
  return text;
}

std::string safe_file_name(std::string_view id, std::string_view if_empty) {
  std::string name(id.empty() ? if_empty : id);
  for (char& c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '-' || c == '_';
    if (!plain) c = '_';
  }
  if (!name.empty() && name[0] == '.') name[0] = '_';
  return name;
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace ddl::env
