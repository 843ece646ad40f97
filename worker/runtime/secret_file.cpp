#include "worker/runtime/secret_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "env/contract.h"
#include "env/file.h"

namespace ddl {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kSecretBytes = 32;

std::string errno_text() { return std::strerror(errno); }

// A folder this user owns, not a link, that no one else may enter; else why not.
std::string unsafe_folder(const fs::path& folder, const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return folder.string() + " is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return folder.string() + " is not a folder";
  if (st.st_uid != ::geteuid()) {
    return folder.string() + " belongs to uid " + std::to_string(st.st_uid) + ", not to uid " +
           std::to_string(::geteuid());
  }
  if ((st.st_mode & 077) != 0) return folder.string() + " is open to other users";
  return "";
}

std::string random_hex() {
  unsigned char raw[kSecretBytes];
  std::size_t have = 0;
  while (have < sizeof(raw)) {
    const ssize_t n = ::getrandom(raw + have, sizeof(raw) - have, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw env::EnvError("cannot read random bytes for the job secret: " + errno_text());
    }
    have += static_cast<std::size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 0xf]);
  }
  return out;
}

// The job id as the secret file's name (env::safe_file_name: no '/', never "." or "..").
std::string file_name(const std::string& job_id) {
  return env::safe_file_name(job_id, "job") + ".secret";
}

// Reads the published secret file without following a link; refuses one anyone else could have
// written or read.
std::string read_secret(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    throw env::EnvError("cannot open the job secret file " + path.string() + ": " + errno_text() +
                        (errno == ELOOP ? " (a symbolic link was planted there)" : ""));
  }
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = errno_text();
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    problem = "it belongs to uid " + std::to_string(st.st_uid);
  } else if ((st.st_mode & 077) != 0) {
    problem = "other users may read or write it";
  }
  std::string secret(2 * kSecretBytes, '\0');
  if (problem.empty()) {
    std::size_t have = 0;
    while (have < secret.size()) {
      const ssize_t n = ::read(fd, secret.data() + have, secret.size() - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      have += static_cast<std::size_t>(n);
    }
    if (have != secret.size())
      problem = "it holds " + std::to_string(have) + " bytes, not " + std::to_string(secret.size());
  }
  ::close(fd);
  if (!problem.empty()) {
    throw env::EnvError("refusing the job secret file " + path.string() + ": " + problem +
                        " (remove it, or set DDL_JOB_SECRET in every rank)");
  }
  return secret;
}

}  // namespace

fs::path default_secret_folder() {
  const fs::path run_user = fs::path("/run/user") / std::to_string(::geteuid());
  struct stat st {};
  if (::lstat(run_user.c_str(), &st) == 0 && unsafe_folder(run_user, st).empty()) return run_user;
  return "/tmp";
}

std::optional<SharedSecret> shared_secret(const fs::path& folder, const std::string& job_id,
                                          std::string& why_not) {
  const fs::path private_folder = folder / ("ddl-" + std::to_string(::geteuid()));
  if (::mkdir(private_folder.c_str(), 0700) != 0 && errno != EEXIST) {
    why_not = "cannot create " + private_folder.string() + ": " + errno_text();
    return std::nullopt;
  }
  struct stat st {};
  if (::lstat(private_folder.c_str(), &st) != 0) {
    why_not = "cannot inspect " + private_folder.string() + ": " + errno_text();
    return std::nullopt;
  }
  if (const std::string why = unsafe_folder(private_folder, st); !why.empty()) {
    throw env::EnvError("refusing the private folder for the job secret: " + why +
                        " (remove it, or set DDL_JOB_SECRET in every rank)");
  }
  SharedSecret result;
  result.path = private_folder / file_name(job_id);
  if (::lstat(result.path.c_str(), &st) != 0) {
    // First here: write a fresh secret under a private temporary name, then publish it.
    const fs::path temp =
        private_folder / (".tmp-" + std::to_string(::getpid()) + "-" + random_hex().substr(0, 8));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      why_not = "cannot create " + temp.string() + ": " + errno_text();
      return std::nullopt;
    }
    const std::string secret = random_hex();
    const bool written =
        ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
    const int write_errno = errno;
    ::close(fd);
    if (!written) {
      ::unlink(temp.c_str());
      why_not = "cannot write " + temp.string() + ": " + std::strerror(write_errno);
      return std::nullopt;
    }
    // link(2) fails when another rank published first; then its secret is the job's.
    const bool published = ::link(temp.c_str(), result.path.c_str()) == 0;
    const int link_errno = errno;
    ::unlink(temp.c_str());
    if (!published && link_errno != EEXIST) {
      why_not = "cannot publish " + result.path.string() + ": " + std::strerror(link_errno);
      return std::nullopt;
    }
  }
  result.secret = read_secret(result.path);
  return result;
}

}  // namespace ddl
