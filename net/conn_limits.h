// What a framed server (net/server.h) allows a connection that has not authenticated yet, and how
// it reports the ones it turns away. Kept apart from the handshake's contents (server.cpp) so the
// policy can be read, and tested, on its own.
//
//  - PendingLimits counts connections still in their handshake, per server and per peer address,
//    and says whether one more may start.
//  - free_descriptors() says how many more descriptors this process may open, so a server can
//    keep a reserve for the job's own files, pipes and connections.
//  - RejectionTally counts connections turned away, by kind and address, for one summary line
//    per interval instead of one line each.
//  - raise_open_file_limit() raises the soft RLIMIT_NOFILE to the hard limit (process start).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace ddl::net {

// Why a connection was turned away before it authenticated.
enum class Rejection {
  kHandshakeTimeout,  // said nothing (or not a whole hello) within the pre-auth deadline
  kClosedEarly,       // closed (or reset) before completing the handshake
  kBadFrame,          // sent bytes that are not a hello of this protocol
  kRefusedHello,      // a well-formed hello refused (job id, service, secret)
  kServerCap,         // over the server's cap of pending handshakes
  kAddressCap,        // over the cap of pending handshakes from one address
  kLowDescriptors,    // accepted while free descriptors were below the reserve
  kAcceptFailed,      // accept() itself failed (e.g. EMFILE); the server paused accepting
  kEvicted,           // still in its handshake when a pending cap was reached, the oldest one
                      // there: closed to make room for a newer connection
};
inline constexpr std::size_t kRejectionKinds = 9;

// Plural noun phrase for a count of `kind`: "handshake timeouts".
const char* rejection_name(Rejection kind);

// Pending (unauthenticated) connections of one server. Server thread only.
class PendingLimits {
 public:
  PendingLimits(std::size_t max_total, std::size_t max_per_address)
      : max_total_(max_total), max_per_address_(max_per_address) {}

  // The rejection a new connection from `address` meets, or nullopt (then call add()).
  std::optional<Rejection> check(const std::string& address) const;
  void add(const std::string& address);
  void remove(const std::string& address);  // the connection authenticated or closed
  std::size_t total() const { return total_; }
  std::size_t from(const std::string& address) const;

 private:
  std::size_t max_total_;
  std::size_t max_per_address_;
  std::size_t total_ = 0;
  std::unordered_map<std::string, std::size_t> per_address_;
};

// The pending caps (total, per address) a server uses: the configured ones, raised to hold
// `expected_clients` (the job's own connections) plus the configured per-address share, so that a
// stranger's address still has its usual room beside every member in its handshake at once.
struct PendingCaps {
  std::size_t total;
  std::size_t per_address;
};
inline PendingCaps pending_caps_for(std::size_t max_total, std::size_t max_per_address,
                                    std::size_t expected_clients) {
  if (expected_clients == 0) return {max_total, max_per_address};
  const std::size_t wanted = expected_clients + max_per_address;
  return {wanted > max_total ? wanted : max_total,
          wanted > max_per_address ? wanted : max_per_address};
}

// Descriptors this process may still open: the soft RLIMIT_NOFILE less those open. `newest_fd`
// (a descriptor just opened, the lowest free one) bounds the count from below at no cost; the
// exact count (reading /proc/self/fd) is taken only when that bound is within `reserve` of the
// limit's half, so a server accepting thousands of connections does not list its descriptors
// for each one.
std::size_t free_descriptors(int newest_fd, std::size_t reserve);
// Descriptors open in this process (/proc/self/fd); 0 when it cannot be read.
std::size_t open_descriptor_count();

// Connections turned away in the current interval. Server thread only.
class RejectionTally {
 public:
  void count(Rejection kind, const std::string& address);
  bool empty() const { return total_ == 0; }
  std::size_t total() const { return total_; }
  std::size_t count_of(Rejection kind) const { return counts_[static_cast<std::size_t>(kind)]; }
  // "refused 1,234 connections from 3 addresses in the last 10 s: 1,200 handshake timeouts,
  // 34 bad frames", then clears the tally.
  std::string summarize_and_clear(std::chrono::milliseconds interval);

 private:
  std::array<std::size_t, kRejectionKinds> counts_{};
  std::size_t total_ = 0;
  std::unordered_set<std::string> addresses_;
};

// "1,234".
std::string with_thousands(std::size_t n);

// Raises the soft RLIMIT_NOFILE to the hard limit. Returns "" when the soft limit is now at least
// `wanted`, else one line saying what it is, that it could not be raised further, and about how
// many client connections a server of this process can still hold (for the caller to log once).
std::string raise_open_file_limit(std::size_t wanted);
// What launch and the ranks ask for: room for the job's own descriptors beside every server's
// pending cap and reserve.
inline constexpr std::size_t kWantedOpenFiles = 4096;
// What the rank hosting the store of `world_size` ranks asks for: kWantedOpenFiles beside one
// descriptor per rank's store connection and one per rank's peer connection.
inline std::size_t wanted_open_files(std::size_t world_size) {
  return kWantedOpenFiles + 2 * world_size;
}

}  // namespace ddl::net
