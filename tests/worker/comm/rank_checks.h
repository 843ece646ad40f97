// Checks for the communicator tests whose ranks run as processes (tests/support/multiprocess.h):
// inside a rank a failed check throws (the process exits 1 with the message); in the test body,
// every rank must have exited 0.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/multiprocess.h"
#include "worker/comm/comm_error.h"

namespace ddl::testing {

// Inside a rank: throws `what` unless `ok`.
inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Inside a rank: runs `body`, which must throw CommError with every one of `parts` in its message.
template <typename F>
void require_comm_error(F&& body, const std::vector<std::string>& parts, const std::string& what) {
  try {
    body();
  } catch (const CommError& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      require(message.find(part) != std::string::npos,
              what + ": message lacks '" + part + "': " + message);
    }
    return;
  }
  throw std::runtime_error(what + ": no CommError");
}

// The message of the CommError `call` throws, or "no CommError".
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const CommError& e) {
    return e.what();
  }
  return "no CommError";
}

// In the test body: every rank exited 0.
inline void expect_all_ok(const std::vector<RankResult>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].exited && results[r].signal == 0 && results[r].exit_code == 0)
        << "rank " << r << ": " << describe(results[r]);
  }
}

}  // namespace ddl::testing
