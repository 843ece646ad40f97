// Free TCP ports for the workers of one node.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "env/error.h"

namespace ddl::net {

// The address could not be bound at all (not a local address, no free ports, ...).
class PortError : public Error {
 public:
  explicit PortError(const std::string& what) : Error(kExitError, "", what) {}
};

// Returns `count` distinct ports that were bindable on IPv4 `host` a moment ago: all sockets are
// bound to port 0 at the same time (so the kernel never hands out one twice) and closed before
// returning. Another process may still take a port before a worker binds it; workers should treat
// "address in use" as a launch failure. Throws PortError naming the host and the errno text.
std::vector<std::uint16_t> pick_free_ports(const std::string& host, int count);

// The IPv4 address of `host` (an address is returned as it is; a name is resolved). Throws
// PortError naming the host when it does not resolve to an IPv4 address.
std::string resolve_ipv4(const std::string& host);

// The local IPv4 address the kernel would use to reach `host`:`port` (a UDP socket is connected,
// nothing is sent): the address other nodes can reach this one at. Throws PortError.
std::string route_address_towards(const std::string& host, std::uint16_t port);

}  // namespace ddl::net
