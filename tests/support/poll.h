// Waiting for conditions with deadlines, and measuring how long things took.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace ddl::testing {

// Polls `done` every `every` until it holds (true) or `timeout` passes (false).
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds every = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace ddl::testing
