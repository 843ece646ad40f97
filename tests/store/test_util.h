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

// A port nobody listens on right now: bound to 127.0.0.1:0 and released.
inline std::uint16_t unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind/getsockname on 127.0.0.1:0 failed");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace ddl::testing
