// A FIFO for tests of code that must not block on one, and a guard that ends such a test instead
// of hanging it when the code does block.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>

namespace ddl::testing {

// Makes a FIFO at `path` (no reader, no writer). Throws std::runtime_error when it cannot.
inline void make_fifo(const std::string& path) {
  if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed for " + path);
}

// Runs `body` on another thread and returns true when it returned within `timeout`. Otherwise
// opens `fifo` for writing and closes it again, which releases a reader blocked in open() or
// read() on it (it sees end of file), waits for `body` to end, and returns false.
inline bool returns_within(const std::string& fifo, std::chrono::milliseconds timeout,
                           const std::function<void()>& body) {
  std::future<void> done = std::async(std::launch::async, body);
  if (done.wait_for(timeout) == std::future_status::ready) {
    done.get();
    return true;
  }
  const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
  done.wait();
  return false;
}

}  // namespace ddl::testing
