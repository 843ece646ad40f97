// Timeouts and deadlines shared by the transport and the stores: one cap, one clamp, one clock.
#pragma once

#include <algorithm>
#include <chrono>

namespace ddl::net {

// Longest wait honoured anywhere; longer timeouts are clamped to it so deadline arithmetic on
// steady_clock cannot overflow.
inline constexpr std::chrono::milliseconds kMaxTimeout{std::chrono::hours(24 * 365)};

// `timeout` clamped to [0, kMaxTimeout].
inline std::chrono::milliseconds clamp_timeout(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds(0), kMaxTimeout);
}

// now + clamp_timeout(timeout), on steady_clock.
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + clamp_timeout(timeout);
}

}  // namespace ddl::net
