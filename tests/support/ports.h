// Free loopback ports for tests, from the launcher's own picker (net/ports.h).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "net/ports.h"

namespace ddl::testing {

// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then closed).
inline std::uint16_t free_port() { return net::pick_free_ports("127.0.0.1", 1).front(); }

// Whether `port` can be bound on 127.0.0.1 right now.
inline bool bindable_on_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A port P for a job's launchers to bind later (--master_port, --started_port): P - 1 .. P + 14
// are free on 127.0.0.1 now (the control store may take P - 1 or P + 1, the ranks P, P + 1, ...),
// all above Linux's default ephemeral range (32768..60999), so that no connect on this host (the
// other nodes' retries to P included) is given one of them as its source port before the job
// binds it. Successive calls in one process return disjoint blocks; spread by pid.
inline std::uint16_t free_port_block_above_ephemeral() {
  constexpr int kBlock = 16, kFirst = 61000, kBlocks = (65000 - kFirst) / kBlock;
  static std::atomic<int> next{static_cast<int>(::getpid() % kBlocks)};
  for (int attempt = 0; attempt < kBlocks; ++attempt) {
    const int base = kFirst + (next.fetch_add(1) % kBlocks) * kBlock;
    bool free = true;
    for (int port = base; free && port < base + kBlock; ++port) free = bindable_on_loopback(port);
    if (free) return static_cast<std::uint16_t>(base + 1);
  }
  throw std::runtime_error("no 16 free ports in a row in 61000..65000 on 127.0.0.1");
}

}  // namespace ddl::testing
