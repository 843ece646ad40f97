// Helpers for the store tests: options for a loopback store on an ephemeral port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tests/support/poll.h"
#include "tests/support/ports.h"
#include "store/tcp_store.h"

namespace ddl::testing {

inline TcpStoreOptions loopback_options(std::uint16_t port, int rank = 0, int world_size = 1) {
  TcpStoreOptions o;
  o.endpoint = env::Endpoint{"127.0.0.1", port};
  o.job_id = "job-test";
  o.secret = "s3cret";
  o.rank = rank;
  o.world_size = world_size;
  o.connect_timeout = std::chrono::milliseconds(10'000);
  o.io_timeout = std::chrono::milliseconds(10'000);
  return o;
}

// A port nobody listens on right now.
inline std::uint16_t unused_port() { return free_port(); }

}  // namespace ddl::testing
