// What the tests of both control planes (control_test.cpp, etcd_control_test.cpp) give their
// "nodes": a job description and a node's worker endpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "env/contract.h"
#include "launcher/coord/records.h"

namespace ddl::launcher::control_fixtures {

inline JobDescription description(int nproc) {
  return {{"nnodes", "2"}, {"nproc_per_node", std::to_string(nproc)}, {"worker program", "w"}};
}

// `n` endpoints on `host` from port `first` up.
inline std::vector<env::Endpoint> endpoints(const std::string& host, std::uint16_t first, int n) {
  std::vector<env::Endpoint> out;
  for (int i = 0; i < n; ++i) out.push_back({host, static_cast<std::uint16_t>(first + i)});
  return out;
}

}  // namespace ddl::launcher::control_fixtures
