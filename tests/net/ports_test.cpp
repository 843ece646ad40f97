// net/ports.h: free ports are distinct and bindable; a host that is not local is a PortError.
#include "net/ports.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

namespace ddl::net {
namespace {

TEST(Ports, DistinctAndBindable) {
  const std::vector<std::uint16_t> ports = pick_free_ports("127.0.0.1", 16);
  ASSERT_EQ(ports.size(), 16u);
  EXPECT_EQ(std::set<std::uint16_t>(ports.begin(), ports.end()).size(), 16u);
  for (std::uint16_t port : ports) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
    ::close(fd);
  }
}

TEST(Ports, BadHost) {
  EXPECT_THROW(pick_free_ports("not-an-ip", 1), PortError);
  EXPECT_THROW(pick_free_ports("203.0.113.7", 1), PortError);  // not an address of this machine
}

}  // namespace
}  // namespace ddl::net
