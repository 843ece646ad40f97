// Running a training program (train_mnist, train_model_parallel) and reading what it wrote: the
// seed's progress lines (`epoch: E, batch: B, loss is: [L]`), the per-epoch test accuracy lines
// and the JSON summary lines. Shared by the end-to-end suites.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace ddl::testing {

struct RunResult {
  int exit_code = -1;  // -1: killed at the deadline or by a signal
  std::string output;  // stdout and stderr together
};

// Runs argv in its own process group with stdout+stderr to `log`; kills the group at `timeout`.
inline RunResult run_program(const std::vector<std::string>& args, const std::string& log,
                             std::chrono::seconds timeout) {
  SpawnOptions options;
  options.argv = args;
  options.stdout_path = log;
  options.own_process_group = true;
  ChildProcess child(std::move(options));
  RunResult result;
  const std::optional<int> code = child.wait(timeout);
  result.output = read_file(log);
  if (!code) {
    result.output += "\n[test] killed after " + std::to_string(timeout.count()) + " s";
    return result;
  }
  result.exit_code = child.signaled() ? -1 : *code;
  return result;
}

struct RankLog {
  std::vector<double> losses;
  int accuracy_lines = 0;
  std::vector<nlohmann::json> summaries;
};

inline RankLog parse_rank_log(const std::string& text) {
  static const std::regex progress(R"(^epoch: (\d+), batch: (\d+), loss is: \[([-+0-9.eE]+)\]$)");
  static const std::regex accuracy(R"(^epoch: \d+, test accuracy: [0-9.]+ \(\d+/\d+\)$)");
  RankLog r;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, progress)) {
      r.losses.push_back(std::stod(m[3]));
    } else if (std::regex_match(line, accuracy)) {
      ++r.accuracy_lines;
    } else if (!line.empty() && line.front() == '{') {
      r.summaries.push_back(nlohmann::json::parse(line));
    }
  }
  return r;
}

// The fetched MNIST (scripts/fetch_mnist.sh) under the source tree.
inline std::string mnist_data_dir() { return std::string(DDL_SOURCE_DIR) + "/data/mnist"; }
inline bool have_mnist_data() {
  return std::filesystem::exists(mnist_data_dir() + "/train-images-idx3-ubyte");
}

}  // namespace ddl::testing
