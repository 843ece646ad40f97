#include "net/ports.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

namespace ddl::net {
namespace {

// Closes the sockets it holds; not copyable.
class SocketSet {
 public:
  SocketSet() = default;
  SocketSet(const SocketSet&) = delete;
  SocketSet& operator=(const SocketSet&) = delete;
  ~SocketSet() {
    for (int fd : fds_) ::close(fd);
  }
  void add(int fd) { fds_.push_back(fd); }

 private:
  std::vector<int> fds_;
};

[[noreturn]] void fail(const std::string& host, const std::string& what, int err) {
  throw PortError("cannot pick a free port on " + host + ": " + what + ": " + std::strerror(err));
}

}  // namespace

std::vector<std::uint16_t> pick_free_ports(const std::string& host, int count) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  // A host name ("localhost") binds its first IPv4 address.
  ::inet_pton(AF_INET, resolve_ipv4(host).c_str(), &addr.sin_addr);
  SocketSet sockets;
  std::vector<std::uint16_t> ports;
  std::set<std::uint16_t> seen;
  // A few extra attempts in case the kernel hands out a port we already hold on another socket
  // family; it should not, but the loop must not spin forever either.
  for (int attempt = 0; static_cast<int>(ports.size()) < count && attempt < count + 64; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail(host, "socket()", errno);
    sockets.add(fd);
    addr.sin_port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      fail(host, "bind()", errno);
    sockaddr_in bound{};
    socklen_t len = sizeof(bound);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      fail(host, "getsockname()", errno);
    }
    const std::uint16_t port = ntohs(bound.sin_port);
    if (port != 0 && seen.insert(port).second) ports.push_back(port);
  }
  if (static_cast<int>(ports.size()) < count) {
    throw PortError("cannot pick " + std::to_string(count) + " distinct free ports on " + host +
                    ": got only " + std::to_string(ports.size()));
  }
  return ports;
}

std::string resolve_ipv4(const std::string& host) {
  in_addr parsed{};
  if (::inet_pton(AF_INET, host.c_str(), &parsed) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw PortError("cannot resolve host '" + host + "' to an IPv4 address: " +
                    (rc != 0 ? std::string(::gai_strerror(rc)) : std::string("no address")));
  }
  char text[INET_ADDRSTRLEN] = {};
  const auto* addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::inet_ntop(AF_INET, &addr->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  return text;
}

std::string route_address_towards(const std::string& host, std::uint16_t port) {
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(port);
  const std::string ip = resolve_ipv4(host);
  ::inet_pton(AF_INET, ip.c_str(), &peer.sin_addr);
  SocketSet sockets;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(host, "socket()", errno);
  sockets.add(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) != 0) {
    throw PortError("cannot find this node's address towards " + host + ": connect(): " +
                    std::strerror(errno));
  }
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    fail(host, "getsockname()", errno);
  }
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

}  // namespace ddl::net
