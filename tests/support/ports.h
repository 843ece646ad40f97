// Free loopback ports for tests, from the launcher's own picker (net/ports.h).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "net/ports.h"

namespace ddl::testing {

// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then closed).
inline std::uint16_t free_port() { return net::pick_free_ports("127.0.0.1", 1).front(); }

// The same, below `limit`, so that the ports after it exist too (--started_port P uses P, P+1, ...).
inline std::uint16_t free_port_below(std::uint16_t limit) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const std::uint16_t port = free_port();
    if (port < limit) return port;
  }
  throw std::runtime_error("no free port below " + std::to_string(limit) + " on 127.0.0.1");
}

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

// P such that P and P + 1 are free on 127.0.0.1, both above Linux's default ephemeral range
// (32768..60999): where many processes retry connects to P + 1 before it is bound, the ports
// their connects take can never be P + 1 itself. Spread by pid so concurrent tests differ.
inline std::uint16_t free_port_pair_above_ephemeral() {
  for (int port = 61000 + static_cast<int>(::getpid() % 1000) * 4; port < 65000; port += 2) {
    if (bindable_on_loopback(port) && bindable_on_loopback(port + 1)) {
      return static_cast<std::uint16_t>(port);
    }
  }
  throw std::runtime_error("no two free ports in 61000..65000 on 127.0.0.1");
}

}  // namespace ddl::testing
