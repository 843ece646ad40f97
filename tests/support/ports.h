// Free loopback ports for tests, from the launcher's own picker (net/ports.h).
#pragma once

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

}  // namespace ddl::testing
