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

#include "launcher/ports.h"
#include "worker/tcp_store.h"

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

// A port nobody listens on right now (the launcher's picker: bound to 127.0.0.1:0, released).
inline std::uint16_t unused_port() { return launcher::pick_free_ports("127.0.0.1", 1).front(); }

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace ddl::testing
