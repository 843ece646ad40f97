// What the fault suites share about a real training job: where train_mnist and the data are, a
// skip when the data has not been fetched, and reading a rank's JSON summary line.
#pragma once

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/launch/launch_helpers.h"

namespace ddl::launch_test {

inline const std::string kTrain = kBin + "/train_mnist";
inline const std::string kData = std::string(DDL_SOURCE_DIR) + "/data/mnist";

#define SKIP_WITHOUT_DATA()                                                      \
  if (!std::filesystem::exists(::ddl::launch_test::kData + "/train-images-idx3-ubyte")) \
  GTEST_SKIP() << ::ddl::launch_test::kData << " is missing: run scripts/setup.sh first"

inline std::vector<std::string> concat(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The JSON summary line of rank `rank`'s log (the last line starting with '{'); null if none.
inline nlohmann::json summary_of(const fs::path& log_dir, int rank) {
  std::istringstream in(worker_log(log_dir, rank));
  nlohmann::json found;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') found = nlohmann::json::parse(line, nullptr, false);
  }
  return found;
}

}  // namespace ddl::launch_test
