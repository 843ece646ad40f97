// A real munged of a test's own: a fresh key (mungekey, else random bytes) and its socket in a
// temp folder, run in the foreground as a child of the test and killed with the object. munged
// runs only as root here (it checks the key's owner and the folders' permissions), so a test
// without root or without munged skips with skip_reason().
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ddl::testing {

class TestMunged {
 public:
  // Starts munged and waits (at most 10 s) until its socket answers; skip_reason() says why not.
  TestMunged() {
    if (::geteuid() != 0) {
      skip_reason_ = "not root: munged runs only as root";
      return;
    }
    const std::string munged = first_program({"/usr/sbin/munged", "/usr/local/sbin/munged"});
    const std::string munge = first_program({"/usr/bin/munge", "/usr/local/bin/munge"});
    if (munged.empty() || munge.empty()) {
      skip_reason_ = "munged or munge not found (Debian package: munge)";
      return;
    }
    // munged wants the socket's folder searchable by everyone and the key's readable by root only.
    const std::filesystem::path privy = dir_.path() / "private";
    std::filesystem::create_directory(privy);
    ::chmod(dir_.path().c_str(), 0755);
    ::chmod(privy.c_str(), 0700);
    write_key(privy / "munge.key");
    SpawnOptions o;
    o.argv = {munged,
              "--foreground",
              "--force",
              "--socket=" + socket(),
              "--key-file=" + (privy / "munge.key").string(),
              "--pid-file=" + dir_.file("munged.pid"),
              "--log-file=" + dir_.file("munged.log"),
              "--seed-file=" + (privy / "munged.seed").string()};
    o.stdout_path = dir_.path() / "munged.out";
    daemon_.emplace(o);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::system((munge + " -n -S " + socket() + " >/dev/null 2>&1").c_str()) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    skip_reason_ = "munged did not answer on " + socket() + " within 10 s: " +
                   read_file(dir_.path() / "munged.out") + read_file(dir_.path() / "munged.log");
    daemon_.reset();
  }
  TestMunged(const TestMunged&) = delete;
  TestMunged& operator=(const TestMunged&) = delete;

  // Empty when munged is up.
  const std::string& skip_reason() const { return skip_reason_; }
  std::string socket() const { return dir_.file("munge.socket"); }
  // The folder: socket, logs; a test may put a slurm.conf here.
  const TempDir& dir() const { return dir_; }

 private:
  static std::string first_program(std::initializer_list<const char*> paths) {
    for (const char* p : paths) {
      if (::access(p, X_OK) == 0) return p;
    }
    return "";
  }

  static void write_key(const std::filesystem::path& key) {
    const std::string cmd = "mungekey --create --keyfile=" + key.string() + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(key)) {
      std::ifstream random("/dev/urandom", std::ios::binary);
      std::string bytes(1024, '\0');
      random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      std::ofstream(key, std::ios::binary) << bytes;
    }
    ::chmod(key.c_str(), 0600);
  }

  TempDir dir_{"ddl_munged"};
  std::optional<ChildProcess> daemon_;
  std::string skip_reason_;
};

}  // namespace ddl::testing
