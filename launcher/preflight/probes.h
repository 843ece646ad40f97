// What the pre-flight check (check.h) measures on one node: its compute and its links to the
// other nodes' launchers. Plain sockets and a plain matmul: the launcher links no LibTorch, and
// the numbers only need to compare nodes with each other.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "launcher/health/preflight.h"

namespace ddl::launcher::preflight {

// Multiplies 128x128 float matrices for `window` of wall-clock time and returns the rate in
// GFLOP/s: a node the scheduler gives less CPU, or a slower CPU, does fewer in the same window.
double measure_matmul(std::chrono::milliseconds window);

// How long a link probe streams, and the most it sends: long enough that a sender or receiver
// descheduled for a few milliseconds (nodes sharing a machine) does not halve the figure.
inline constexpr std::chrono::milliseconds kLinkWindow{100};
inline constexpr std::int64_t kMaxLinkBytes = std::int64_t{1} << 30;

// The receiving side of the link probes: listens on `host` (a free port), takes every
// connection that presents `token` first (others are closed), echoes one byte, counts what
// arrives until the sender closes its side and answers with the count (8 bytes). Each connection is
// served by a thread of its own (at most 16 at once), each read with a deadline. Stops (joining its
// threads) when destroyed. Throws std::runtime_error naming the host when it cannot listen.
class LinkServer {
 public:
  LinkServer(const std::string& host, std::string token);
  ~LinkServer();
  LinkServer(const LinkServer&) = delete;
  LinkServer& operator=(const LinkServer&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  void accept_loop();
  void serve(int fd);

  std::string token_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> serving_{0};
  std::mutex mutex_;
  std::vector<std::thread> connections_;
  std::thread acceptor_;
};

// Streams to the LinkServer at host:port (presenting `token`) for `window`, then reads how much
// arrived: the round trip of one byte, then the rate of what the server received (its count over
// the time until its answer, so what the sender's buffers held is counted only once delivered).
// Everything happens within `deadline` of wall-clock time. A connection that cannot be made, or
// breaks, or no answer by the deadline, is a failed link (`error` says why).
LinkCheck probe_link(int peer, const std::string& host, std::uint16_t port,
                     const std::string& token, std::chrono::milliseconds window,
                     std::chrono::milliseconds deadline);

}  // namespace ddl::launcher::preflight
