#include "net/conn_limits.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddl::net {

const char* rejection_name(Rejection kind) {
  switch (kind) {
    case Rejection::kHandshakeTimeout:
      return "handshake timeouts";
    case Rejection::kClosedEarly:
      return "closed before the handshake";
    case Rejection::kBadFrame:
      return "bad frames";
    case Rejection::kRefusedHello:
      return "refused hellos";
    case Rejection::kServerCap:
      return "over the server's pending cap";
    case Rejection::kAddressCap:
      return "over the per-address pending cap";
    case Rejection::kLowDescriptors:
      return "closed to keep the descriptor reserve";
    case Rejection::kAcceptFailed:
      return "failed accepts";
    case Rejection::kEvicted:
      return "evicted for newer connections";
  }
  return "other";
}

std::optional<Rejection> PendingLimits::check(const std::string& address) const {
  if (total_ >= max_total_) return Rejection::kServerCap;
  if (from(address) >= max_per_address_) return Rejection::kAddressCap;
  return std::nullopt;
}

void PendingLimits::add(const std::string& address) {
  ++total_;
  ++per_address_[address];
}

void PendingLimits::remove(const std::string& address) {
  auto it = per_address_.find(address);
  if (it == per_address_.end()) return;
  if (--it->second == 0) per_address_.erase(it);
  --total_;
}

std::size_t PendingLimits::from(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

std::size_t open_descriptor_count() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  std::size_t n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n > 0 ? n - 1 : 0;  // less the directory's own descriptor
}

std::size_t free_descriptors(int newest_fd, std::size_t reserve) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  const auto limit = static_cast<std::size_t>(lim.rlim_cur);
  // Descriptors are handed out lowest first, so 0..newest_fd are all open.
  std::size_t open = newest_fd >= 0 ? static_cast<std::size_t>(newest_fd) + 1 : 0;
  if (open + reserve >= limit / 2) open = std::max(open, open_descriptor_count());
  return open >= limit ? 0 : limit - open;
}

void RejectionTally::count(Rejection kind, const std::string& address) {
  ++counts_[static_cast<std::size_t>(kind)];
  ++total_;
  if (addresses_.size() < 1024) addresses_.insert(address);  // bounded: a count, not a list
}

std::string with_thousands(std::size_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string RejectionTally::summarize_and_clear(std::chrono::milliseconds interval) {
  const std::size_t addresses = addresses_.size();
  std::string line = "refused " + with_thousands(total_) +
                     (total_ == 1 ? " connection" : " connections") + " from " +
                     (addresses >= 1024 ? "1,024 or more" : with_thousands(addresses)) +
                     (addresses == 1 ? " address" : " addresses") + " in the last " +
                     std::to_string(std::max<long long>(1, (interval.count() + 999) / 1000)) +
                     " s, before they authenticated:";
  const char* sep = " ";
  for (std::size_t k = 0; k < kRejectionKinds; ++k) {
    if (counts_[k] == 0) continue;
    line += sep + with_thousands(counts_[k]) + " " + rejection_name(static_cast<Rejection>(k));
    sep = ", ";
  }
  counts_.fill(0);
  total_ = 0;
  addresses_.clear();
  return line;
}

std::string raise_open_file_limit(std::size_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    return std::string("could not read the open-file limit: ") + std::strerror(errno);
  }
  if (lim.rlim_cur != lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= wanted) return "";
  // What a server of this process can still hold: the limit less what is open and the reserve
  // every server keeps (ServerOptions::descriptor_reserve's default).
  constexpr std::size_t kReserve = 128;
  const std::size_t used = open_descriptor_count() + kReserve;
  const std::size_t holdable = lim.rlim_cur > used ? lim.rlim_cur - used : 0;
  return "the open-file limit is " + std::to_string(lim.rlim_cur) + " (hard limit " +
         (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
         "), below the " + std::to_string(wanted) + " wanted: a store hosted here holds at most " +
         "about " + with_thousands(holdable) +
         " client connections and refuses unauthenticated ones sooner (raise it with ulimit -n)";
}

}  // namespace ddl::net
