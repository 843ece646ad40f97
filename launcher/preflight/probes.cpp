#include "launcher/preflight/probes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "net/ports.h"

namespace ddl::launcher::preflight {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kMatrix = 128;
constexpr int kMaxConnections = 16;
constexpr milliseconds kServeTimeout{10'000};
constexpr std::size_t kChunk = 256 << 10;

// C += A * B for kMatrix x kMatrix matrices, row-major (the i-k-j order vectorizes).
void multiply(const float* __restrict a, const float* __restrict b, float* __restrict c) {
  for (int i = 0; i < kMatrix; ++i) {
    for (int k = 0; k < kMatrix; ++k) {
      const float x = a[i * kMatrix + k];
      for (int j = 0; j < kMatrix; ++j) c[i * kMatrix + j] += x * b[k * kMatrix + j];
    }
  }
}

std::string errno_text(int e) { return std::strerror(e); }

milliseconds left(Clock::time_point deadline) {
  return std::max(milliseconds(0),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// Waits until `fd` is ready for `events` or `deadline`; false on the deadline.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int rc = ::poll(&p, 1, static_cast<int>(left(deadline).count()));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Reads exactly `n` bytes into `out` by `deadline`; returns how many arrived.
std::size_t read_full(int fd, char* out, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    if (!wait_for(fd, POLLIN, deadline)) break;
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
      break;
    }
  }
  return got;
}

// Writes `n` bytes (zeros when `data` is null) by `deadline`; returns how many went.
std::size_t write_full(int fd, const char* data, std::size_t n, Clock::time_point deadline) {
  static const std::vector<char> zeros(kChunk, 0);
  std::size_t sent = 0;
  while (sent < n) {
    if (!wait_for(fd, POLLOUT, deadline)) break;
    const char* from = data ? data + sent : zeros.data();
    const std::size_t want = data ? n - sent : std::min(n - sent, zeros.size());
    const ssize_t w = ::send(fd, from, want, MSG_NOSIGNAL);
    if (w > 0) {
      sent += static_cast<std::size_t>(w);
    } else if (w < 0 && errno != EINTR && errno != EAGAIN) {
      break;
    }
  }
  return sent;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

double measure_matmul(milliseconds window) {
  std::vector<float> a(kMatrix * kMatrix), b(kMatrix * kMatrix), c(kMatrix * kMatrix, 0.f);
  for (int i = 0; i < kMatrix * kMatrix; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  const auto start = Clock::now();
  const auto end = start + window;
  std::int64_t products = 0;
  do {
    multiply(a.data(), b.data(), c.data());
    ++products;
  } while (Clock::now() < end);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Keep the result observable so the products are not optimized away.
  volatile float sink = c[kMatrix * kMatrix / 2];
  (void)sink;
  return 2.0 * kMatrix * kMatrix * kMatrix * static_cast<double>(products) / seconds / 1e9;
}

LinkServer::LinkServer(const std::string& host, std::string token) : token_(std::move(token)) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener_ < 0) throw std::runtime_error("cannot make a socket: " + errno_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  const std::string ip = net::resolve_ipv4(host);
  if (::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1 ||
      ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_, 64) != 0) {
    const int e = errno;
    ::close(listener_);
    throw std::runtime_error("cannot listen on " + host + " for the link probes: " + errno_text(e));
  }
  socklen_t len = sizeof addr;
  ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  set_nonblocking(listener_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

LinkServer::~LinkServer() {
  stopping_ = true;
  acceptor_.join();
  ::close(listener_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::thread& t : connections_) t.join();
}

void LinkServer::accept_loop() {
  while (!stopping_) {
    if (!wait_for(listener_, POLLIN, Clock::now() + milliseconds(20))) continue;
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    if (serving_ >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    ++serving_;
    std::lock_guard<std::mutex> lock(mutex_);
    connections_.emplace_back([this, fd] {
      serve(fd);
      ::close(fd);
      --serving_;
    });
  }
}

void LinkServer::serve(int fd) {
  const auto deadline = Clock::now() + kServeTimeout;
  std::string token(token_.size(), '\0');
  if (read_full(fd, token.data(), token.size(), deadline) != token.size() || token != token_) {
    return;  // not one of the job's launchers
  }
  char ping = 0;
  if (read_full(fd, &ping, 1, deadline) != 1 || write_full(fd, &ping, 1, deadline) != 1) return;
  // Count until the sender closes its side.
  std::vector<char> buffer(kChunk);
  std::uint64_t count = 0;
  while (wait_for(fd, POLLIN, deadline)) {
    const ssize_t r = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return;
    }
    count += static_cast<std::uint64_t>(r);
  }
  const std::uint64_t wire = htobe64(count);
  write_full(fd, reinterpret_cast<const char*>(&wire), sizeof wire, deadline);
  // Wait for the sender to close first, so that the TIME_WAIT is on its side.
  char rest = 0;
  read_full(fd, &rest, 1, Clock::now() + milliseconds(1000));
}

LinkCheck probe_link(int peer, const std::string& host, std::uint16_t port,
                     const std::string& token, milliseconds window, milliseconds within) {
  LinkCheck check;
  check.peer = peer;
  const auto deadline = Clock::now() + within;
  const std::string where = host + ":" + std::to_string(port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    check.error = "cannot make a socket: " + errno_text(errno);
    return check;
  }
  auto fail = [&](const std::string& why) {
    ::close(fd);
    check.error = why;
    return check;
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  std::string ip;
  try {
    ip = net::resolve_ipv4(host);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    return fail("cannot connect to " + where + ": " + errno_text(errno));
  }
  if (!wait_for(fd, POLLOUT, deadline)) {
    return fail("no connection to " + where + " within " + std::to_string(within.count()) + " ms");
  }
  int error = 0;
  socklen_t len = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
  if (error != 0) return fail("cannot connect to " + where + ": " + errno_text(error));

  if (write_full(fd, token.data(), token.size(), deadline) != token.size()) {
    return fail(where + " closed the connection");
  }
  const auto ping_at = Clock::now();
  char ping = 'p';
  if (write_full(fd, &ping, 1, deadline) != 1 || read_full(fd, &ping, 1, deadline) != 1) {
    return fail(where + " did not answer the probe (is it this job's launcher?)");
  }
  check.round_trip_ms = std::chrono::duration<double, std::milli>(Clock::now() - ping_at).count();
  // Stream for the window (the send buffer kept small, so little waits in it at the end).
  const int buffer = 512 << 10;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  const auto start = Clock::now();
  const auto stop = std::min(start + window, deadline);
  std::int64_t sent = 0;
  while (Clock::now() < stop && sent < kMaxLinkBytes) {
    const std::size_t went = write_full(fd, nullptr, kChunk, stop);
    sent += static_cast<std::int64_t>(went);
    if (went < kChunk && Clock::now() < stop) break;  // broken
  }
  ::shutdown(fd, SHUT_WR);
  std::uint64_t wire = 0;
  const bool answered =
      read_full(fd, reinterpret_cast<char*>(&wire), sizeof wire, deadline) == sizeof wire;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ::close(fd);
  if (!answered) {
    check.error = where + " did not say what arrived (" + std::to_string(sent) +
                  " bytes sent) within " + std::to_string(within.count()) + " ms";
    return check;
  }
  const std::uint64_t arrived = be64toh(wire);
  if (arrived == 0) {
    check.error = where + " received nothing";
    return check;
  }
  check.megabytes_per_s = static_cast<double>(arrived) / 1e6 / std::max(seconds, 1e-6);
  return check;
}

}  // namespace ddl::launcher::preflight
