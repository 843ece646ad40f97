#include "logging/safe_open.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ddl::logging {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "folder";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "device";
  return "special file";
}

// Closes the folder's descriptor on every return.
class DirFd {
 public:
  explicit DirFd(int fd) : fd_(fd) {}
  ~DirFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string link_target(int dir_fd, const char* name) {
  char target[4096];
  const ssize_t n = ::readlinkat(dir_fd, name, target, sizeof(target) - 1);
  if (n < 0) return "?";
  return std::string(target, static_cast<std::size_t>(n));
}

}  // namespace

int open_for_writing(const std::string& path, WriteMode mode, std::string& why,
                     unsigned permissions) {
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  std::string dir = p.parent_path().string();
  if (dir.empty()) dir = ".";
  if (name.empty() || name == "." || name == "..") {
    why = "cannot write '" + path + "': expected a file name, found a folder";
    return -1;
  }
  DirFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) {
    why = "cannot write '" + path + "': opening its folder: " + errno_text(errno);
    return -1;
  }
  // O_NONBLOCK: a FIFO planted under the name fails at once (ENXIO) instead of blocking until
  // someone reads it; it is cleared again for the regular file.
  const int base = O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK |
                   (mode == WriteMode::kAppend ? O_APPEND : 0);
  bool replaced = false;
  for (;;) {
    const int fd = ::openat(dir_fd.get(), name.c_str(), base | O_CREAT | (replaced ? O_EXCL : 0),
                            static_cast<mode_t>(permissions));
    std::string planted;  // what was under the name instead of our own file
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        why = "cannot write '" + path + "': fstat: " + errno_text(errno);
        ::close(fd);
        return -1;
      }
      if (!S_ISREG(st.st_mode)) {
        why = "refusing to write '" + path + "': a " + file_kind(st.st_mode) +
              " is there, not a regular file";
        ::close(fd);
        return -1;
      }
      if (st.st_nlink <= 1) {
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
            (mode == WriteMode::kTruncate && ::ftruncate(fd, 0) != 0)) {
          why = "cannot write '" + path + "': " + errno_text(errno);
          ::close(fd);
          return -1;
        }
        return fd;
      }
      ::close(fd);
      planted = "a hard link to a file with " + std::to_string(st.st_nlink) + " names";
    } else if (errno == ELOOP) {
      planted = "a symbolic link to '" + link_target(dir_fd.get(), name.c_str()) + "'";
    } else if (errno == ENXIO) {
      why = "refusing to write '" + path + "': a FIFO or socket is there, not a regular file";
      return -1;
    } else if (errno == EEXIST && replaced) {
      why = "refusing to write '" + path +
            "': something was put under its name again while it was being replaced";
      return -1;
    } else {
      why = "cannot write '" + path + "': " + errno_text(errno);
      return -1;
    }
    if (replaced) {
      why = "refusing to write '" + path + "': it is " + planted + " again after being replaced";
      return -1;
    }
    // Removing the name leaves the link's target (or the other names' file) as it was.
    if (::unlinkat(dir_fd.get(), name.c_str(), 0) != 0) {
      why = "refusing to write '" + path + "': it is " + planted +
            " (not written through), which this process cannot remove: " + errno_text(errno);
      return -1;
    }
    spdlog::warn(
        "'{}' was {}; removed that name (the file it led to is untouched) and writing a new file "
        "there",
        path, planted);
    replaced = true;
  }
}

}  // namespace ddl::logging
